"""``get_train_dataset`` / ``get_val_dataset``: a prepared dataset -> a plan plus a materializer.

The plan (main process, refs only)::

    samples(split) -> slice_shuffle(max_samples_per_sequence) -> repeat(num_epochs)
      -> window_shuffle(shuffle_buffer_size) -> [plan_stages...] -> distribute -> batch

The materializer (DataLoader workers) reads, cooks, encodes and collates each recipe.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from fpipe.core import Pipeline, chain
from fpipe.core.errors import ConfigError, ErrorPolicy
from fpipe.core.stage import Stage
from fpipe.datasets.length import count_batches, stream_refs, warn_if_empty
from fpipe.datasets.mix import eval_head, train_head
from fpipe.loader.planned import PlannedDataset
from fpipe.loader.topology import Topology
from fpipe.materialize.materializer import Materializer
from fpipe.plan import batch, distribute, repeat, window_shuffle

__all__ = ["get_train_dataset", "get_val_dataset"]


def get_train_dataset(
    path: str | os.PathLike,
    *,
    batch_size: int | None = None,
    shuffle_buffer_size: int | None = None,
    max_samples_per_sequence: int | None = None,
    task_encoder: Any = None,
    seed: int = 0,
    split: str = "train",
    num_epochs: int | None = None,
    drop_last: bool = True,
    topology: Topology | None = None,
    worker_config: Topology | None = None,
    plan_stages: Sequence[Stage] = (),
    columns: Sequence[str] = (),
    sample_type: Any = None,
    field_map: dict | None = None,
    subflavors: dict | None = None,
    image_decode: Any = None,
    error_policy: ErrorPolicy | str = ErrorPolicy.RAISE,
    decode_limits: Any = None,
    open_kwargs: dict | None = None,
    global_batch_size: int | None = None,
    distribution: str = "global",
    packing_buffer_size: int | None = None,
    bucket_config: Any = None,
    bucket_window: int | None = None,
    repeat: bool = True,
    weight_schedule: Any = None,
    schedule_mode: str = "step",
    allow_changed_weights: bool = False,
) -> PlannedDataset:
    """A shuffled, repeated, distributed training stream of batches of ``batch_size`` per rank.

    Args:
      path: a prepared dataset folder (``fpipe prepare`` or Energon), a table file, or a
        ``metadataset.yaml`` (see docs/metadataset.md): its split is blended after each dataset's
        own slice shuffle, before the shuffle window.
      batch_size: samples per batch on each rank (global batch = batch_size * world size).
      shuffle_buffer_size: window of the window shuffle (None or 1: no window shuffle).
      max_samples_per_sequence: consecutive samples read in order before jumping (slice size
        of the slice shuffle; None: every sample is its own slice, a full permutation).
      task_encoder: a :class:`fpipe.encode.TaskEncoder` (default: DefaultTaskEncoder).
      seed: the root of every random decision.
      num_epochs: None repeats forever (for a blend: blend epochs; a weighted blend's epoch is
        the sum of its datasets' sizes).
      repeat: False stops after one epoch (Energon's ``repeat=False``; with
        ``blend_epochized``: after one blend epoch).
      drop_last: drop a short final global batch (counted in the state).
      topology / worker_config: rank and world size (default: from torch.distributed or env).
      plan_stages: extra plan stages (e.g. ``filter_refs("width", ">=", 256)``) inserted after
        the shuffles. The index columns they name (a ``column`` or ``columns`` field of their
        config, as ``filter_refs`` has) are loaded automatically; ``columns`` adds others.
      sample_type, field_map, subflavors: override dataset.yaml.
      image_decode: :class:`fpipe.decode.image.ImageDecodeOptions` (or the encoder's).
      error_policy: ``"raise"`` or ``"skip"`` bad samples (skips are counted in the stats).
      decode_limits: :class:`fpipe.decode.DecodeLimits` (or the encoder's ``decode_limits``):
        every decoding limit (inflated ``.gz`` members, arrays, image pixels, audio/video),
        handed to every decoder in every worker; see docs/failures.md.
      global_batch_size: instead of ``batch_size``: samples per step over all data-parallel
        ranks; the per-rank batch is ``global_batch_size / world_size`` (it must divide). Keep
        it fixed when resuming on another world size.
      distribution: ``"global"`` (default): one plan on every rank, each rank takes its part of
        every global batch; snapshots are the same on every rank and restore on any world size.
        ``"per_rank"``: each rank reads its own contiguous part of the data sequentially;
        snapshots restore only on the same world size. See docs/distributed.md.
      packing_buffer_size: turns on the task encoder's packing hooks (Energon semantics):
        ``select_samples_to_pack`` gets buffers of this many samples per rank, and a batch is
        ``batch_size`` packed samples. See docs/packing.md.
      bucket_config: OpenSora's ``bucket_config`` (a mapping, YAML text or file): batch by
        bucket instead of ``batch_size``. Every step is one bucket on every rank, each rank
        gets ``batch_size(bucket)`` samples, and the task encoder's ``for_bucket(shape)``
        makes them that bucket's ``(frames, height, width)``. The index must have ``width``
        and ``height`` columns (and ``num_frames``, ``frames`` or ``<field>.frames`` for
        videos; without one every sample is an image). Global distribution only; the window
        shuffle is replaced by a shuffle inside each bucket. See docs/buckets.md.
      bucket_window: samples of an epoch bucketed at once (None: the whole epoch).
      weight_schedule: blend weights over the run, overriding the metadataset's: a
        :class:`fpipe.plan.WeightSchedule` or ``[(position, {dataset name: weight}), ...]``
        (global sample positions), steps or ``schedule_mode="linear"``.
      allow_changed_weights: resume from a snapshot taken with other blend weights (each
        dataset goes on from its own position; the new weights apply from there).

    Example::

        ds = fpipe.get_train_dataset("data/coco", batch_size=32, shuffle_buffer_size=1000,
                                     max_samples_per_sequence=100, seed=1234)
        loader = fpipe.get_loader(ds, num_workers=4)
    """
    topo = topology or worker_config or Topology.from_env()
    if distribution not in ("global", "per_rank"):
        raise ConfigError(f"distribution must be 'global' or 'per_rank', got {distribution!r}")
    if bucket_config is not None:
        if batch_size is not None or global_batch_size is not None:
            raise ConfigError(
                "with bucket_config each bucket sets its own batch size; leave out batch_size "
                "and global_batch_size"
            )
        if distribution != "global":
            raise ConfigError(
                "bucket_config works in global distribution mode only (every rank takes the "
                "same bucket at every step); drop distribution='per_rank'"
            )
        if plan_stages or packing_buffer_size:
            raise ConfigError(
                "plan_stages and packing_buffer_size do not combine with bucket_config"
            )
        from fpipe.datasets.bucketed import bucketed_dataset

        return bucketed_dataset(
            path,
            bucket_config,
            bucket_window,
            topo,
            split=split,
            sample_type=sample_type,
            field_map=field_map,
            subflavors=subflavors,
            columns=columns,
            open_kwargs=open_kwargs,
            max_samples_per_sequence=max_samples_per_sequence,
            drop_last=drop_last,
            num_epochs=num_epochs,
            seed=seed,
            task_encoder=task_encoder,
            image_decode=image_decode,
            error_policy=error_policy,
            decode_limits=decode_limits,
        )
    batch_size = _per_rank_batch(batch_size, global_batch_size, topo.world_size)
    if not repeat and num_epochs is None:
        num_epochs = 1
    head, sources, names = train_head(
        path,
        split,
        topology=topo,
        distribution=distribution,
        slice_size=max_samples_per_sequence or 1,
        num_epochs=num_epochs,
        columns=_with_stage_columns(columns, plan_stages),
        overrides=dict(
            sample_type=sample_type,
            field_map=field_map,
            subflavors=subflavors,
            open_kwargs=open_kwargs,
        ),
        weight_schedule=weight_schedule,
        schedule_mode=schedule_mode,
        allow_changed_weights=allow_changed_weights,
    )
    stages = []
    if shuffle_buffer_size and shuffle_buffer_size > 1:
        stages.append(window_shuffle(shuffle_buffer_size))
    stages.extend(plan_stages)
    mat, recipe_size = _materializer(
        sources,
        task_encoder,
        image_decode,
        error_policy,
        packing_buffer_size,
        decode_limits,
        batch_size,
    )
    recipe_drop_last = drop_last and not mat.packing
    if distribution == "global":  # per-rank mode has no distribute stage
        stages.append(
            distribute(
                recipe_size * topo.world_size,
                rank=topo.rank,
                world_size=topo.world_size,
                drop_last=recipe_drop_last,
            )
        )
    stages.append(batch(recipe_size, drop_last=recipe_drop_last))
    plan = Pipeline(chain(head, *stages), seed=seed)
    refs = stream_refs(head, num_epochs)
    n = None
    if refs is not None and not plan_stages and not mat.packing:
        n = count_batches(refs, batch_size, topo, distribution, drop_last)
        warn_if_empty(n, path, split, refs, batch_size, topo, distribution)
    return PlannedDataset(
        plan=plan,
        materializer=mat,
        topology=topo,
        batch_size=batch_size or 1,
        distribution=distribution,
        packing_buffer_size=packing_buffer_size if mat.packing else None,
        drop_last=drop_last,
        datasets=names,
        num_batches=n,
        path=str(path),
        split=split,
    )


def _materializer(
    sources,
    task_encoder,
    image_decode,
    error_policy,
    packing_buffer_size,
    decode_limits,
    batch_size,
) -> tuple[Materializer, int]:
    """The materializer of both dataset kinds, and the recipe size: with a packing buffer,
    recipes are buffers (the last one may be short, as in Energon) and the loader batches
    their packs; otherwise recipes are batches (Energon's ``batch_size=None``: one sample)."""
    from fpipe.encode import DefaultTaskEncoder  # lazy: the encode package imports torch

    mat = Materializer(
        sources,
        task_encoder or DefaultTaskEncoder(),
        image_decode=image_decode,
        error_policy=error_policy,
        packing_buffer_size=packing_buffer_size,
        decode_limits=decode_limits,
        unbatched=batch_size is None,
    )
    if batch_size is None and mat.packing:
        raise ConfigError("packing_buffer_size needs a batch_size (batches of packs)")
    return mat, packing_buffer_size if mat.packing else (batch_size or 1)


def _with_stage_columns(columns: Sequence[str], stages: Sequence[Stage]) -> tuple[str, ...]:
    """``columns`` plus every index column a plan stage's config names (``column`` or
    ``columns`` fields), in first-seen order."""
    out = list(columns)
    for stage in stages:
        cfg = getattr(stage, "config", None)
        named = getattr(cfg, "column", None)
        more = getattr(cfg, "columns", None) or ()
        for c in ([named] if isinstance(named, str) else []) + [
            c for c in more if isinstance(c, str)
        ]:
            if c not in out:
                out.append(c)
    return tuple(out)


def _per_rank_batch(batch_size, global_batch_size, world_size: int) -> int | None:
    """The per-rank batch from ``batch_size`` or ``global_batch_size``; None when both are
    None (Energon's ``batch_size=None``: unbatched samples)."""
    if batch_size is not None and global_batch_size is not None:
        raise ConfigError("give only one of batch_size (per rank) and global_batch_size")
    if batch_size is None and global_batch_size is None:
        return None
    if batch_size is not None:
        return batch_size
    if global_batch_size < 1 or global_batch_size % world_size:
        raise ConfigError(
            f"global_batch_size {global_batch_size} is not a positive multiple of the world size "
            f"{world_size}: the per-rank batch is global_batch_size / world_size. Pick a global "
            f"batch size divisible by every world size you may resume on (e.g. a multiple of "
            f"{world_size})"
        )
    return global_batch_size // world_size


def get_val_dataset(
    path: str | os.PathLike,
    *,
    batch_size: int | None,
    task_encoder: Any = None,
    split: str = "val",
    limit: int | None = None,
    topology: Topology | None = None,
    worker_config: Topology | None = None,
    sample_type: Any = None,
    field_map: dict | None = None,
    subflavors: dict | None = None,
    image_decode: Any = None,
    error_policy: ErrorPolicy | str = ErrorPolicy.RAISE,
    decode_limits: Any = None,
    open_kwargs: dict | None = None,
    packing_buffer_size: int | None = None,
) -> PlannedDataset:
    """One deterministic pass over ``split`` in index order (first ``limit`` samples), no
    shuffle, the last batch kept even if short; samples are dealt to ranks by global batch.
    ``packing_buffer_size``: the task encoder's packing hooks, as in :func:`get_train_dataset`.

    A metadataset's split is its datasets concatenated in file order (weights and repetitions
    ignored, as in Energon), each sample once across all ranks.
    """
    topo = topology or worker_config or Topology.from_env()
    view, sources, names = eval_head(
        path,
        split,
        limit=limit,
        overrides=dict(
            sample_type=sample_type,
            field_map=field_map,
            subflavors=subflavors,
            open_kwargs=open_kwargs,
        ),
    )
    mat, recipe_size = _materializer(
        sources,
        task_encoder,
        image_decode,
        error_policy,
        packing_buffer_size,
        decode_limits,
        batch_size,
    )
    stages = [
        distribute(
            recipe_size * topo.world_size,
            rank=topo.rank,
            world_size=topo.world_size,
            drop_last=False,
        ),
        batch(recipe_size, drop_last=False),
    ]
    plan = Pipeline(chain(repeat(view, 1), *stages), seed=0)
    n = None if mat.packing else count_batches(view.size, batch_size, topo, "global", False)
    return PlannedDataset(
        plan=plan,
        materializer=mat,
        topology=topo,
        batch_size=batch_size or 1,
        packing_buffer_size=packing_buffer_size if mat.packing else None,
        drop_last=False,
        datasets=names,
        num_batches=n,
        path=str(path),
        split=split,
    )
