"""``get_train_dataset`` / ``get_val_dataset``: a prepared dataset -> a plan plus a materializer.

The keyword arguments make one :class:`DatasetOptions` record, built by
:mod:`fpipe.datasets.train_dataset` (the shuffled, repeated training stream) and
:mod:`fpipe.datasets.val_dataset` (one validation pass): the plan runs in the main process (refs
only), the materializer in the DataLoader workers (reads, cooks, encodes and collates each
recipe).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from fpipe.core.errors import ErrorPolicy
from fpipe.core.stage import Stage
from fpipe.datasets.options import (
    DatasetOptions,
    Distribution,
    ScheduleMode,
    SequenceSlices,
    check_keywords,
)
from fpipe.datasets.train_dataset import build_train_dataset
from fpipe.datasets.val_dataset import build_val_dataset
from fpipe.loader.planned import PlannedDataset
from fpipe.loader.topology import Topology
from fpipe.plan import BatchSchedule

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
