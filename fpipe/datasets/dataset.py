"""``get_train_dataset`` / ``get_val_dataset``: a prepared dataset -> a plan plus a materializer.

The plan (main process, refs only)::

    samples(split) -> slice_shuffle(max_samples_per_sequence) -> repeat(num_epochs)
      -> window_shuffle(shuffle_buffer_size) -> [plan_stages...] -> distribute -> batch

The materializer (DataLoader workers) reads, cooks, encodes and collates each recipe.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import msgspec

from fpipe.core import Pipeline, chain
from fpipe.core.errors import ConfigError, ErrorPolicy
from fpipe.core.stage import Stage
from fpipe.datasets._batch_sizes import global_batch_sizes
from fpipe.datasets._energon_options import resolve_energon_options
from fpipe.datasets._length import count_batches, epoch_refs, stream_refs, warn_if_empty
from fpipe.datasets._mix import eval_head, train_head
from fpipe.datasets.options import (
    DatasetOptions,
    Distribution,
    ScheduleMode,
    SequenceSlices,
    check_keywords,
)
from fpipe.loader.planned import PlannedDataset
from fpipe.loader.topology import Topology
from fpipe.materialize.materializer import GROUP_CHUNK, Materializer
from fpipe.materialize.sources import DatasetSource
from fpipe.plan import BatchSchedule, batch, distribute, repeat, window_shuffle
from fpipe.plan.packing.stage import PackConfig
from fpipe.plan.skip import normalize_step_ranges

__all__ = ["build_train_dataset", "build_val_dataset", "get_train_dataset", "get_val_dataset"]


@check_keywords
def get_train_dataset(
    path: str | os.PathLike,
    *,
    batch_size: int | None = None,
    shuffle_buffer_size: int | None = None,
    max_samples_per_sequence: int | None = None,
    sequence_slices: SequenceSlices = "fixed",
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
    global_batch_size: int | dict[int, int] | BatchSchedule | str | None = None,
    distribution: Distribution = "global",
    packing_buffer_size: int | None = None,
    bucket_config: Any = None,
    bucket_window: int | None = None,
    repeat: bool = True,
    weight_schedule: Any = None,
    schedule_mode: ScheduleMode = "step",
    allow_changed_weights: bool = False,
    skip_steps: Any = None,
    blend_unit: str | None = None,
    blend_draw: str | None = None,
    rampup_batch_size: tuple[int, int, int] | None = None,
    split_part: str | None = None,
    virtual_epoch_length: int = 0,
    shuffle_over_epochs_multiplier: int | None = 1,
    parallel_shard_iters: int | None = None,
    handler: Any = None,
    dataset_config: str | None = None,
    split_config: str | None = None,
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
      sequence_slices: ``"fixed"`` (default): slices of exactly ``max_samples_per_sequence``
        consecutive samples of the split, across shard boundaries. ``"shards"``: Energon's
        slices (``fpipe.energon``'s default): a slice never crosses a shard (nor, with
        ``distribution="energon"``, a worker's part); ``max_samples_per_sequence=None`` reads
        each shard whole, in order (only the order of the shards is shuffled), and a limit
        ``k`` cuts a shard longer than ``1.5 * k`` into ``round(len / k)`` nearly equal
        slices. A table (no shards) is one shard, and so is a metadataset ``join:``. See
        :mod:`fpipe.plan.shard_slices`.
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
        it fixed when resuming on another world size. It may also change over the run: a
        ``{step: size}`` table or a :class:`fpipe.plan.BatchSchedule` (every size a multiple
        of every world size the run may use); see docs/steering.md. A string is Megatron-LM's
        ``--step-batch-size-schedule`` (``"0:16 2.4B:320"``: sizes by consumed samples).
      rampup_batch_size: Megatron-LM's ``--rampup-batch-size start increment samples``: the
        global batch grows from ``start`` by ``increment`` over the first ``samples`` samples
        up to ``global_batch_size``. Every sample is still used once per epoch; snapshots
        restore at any step of the ramp, on any world size that divides every size.
      distribution: ``"global"`` (default): one plan on every rank, each rank takes its part of
        every global batch; snapshots are the same on every rank and restore on any world size.
        ``"per_rank"``: each rank reads its own contiguous part of the data sequentially;
        snapshots restore only on the same world size. See docs/distributed.md.
        ``"energon"``: as ``"per_rank"``, with the parts Energon gives the ranks (each dataset
        split over ``num_workers * world_size`` workers, so parts may differ in size or be
        empty; see :mod:`fpipe.plan.worker_split`); ``fpipe.energon``'s default on several
        ranks with ``repeat=False``.
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
      blend_unit: what a blend's weights are shares of: ``"samples"`` (the default), or an
        index column such as ``"tokens"`` (overrides the metadataset's ``blend_unit``); see
        docs/metadataset.md.
      blend_draw: how a weighted blend draws each position's dataset: ``"hash"`` (the
        default) or ``"quota"`` (each block of 4,096 positions holds every dataset's share of
        it; the snapshot then keeps no per-dataset counter); see docs/metadataset.md. None:
        the metadataset's ``blend_draw``, else ``"hash"``; given both ways, the two must agree.
      skip_steps: global steps the loader leaves out, e.g. ``[(9000, 9300)]`` (steps 9000 to
        9299) after a loss spike: not delivered, nothing read for them, kept in the loader
        state (also ``loader.skip(...)``; see docs/steering.md).
      split_part: Energon's name for ``split``.
      virtual_epoch_length: Energon's virtual epoch: a ``for`` loop over the loader ends after
        this many batches (0: none), and the next one goes on where it ended; ``len()`` is
        this length.
      shuffle_over_epochs_multiplier: slices are shuffled over this many passes of the data
        together (each sample that many times, in a random order; 1: every pass on its own;
        None: slices in index order). An epoch (``num_epochs``, a multiple of it) counts passes.
      parallel_shard_iters: read this many slices at a time, interleaved at random (each
        slice still in order; None or 1: one after another).
      handler: Energon's error handler ``handler(exception, sample, sources)`` (the sample the
        failing hook got, or ``{"__key__": key}`` when reading or cooking failed; a
        two-argument ``handler(exception, sample_key)`` gets the key): a sample that fails to
        read, decode or encode is skipped and counted (``error_policy="skip"``) after the
        handler is called; a handler that raises stops the loader. The ``WorkerConfig``'s
        ``global_error_handler`` takes precedence, as in Energon.
      dataset_config, split_config: Energon's: read another dataset.yaml (sample type, field
        map, subflavors) or split.yaml of the dataset's ``.nv-meta/`` (or ``.fpipe/``) folder,
        by file name, instead of ``dataset.yaml`` / ``split.yaml``; a ``split_config:`` in the
        dataset config read wins, as in Energon. For a dataset folder only (a metadataset sets
        them on its entries).
      image_decode also takes Energon's specs (``"pil"``, ``"torchrgb"``, ... as
      ``SampleDecoder``).

    ``len()`` of the dataset (and of its loader) is Energon's: the batches of the whole stream
    when it ends (``num_epochs``, ``repeat=False``), else the batches of one epoch (one pass),
    or ``virtual_epoch_length`` when set.

    The options make one :class:`fpipe.datasets.DatasetOptions` record (``fpipe plan``'s YAML
    holds the same); a misspelt keyword is a TypeError naming the closest option.

    Example::

        ds = fpipe.get_train_dataset("data/coco", batch_size=32, shuffle_buffer_size=1000,
                                     max_samples_per_sequence=100, seed=1234)
        loader = fpipe.get_loader(ds, num_workers=4)
    """
    options = DatasetOptions(**_arguments(locals()))  # first: locals() are the arguments
    return build_train_dataset(path, options)


