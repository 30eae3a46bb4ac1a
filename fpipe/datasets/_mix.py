"""The head of a plan: one dataset, or a metadataset's datasets blended or concatenated.

``train_head`` returns the source that the shuffle window, distribution and batching follow,
and the :class:`~fpipe.materialize.sources.DatasetSource` of each dataset id it emits:

* a dataset: ``repeat(slice_shuffle(samples(split)))``;
* a metadataset split: each leaf dataset keeps its own slice shuffle and epochs, and
  :func:`fpipe.plan.blend.blend` mixes them by weight (or schedule) or epochized.

``eval_head`` returns the view of a validation / test split: the leaves concatenated in file
order, no shuffle, no repetition, cut at ``limit``. Each dataset's view and source come from
:mod:`fpipe.datasets._views`.
"""

from __future__ import annotations

import itertools

import msgspec
import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.core.stage import Source
from fpipe.datasets._views import dataset_name, dataset_view, mix_views
from fpipe.datasets.options import DatasetOptions
from fpipe.materialize.sources import DatasetSource
from fpipe.plan import repeat, slice_shuffle
from fpipe.plan.blend import blend
from fpipe.plan.blend_choice import WeightSchedule
from fpipe.plan.concat import concat
from fpipe.plan.distribute import per_rank
from fpipe.plan.drawn_slices import DrawnSlices, drawn_slices
from fpipe.plan.shard_slices import RaggedSlices, ragged_slice_shuffle, shard_slice_starts
from fpipe.plan.slice_order import interleave, tile
from fpipe.plan.source import View
from fpipe.plan.worker_split import energon_repeat_count, worker_range, worker_split, worker_starts
from fpipe.storage.config.metadataset import (
    Leaf,
    MixSchedule,
    is_metadataset,
    load_metadataset,
    resolve_mix,
)

__all__ = ["eval_head", "shard_slices", "train_head"]


def _without_empty_parts(path, topology, mix, views, names):
    """The blend (mix, views, names) without the datasets of which this rank reads nothing
    (Energon's split can leave a rank no sample of a small dataset; Energon blends what the
    rank has). Views keep their dataset ids, so the sources stay as they are."""
    keep = [i for i, v in enumerate(views) if v.size > 0]
    if not keep:
        raise ConfigError(
            f"{path}: rank {topology.rank} of {topology.world_size} gets no sample of any dataset "
            f"(Energon's split over {max(1, topology.num_workers) * topology.world_size} workers)"
        )
    if len(keep) == len(views):
        return mix, views, names
    schedule = mix.schedule
    if schedule is not None:
        rows = tuple(tuple(row[i] for i in keep) for row in schedule.weights)
        schedule = msgspec.structs.replace(schedule, weights=rows)
    leaves = tuple(mix.leaves[i] for i in keep)
    mix = msgspec.structs.replace(mix, leaves=leaves, schedule=schedule)
    return mix, [views[i] for i in keep], tuple(names[i] for i in keep)


