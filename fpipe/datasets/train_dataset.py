"""``build_train_dataset``: an options record -> the training plan and its materializer.

The plan (main process, refs only)::

    samples(split) -> slice_shuffle(max_samples_per_sequence) -> repeat(num_epochs)
      -> window_shuffle(shuffle_buffer_size) -> [plan_stages...] -> distribute -> batch

with the per-rank batch size, the index columns the plan stages read, and the stream's
``len()`` (Energon's) resolved from the options.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import msgspec

from fpipe.core import Pipeline, chain
from fpipe.core.errors import ConfigError
from fpipe.core.stage import Stage
from fpipe.datasets._batch_sizes import global_batch_sizes
from fpipe.datasets._energon_options import resolve_energon_options
from fpipe.datasets._length import count_batches, epoch_refs, stream_refs, warn_if_empty
from fpipe.datasets._materializer import dataset_materializer
from fpipe.datasets._mix import train_head
from fpipe.datasets.options import DatasetOptions
from fpipe.loader.planned import PlannedDataset
from fpipe.loader.topology import Topology
from fpipe.plan import batch, distribute, window_shuffle
from fpipe.plan.skip import normalize_step_ranges

__all__ = ["build_train_dataset"]


def build_train_dataset(path: str | os.PathLike, options: DatasetOptions) -> PlannedDataset:
    """:func:`get_train_dataset` from an options record (see :class:`DatasetOptions`)."""
    topo = options.topology or options.worker_config or Topology.from_env()
    options = resolve_energon_options(options, topo, default_split="train")
    skip = normalize_step_ranges(options.skip_steps)
    if options.bucket_config is not None:
        from fpipe.datasets._bucketed import bucketed_dataset

        return dataclasses.replace(
            bucketed_dataset(path, options, topo),
            skip_steps=skip,
            virtual_epoch_length=options.virtual_epoch_length,
        )
    schedule, global_size = global_batch_sizes(options)  # schedule: None for one size
    batch_size = _per_rank_batch(options.batch_size, global_size, topo.world_size)
    num_epochs = options.num_epochs
    if not options.repeat and num_epochs is None:
        num_epochs = 1
    if options.shuffle_over_epochs_multiplier == -1:  # drawn with replacement: forever
        num_epochs = None
    passes = options.shuffle_over_epochs_multiplier or 1  # passes over the data per view epoch
    if num_epochs is not None and options.num_epochs is not None:
        num_epochs //= passes  # epochs of the view (a multiple of passes: checked)
    # What the options imply, resolved once: the epochs, and the columns the stages read.
    options = msgspec.structs.replace(
        options,
        num_epochs=num_epochs,
        columns=_with_stage_columns(options.columns, options.plan_stages),
    )
    head, sources, names = train_head(path, options, topo)
    stages = []
    if options.shuffle_buffer_size and options.shuffle_buffer_size > 1:
        stages.append(window_shuffle(options.shuffle_buffer_size))
    stages.extend(options.plan_stages)
    mat, recipe_size = dataset_materializer(sources, options, batch_size)
    # with packing or grouping drop_last applies to the batches the loader makes, not recipes
    recipe_drop_last = options.drop_last and not (mat.packing or mat.grouping)
    distribution = options.distribution
    if distribution == "global":  # per-rank mode has no distribute stage
        stages.append(
            distribute(
                recipe_size * topo.world_size if schedule is None else schedule,
                rank=topo.rank,
                world_size=topo.world_size,
                drop_last=recipe_drop_last,
            )
        )
    per_rank = recipe_size if schedule is None else schedule.per_rank(topo.world_size)
    stages.append(batch(per_rank, drop_last=recipe_drop_last))
    plan = Pipeline(chain(head, *stages), seed=options.seed)
    refs = stream_refs(head, num_epochs)
    n = None
    counted_by_plan = not (options.plan_stages or mat.packing or mat.grouping)
    if refs is not None and counted_by_plan and schedule is None:
        # without packing a recipe is a batch (one sample when unbatched)
        n = count_batches(refs, recipe_size, topo, distribution, options.drop_last)
        warn_if_empty(n, path, options.split, refs, recipe_size, topo, distribution)
    elif refs is None and num_epochs is None and counted_by_plan:
        # an endless stream: Energon's length, the batches of one epoch (one pass)
        one = epoch_refs(head)
        if one is not None and schedule is None:
            n = count_batches(one, recipe_size, topo, distribution, options.drop_last)
    estimate = None
    if mat.packing and not options.plan_stages and schedule is None:
        # Energon's len() with packing: the batches of the samples unpacked (a pack as one)
        counted = refs if refs is not None or num_epochs is not None else epoch_refs(head)
        if counted is not None:
            unit = batch_size or 1
            estimate = count_batches(counted, unit, topo, distribution, options.drop_last)
    return PlannedDataset(
        plan=plan,
        materializer=mat,
        topology=topo,
        batch_size=batch_size or (0 if mat.grouping else 1),  # 0: each group its own
        distribution=distribution,
        packing_buffer_size=options.packing_buffer_size if mat.packing else None,
        group_batches=mat.grouping,
        drop_last=options.drop_last,
        datasets=names,
        num_batches=n,
        path=str(path),
        split=options.split,
        skip_steps=skip,
        virtual_epoch_length=options.virtual_epoch_length,
        estimated_batches=estimate,
    )


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


def _per_rank_batch(
    batch_size: int | None, global_batch_size: int | None, world_size: int
) -> int | None:
    """The per-rank batch from ``batch_size`` or ``global_batch_size``; None when both are
    None (Energon's ``batch_size=None``: unbatched samples)."""
    if batch_size is not None:
        if global_batch_size is not None:
            raise ConfigError("give only one of batch_size (per rank) and global_batch_size")
        return batch_size
    if global_batch_size is None:
        return None
    if global_batch_size < 1 or global_batch_size % world_size:
        raise ConfigError(
            f"global_batch_size {global_batch_size} is not a positive multiple of the world size "
            f"{world_size}: the per-rank batch is global_batch_size / world_size. Pick a global "
            f"batch size divisible by every world size you may resume on (e.g. a multiple of "
            f"{world_size})"
        )
    return global_batch_size // world_size
