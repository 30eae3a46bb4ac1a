"""``get_train_dataset(..., bucket_config=...)``: the bucketed plan and its materializer.

The plan is ``samples(split) -> slice_shuffle(max_samples_per_sequence) -> bucket_batches``
(global mode: one bucket per step on every rank); each recipe carries its bucket's shape, and
the materializer encodes it with ``task_encoder.for_bucket(recipe.shape)``. See docs/buckets.md.
"""

from __future__ import annotations

from fpipe.core import Pipeline
from fpipe.core.errors import ConfigError
from fpipe.datasets._mix import shard_slices
from fpipe.datasets._views import dataset_view, open_path
from fpipe.datasets.options import DatasetOptions
from fpipe.encode.hook_forms import groups_batches
from fpipe.loader.planned import PlannedDataset
from fpipe.materialize.materializer import Materializer
from fpipe.plan import bucket_batches, load_bucket_config, slice_shuffle
from fpipe.plan.shard_slices import ragged_slice_shuffle

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


def _check_options(options: DatasetOptions) -> None:
    """Refuse the options that a bucketed plan cannot honour."""
    sizes = (options.batch_size, options.global_batch_size, options.rampup_batch_size)
    if any(s is not None for s in sizes):
        raise ConfigError(
            "with bucket_config each bucket sets its own batch size; leave out batch_size, "
            "global_batch_size and rampup_batch_size"
        )
    if options.distribution != "global":
        raise ConfigError(
            "bucket_config works in global distribution mode only (every rank takes the "
            "same bucket at every step); drop distribution='per_rank' / 'energon'"
        )
    if options.plan_stages or options.packing_buffer_size:
        raise ConfigError("plan_stages and packing_buffer_size do not combine with bucket_config")


def bucketed_dataset(path, options: DatasetOptions, topo) -> PlannedDataset:
    """``get_train_dataset`` with ``options.bucket_config`` (and ``bucket_window``)."""
    from fpipe.encode import DefaultTaskEncoder
    from fpipe.storage.config.metadataset import is_metadataset

    _check_options(options)
    if is_metadataset(path):
        raise ConfigError(f"{path}: bucket_config does not take a metadataset yet; give a dataset")
    table = load_bucket_config(options.bucket_config)
    width, height, frames = _bucket_columns(open_path(path, options.open_kwargs))
    cols = tuple(dict.fromkeys((*options.columns, width, height, *([frames] if frames else []))))
    source, view = dataset_view(path, options.split, options, columns=cols)
    slices = shard_slices(view, options)  # sequence_slices="shards": Energon's slices
    if slices is None:
        view = slice_shuffle(view, options.max_samples_per_sequence or 1)
    else:
        view = ragged_slice_shuffle(view, slices)
    src = bucket_batches(
        view,
        table,
        rank=topo.rank,
        world_size=topo.world_size,
        drop_last=options.drop_last,
        num_epochs=options.num_epochs,
        window=options.bucket_window,
        width=width,
        height=height,
        frames=frames,
    )
    if groups_batches(options.task_encoder):
        raise ConfigError(
            f"{type(options.task_encoder).__name__} defines batch_group_criterion and "
            "bucket_config is set: buckets plan each batch from index metadata, grouping forms "
            "batches from encoded samples; use one of the two"
        )
    mat = Materializer(
        [source],
        options.task_encoder or DefaultTaskEncoder(),
        image_decode=options.image_decode,
        error_policy=options.error_policy,
        decode_limits=options.decode_limits,
        error_handler=options.handler,
    )
    plan = Pipeline(src, seed=options.seed)
    return PlannedDataset(plan=plan, materializer=mat, topology=topo, batch_size=0, buckets=table)
