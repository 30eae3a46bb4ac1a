"""``get_train_dataset(..., bucket_config=...)``: the bucketed plan and its materializer.

The plan is ``samples(split) -> slice_shuffle(max_samples_per_sequence) -> bucket_batches``
(global mode: one bucket per step on every rank); each recipe carries its bucket's shape, and
the materializer encodes it with ``task_encoder.for_bucket(recipe.shape)``. See docs/buckets.md.
"""

from __future__ import annotations

from fpipe.core import Pipeline
from fpipe.core.errors import ConfigError
from fpipe.datasets.mix import _open, dataset_view
from fpipe.loader.planned import PlannedDataset
from fpipe.materialize.materializer import Materializer
from fpipe.plan import bucket_batches, load_bucket_config, slice_shuffle

__all__ = ["bucketed_dataset"]


def _bucket_columns(ds) -> tuple[str, str, str | None]:
    """The width, height and frame-count columns of a dataset's index, for bucketing."""
    names = tuple(ds.column_names)
    missing = [c for c in ("width", "height") if c not in names]
    if missing:
        raise ConfigError(
            f"bucket_config needs the index columns width and height; {missing} missing "
            f"(columns: {list(names)}). Prepare the dataset with its media field, or add them "
            "to the table (OpenSora's CSV has num_frames, height, width)"
        )
    frames = next((c for c in ("num_frames", "frames") if c in names), None)
    if frames is None:
        frames = next((c for c in names if c.endswith(".frames")), None)
    return "width", "height", frames


def bucketed_dataset(path, bucket_config, bucket_window, topo, **kw) -> PlannedDataset:
    """``get_train_dataset`` with a bucket_config (``kw``: its other arguments, checked)."""
    from fpipe.encode import DefaultTaskEncoder
    from fpipe.storage.config.metadataset import is_metadataset

    if is_metadataset(path):
        raise ConfigError(f"{path}: bucket_config does not take a metadataset yet; give a dataset")
    table = load_bucket_config(bucket_config)
    width, height, frames = _bucket_columns(_open(path, kw["open_kwargs"]))
    cols = tuple(dict.fromkeys((*kw["columns"], width, height, *([frames] if frames else []))))
    overrides = {k: kw[k] for k in ("sample_type", "field_map", "subflavors", "open_kwargs")}
    source, view = dataset_view(path, kw["split"], overrides=overrides, columns=cols)
    view = slice_shuffle(view, kw["max_samples_per_sequence"] or 1)
    src = bucket_batches(
        view,
        table,
        rank=topo.rank,
        world_size=topo.world_size,
        drop_last=kw["drop_last"],
        num_epochs=kw["num_epochs"],
        window=bucket_window,
        width=width,
        height=height,
        frames=frames,
    )
    mat = Materializer(
        [source],
        kw["task_encoder"] or DefaultTaskEncoder(),
        image_decode=kw["image_decode"],
        error_policy=kw["error_policy"],
        decode_limits=kw.get("decode_limits"),
    )
    plan = Pipeline(src, seed=kw["seed"])
    return PlannedDataset(plan=plan, materializer=mat, topology=topo, batch_size=0, buckets=table)