def train_head(
    path, options: DatasetOptions, topology
) -> tuple[Source, list[DatasetSource], tuple[str, ...]]:
    """(source, dataset sources, dataset names) of a training plan's head: ``options.split``
    of ``path``, each dataset slice-shuffled (``max_samples_per_sequence``), repeated or
    blended for ``num_epochs``, reading ``columns`` of the index."""
    num_epochs, columns, weight_schedule = (
        options.num_epochs,
        options.columns,
        options.weight_schedule,
    )

    def shuffled(view, leaf: Leaf | None = None, rotation: int = 0):
        cuts: list[int] = []
        if options.distribution == "per_rank":  # this rank's own contiguous part of each dataset
            view = per_rank(view, rank=topology.rank, world_size=topology.world_size)
        elif options.distribution == "energon":  # the part Energon's sharder gives this rank
            split = dict(rank=topology.rank, world_size=topology.world_size,
                         workers=topology.num_workers, rotation=rotation)  # fmt: skip
            cuts = worker_starts(view.size, **split)  # each worker reads its part on its own
            view = worker_split(view, **split)
        return slice_order(view, _leaf_options(options, leaf, path), cuts=cuts)

    if not is_metadataset(path):
        if weight_schedule is not None:
            raise ConfigError("weight_schedule needs a metadataset with a blend")
        if options.blend_unit not in (None, "samples"):
            raise ConfigError(f"blend_unit={options.blend_unit!r} needs a metadataset with a blend")
        source, view = dataset_view(path, options.split, options, columns=columns)
        return repeat(shuffled(view), num_epochs), [source], (dataset_name(path),)
    mix = resolve_mix(load_metadataset(path), options.split, training=True)
    unit = mix.unit if options.blend_unit is None else options.blend_unit
    unit = None if unit == "samples" else unit
    if unit is not None and unit not in columns:
        columns = (*columns, unit)
    mix, names, sources, views = mix_views(
        path, options, training=True, columns=columns, unit=unit, mix=mix
    )
    # Energon shifts each dataset's leftover samples by the samples of those before it
    # (a running sum: summing every prefix is 5 x 10^7 additions for 10,000 datasets)
    rotations = list(itertools.accumulate((v.size for v in views), initial=0))[: len(views)]
    counts = _energon_counts(mix, views, rotations, options, topology)
    views = [shuffled(v, leaf, r) for v, leaf, r in zip(views, mix.leaves, rotations, strict=True)]
    blended = names
    if options.distribution == "energon" and len(views) > 1:
        mix, views, blended = _without_empty_parts(path, topology, mix, views, names)
    if mix.mode == "single" and weight_schedule is None:
        return repeat(views[0], num_epochs), sources, names
    common = dict(
        names=blended, num_epochs=num_epochs, allow_changed_weights=options.allow_changed_weights
    )
    if mix.mode == "blend_epochized":
        if weight_schedule is not None:
            raise ConfigError(f"{path}: weight_schedule applies to a weighted 'blend:'")
        if unit is not None:
            raise ConfigError(
                f"{path}: blend_unit={unit!r} applies to a weighted 'blend:'; "
                "'blend_epochized' takes whole passes of samples"
            )
        if options.blend_draw not in (None, "hash"):
            raise ConfigError(
                f"{path}: blend_draw={options.blend_draw!r} applies to a weighted 'blend:'; "
                "'blend_epochized' gives each dataset exact passes already"
            )
        reps = [leaf.repetitions for leaf in mix.leaves]
        per_view = None
        if counts is not None:  # by name: the datasets this rank blends; a tile's passes kept
            per_view = [c * (v.size // part) for (c, part), v in
                        zip((counts[n] for n in blended), views)]  # fmt: skip
        src = blend(views, repetitions=reps, counts=per_view, **common)
        return src, sources, names
    schedule = _schedule(weight_schedule, options.schedule_mode, names) or _plan_schedule(
        mix.schedule
    )
    draw = _draw(options.blend_draw, mix)
    src = blend(views, schedule=schedule, unit=unit, draw=draw, **common)
    return src, sources, names


def _draw(given: str | None, mix) -> str:
    """A weighted blend's draw: ``get_train_dataset(blend_draw=)`` or the file's
    ``blend_draw`` (they must agree when both are given), else ``"hash"``."""
    if given is not None and mix.draw is not None and given != mix.draw:
        raise ConfigError(
            f"{mix.source}: splits.{mix.split}: blend_draw: {mix.draw} in the file, but "
            f"blend_draw={given!r} in Python; a run has one draw: give it in one place, or the "
            "same in both"
        )
    return given or mix.draw or "hash"


def _energon_counts(mix, views, rotations, options, topology):
    """With ``distribution="energon"``, an epochized blend's refs per epoch of each dataset on
    this rank as Energon counts them (each worker's part times the repetitions, rounded down
    per worker), with the rank's part size: ``{name: (count, part)}``; None otherwise."""
    if options.distribution != "energon" or mix.mode != "blend_epochized":
        return None
    out = {}
    for leaf, view, rotation in zip(mix.leaves, views, rotations, strict=True):
        where = dict(rank=topology.rank, world_size=topology.world_size,
                     workers=topology.num_workers, rotation=rotation)  # fmt: skip
        lo, hi = worker_range(view.size, **where)
        count = energon_repeat_count(view.size, leaf.repetitions, **where)
        out[leaf.name] = (max(1, count), max(1, hi - lo))
    return out


def _leaf_options(options: DatasetOptions, leaf: Leaf | None, path) -> DatasetOptions:
    """``options`` with a metadataset entry's ``shuffle_over_epochs_multiplier`` composed in
    (Energon: None wins, else the product)."""
    m = 1 if leaf is None else leaf.shuffle_over_epochs_multiplier
    if m == 1:
        return options
    if options.num_epochs is not None:
        raise ConfigError(
            f"{path}: {leaf.where}: shuffle_over_epochs_multiplier={m} with num_epochs="
            f"{options.num_epochs}: a dataset's epoch would be {m} passes over it; give the "
            "multiplier to get_train_dataset instead, or leave num_epochs unset"
        )
    own = options.shuffle_over_epochs_multiplier
    combined = None if m is None or own is None else -1 if -1 in (m, own) else own * m
    return msgspec.structs.replace(options, shuffle_over_epochs_multiplier=combined)


def slice_order(view: View, options: DatasetOptions, cuts=()) -> View:
    """One dataset's training order of slices (``max_samples_per_sequence`` samples each, cut
    as ``sequence_slices`` says; ``cuts``: positions where a slice must start): shuffled over
    ``shuffle_over_epochs_multiplier`` passes (None: in index order), read
    ``parallel_shard_iters`` slices at a time, interleaved (Energon's two knobs); ``-1``:
    slices drawn with replacement (:mod:`fpipe.plan.drawn_slices`)."""
    passes, parallel = options.shuffle_over_epochs_multiplier, options.parallel_shard_iters or 1
    if passes is None:
        return view
    if passes == -1:  # Energon's: slices drawn with replacement, forever
        fixed = shard_slices(view, options, cuts)
        k = options.max_samples_per_sequence or 1
        starts = fixed.starts if fixed is not None else np.arange(0, view.size, k, dtype=np.int64)
        drawn = DrawnSlices(starts, view.size)
        view = drawn_slices(view, drawn)
        return interleave(view, parallel, 0, slices=drawn) if parallel > 1 else view
    tiled = tile(view, passes) if passes > 1 else view
    slices = shard_slices(view, options, cuts, passes=passes)
    if slices is None:
        k = options.max_samples_per_sequence or 1
        view = slice_shuffle(tiled, k)
        return interleave(view, parallel, k) if parallel > 1 else view
    view = ragged_slice_shuffle(tiled, slices)
    return interleave(view, parallel, 0, slices=slices) if parallel > 1 else view


def shard_slices(view: View, options: DatasetOptions, cuts=(), *, passes: int = 1):
    """The :class:`~fpipe.plan.shard_slices.RaggedSlices` of ``passes`` passes over ``view``
    with ``sequence_slices="shards"`` (Energon's slices: along the ``shard_id`` column, which
    :func:`dataset_view` then loads, and ``cuts``), or None for fpipe's fixed slices."""
    if options.sequence_slices != "shards":
        return None
    n = view.size
    ids = None
    # index order (no key is used); one ref first: a table has no shard_id column to gather
    if n and "shard_id" in view.gather(0, 0, np.zeros(1, dtype=np.int64)).columns:
        ids = view.gather(0, 0, np.arange(n, dtype=np.int64)).column("shard_id")
    starts = shard_slice_starts(ids, n, options.max_samples_per_sequence, cuts)
    tiled = np.concatenate([starts + p * n for p in range(passes)]) if passes > 1 else starts
    return RaggedSlices(tiled, n * passes)


def _schedule(given, mode: str, names) -> WeightSchedule | None:
    """A Python schedule: a WeightSchedule or ``[(position, {name: weight}), ...]``."""
    if given is None or isinstance(given, WeightSchedule):
        return given
    return WeightSchedule.of([(p, dict(w)) for p, w in given], names, linear=mode == "linear")


def _plan_schedule(schedule: MixSchedule | None) -> WeightSchedule | None:
    """The plan's schedule of a metadataset's weights (a plain record: points and rows)."""
    if schedule is None:
        return None
    return WeightSchedule(points=schedule.points, weights=schedule.weights, linear=schedule.linear)


def eval_head(
    path, options: DatasetOptions, *, leaf: int | None = None
) -> tuple[View, list[DatasetSource], tuple[str, ...]]:
    """(view, dataset sources, dataset names) of a validation / test pass: ``options.split``
    in index order, cut at ``options.limit``; ``leaf``: only that dataset of a metadataset."""
    split, limit = options.split, options.limit
    if not is_metadataset(path):
        source, view = dataset_view(path, split, options, limit=limit)
        return view, [source], (dataset_name(path),)
    mix = None
    if leaf is not None:
        mix = resolve_mix(load_metadataset(path), split, training=False)
        mix = msgspec.structs.replace(mix, leaves=(mix.leaves[leaf],))
    _, names, sources, views = mix_views(path, options, training=False, columns=(), mix=mix)
    view = concat(views, names=list(names), limit=limit)
    if view.size == 0:
        raise ConfigError(f"{path}: split {split!r} has no samples")
    return view, sources, names