def _arguments(call_locals: dict[str, Any]) -> dict[str, Any]:
    """The options of a call: its arguments (``locals()`` on entry) but the dataset path."""
    return {k: v for k, v in call_locals.items() if k != "path"}


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
    mat, recipe_size = _materializer(sources, options, batch_size)
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


def _materializer(
    sources: list[DatasetSource], options: DatasetOptions, batch_size: int | None
) -> tuple[Materializer, int]:
    """The materializer of both dataset kinds, and the recipe size: with a packing buffer,
    recipes are buffers (the last one may be short, as in Energon) and the loader batches
    their packs; otherwise recipes are batches (Energon's ``batch_size=None``: one sample)."""
    from fpipe.encode import DefaultTaskEncoder  # lazy: the encode package imports torch

    mat = Materializer(
        sources,
        options.task_encoder or DefaultTaskEncoder(),
        image_decode=options.image_decode,
        error_policy=options.error_policy,
        packing_buffer_size=options.packing_buffer_size,
        decode_limits=options.decode_limits,
        unbatched=batch_size is None,
        batch_size=batch_size,
        error_handler=options.handler,
        plan_packs=any(isinstance(s.config, PackConfig) for s in options.plan_stages),
    )
    if mat.grouping:  # recipes are chunks of the stream; the loader groups their samples
        return mat, batch_size or GROUP_CHUNK
    if not mat.packing:
        return mat, batch_size or 1
    if batch_size is None:
        raise ConfigError("packing_buffer_size needs a batch_size (batches of packs)")
    assert options.packing_buffer_size is not None  # packing is on only with a buffer size
    return mat, options.packing_buffer_size


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


@check_keywords
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
    split_part: str | None = None,
    handler: Any = None,
    dataset_config: str | None = None,
    split_config: str | None = None,
    distribution: Distribution = "global",
) -> PlannedDataset:
    """One deterministic pass over ``split`` in index order, no shuffle, the last batch kept
    even if short; samples are dealt to ranks by global batch.
    ``distribution="energon"``: Energon's parts instead: each rank reads its workers' parts
    (``num_workers`` of the worker config) and each worker batches its own part, the last
    batch short, taken one worker after the other, so ``len()`` and the batches are Energon's
    (see :mod:`fpipe.plan.worker_batches`; one dataset, not a metadataset).
    ``limit``: at most this many batches on each rank (Energon's: the first ``limit`` global
    batches; 0 or None: all); every ``for`` loop over the loader is the same limited pass.
    ``packing_buffer_size``: the task encoder's packing hooks, as in :func:`get_train_dataset`.
    ``split_part``, ``handler``, ``image_decode="pil"``, ``dataset_config``,
    ``split_config``: Energon's, as in :func:`get_train_dataset`.

    A metadataset's split is its datasets concatenated in file order (weights and repetitions
    ignored, as in Energon), each sample once across all ranks.
    """
    options = DatasetOptions(**_arguments(locals()))  # first: locals() are the arguments
    return build_val_dataset(path, options)


def build_val_dataset(
    path: str | os.PathLike, options: DatasetOptions, *, leaf: int | None = None
) -> PlannedDataset:
    """:func:`get_val_dataset` from an options record (see :class:`DatasetOptions`); the
    options of the training order (seed, shuffles, epochs, drop_last) do not apply. ``leaf``:
    only that dataset of a metadataset's split (its position in file order)."""
    topo = options.topology or options.worker_config or Topology.from_env()
    options = resolve_energon_options(options, topo, default_split="val")
    limit = options.limit  # batches per rank: the loader stops there
    options = msgspec.structs.replace(options, limit=None)
    view, sources, names = eval_head(path, options, leaf=leaf)
    batch_size = options.batch_size
    mat, recipe_size = _materializer(sources, options, batch_size)
    if options.distribution != "global":
        return _energon_val_dataset(path, options, topo, view, mat, names, recipe_size, limit)
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
    n: int | None = count_batches(view.size, recipe_size, topo, "global", False)
    estimate = None
    if mat.packing:  # Energon's len() with packing: the batches of the samples unpacked
        n, estimate = None, count_batches(view.size, batch_size or 1, topo, "global", False)
    if estimate is not None and limit is not None:
        estimate = min(estimate, limit)
    return _val_planned(
        path, options, topo, plan, mat, names, n, limit,
        packing_buffer_size=options.packing_buffer_size if mat.packing else None,
        estimated_batches=estimate,
    )  # fmt: skip


def _energon_val_dataset(path, options, topo, view, mat, names, recipe_size, limit):
    """:func:`build_val_dataset` with ``distribution="energon"`` (Energon's per-worker
    batches on each rank; see :mod:`fpipe.plan.worker_batches`)."""
    from fpipe.plan.worker_batches import worker_batches

    if options.distribution != "energon" or len(names) > 1 or mat.packing:
        raise ConfigError(
            f"get_val_dataset(distribution={options.distribution!r}): a validation pass takes "
            "'global' (fpipe's: global batches, each rank its part) or 'energon' (Energon's "
            "per-worker batches), the latter for one dataset without packing_buffer_size"
        )
    part, schedule, n = worker_batches(
        view, rank=topo.rank, world_size=topo.world_size, workers=topo.num_workers,
        batch_size=recipe_size,
    )  # fmt: skip
    plan = Pipeline(chain(repeat(part, 1), batch(schedule, drop_last=False)), seed=0)
    return _val_planned(path, options, topo, plan, mat, names, n, limit, distribution="energon")


def _val_planned(path, options, topo, plan, mat, names, n, limit, **more) -> PlannedDataset:
    """The validation pass of either distribution: ``plan`` (every batch kept, the last one
    short), ``n`` batches on this rank, at most ``limit`` of them; ``more``: the
    distribution's own fields of :class:`PlannedDataset`."""
    if mat.grouping:  # the groups decide the batches: known once every sample is encoded
        n = None
    if n is not None and limit is not None:
        n = min(n, limit)
    return PlannedDataset(
        plan=plan,
        materializer=mat,
        topology=topo,
        batch_size=options.batch_size or (0 if mat.grouping else 1),  # 0: each group its own
        group_batches=mat.grouping,
        drop_last=False,
        datasets=names,
        num_batches=n,
        path=str(path),
        split=options.split,
        limit=limit,
        **more,
    )
