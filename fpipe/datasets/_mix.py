"""The head of a plan: one dataset, or a metadataset's datasets blended or concatenated.

``train_head`` returns the source that the shuffle window, distribution and batching follow,
and the :class:`~fpipe.materialize.sources.DatasetSource` of each dataset id it emits:

* a dataset: ``repeat(slice_shuffle(samples(split)))``;
* a metadataset split: each leaf dataset keeps its own slice shuffle and epochs, and
  :func:`fpipe.plan.blend.blend` mixes them by weight (or schedule) or epochized.

``eval_head`` returns the view of a validation / test split: the leaves concatenated in file
order, no shuffle, no repetition, cut at ``limit``.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import msgspec
import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.core.stage import Source
from fpipe.datasets.options import DatasetOptions
from fpipe.materialize.sources import DatasetSource
from fpipe.plan import repeat, samples, slice_shuffle
from fpipe.plan.blend import blend
from fpipe.plan.blend_choice import WeightSchedule
from fpipe.plan.concat import concat
from fpipe.plan.distribute import per_rank
from fpipe.plan.shard_slices import RaggedSlices, ragged_slice_shuffle, shard_slice_starts
from fpipe.plan.slice_order import interleave, tile
from fpipe.plan.source import View
from fpipe.plan.worker_split import energon_repeat_count, worker_range, worker_split, worker_starts
from fpipe.storage.config.dataset_yaml import is_crude
from fpipe.storage.config.metadataset import (
    Leaf,
    Mix,
    MixSchedule,
    is_metadataset,
    load_metadataset,
    resolve_mix,
)
from fpipe.storage.config.metadataset_subset import subset_bounds

__all__ = ["eval_head", "train_head"]


def row_group_cache_for(shuffle_buffer_size, max_samples_per_sequence) -> int:
    """:func:`fpipe.storage.read.parquet.row_group_cache_for`, imported when first needed."""
    from fpipe.storage.read.parquet import row_group_cache_for as size

    return size(shuffle_buffer_size, max_samples_per_sequence)


def _open(path, open_kwargs):
    from fpipe.storage.read.layouts import open_dataset

    return open_dataset(path, **(open_kwargs or {}))


def dataset_view(
    path,
    split,
    options: DatasetOptions,
    *,
    dataset=0,
    extra_subflavors=None,
    columns=(),
    limit=None,
    join=None,
) -> tuple[DatasetSource, View]:
    """The source and the index-order view of one dataset's split (dataset id ``dataset``),
    read as ``options`` say (sample type, field map, subflavors, open_kwargs); ``columns``:
    the index columns the plan reads; ``join``: the leaf whose ``join:`` parts are joined to
    it by key."""
    ds = _open(path, options.open_kwargs)
    # The config files to read: the leaf's (a metadataset entry), else the options' (a dataset
    # folder); a split_config named in the dataset config wins, as in Energon.
    files = join if join is not None else options
    cfg = ds.dataset_config(files.dataset_config)
    indices = ds.split_indices(split, files.split_config, dataset_config=files.dataset_config)
    subset = join.subset if join is not None else None
    if subset is not None:  # a metadataset's subset: one range of the split's samples
        start, end = subset_bounds(subset, len(indices), join.where)
        indices = indices[start:end]
    if limit is not None:
        indices = indices[:limit]
    if len(indices) == 0:
        raise ConfigError(f"{path}: split {split!r} has no samples")
    source = _source(path, cfg, options, extra_subflavors, ds.layout, files.dataset_config)
    if join is not None and join.aux:
        if not is_crude(source.sample_type):
            raise ConfigError(
                f"{join.where}: aux applies to crude datasets (sample_type CrudeSample), whose "
                f"cookers read from it; {path} is read as {source.sample_type}"
            )
        source = dataclasses.replace(source, aux=join.aux)
    source_id = f"{_dataset_name(path)}#{split}#{len(ds)}"
    if subset is not None:
        source_id += f"[{start}:{end}]"
    if join is not None and join.join:
        source, tag = _joined(join, source, options.open_kwargs)
        source_id += tag
    cols = {c: ds.column(c) for c in columns}
    joined = join is not None and bool(join.join)
    if options.sequence_slices == "shards" and "shard_id" in ds.column_names and not joined:
        # where the slices end (shard_slices); Energon slices a join by its workers' parts only
        cols["shard_id"] = ds.column("shard_id")
    view = samples(indices=indices, columns=cols, source_id=source_id, dataset=dataset)
    return source, view


def _joined(leaf: Leaf, primary: DatasetSource, open_kwargs) -> tuple[DatasetSource, str]:
    """The primary's source with the leaf's joined datasets (opened and checked here), and
    what the snapshot fingerprint records of them (each part's name, split, size, nonmatch)."""
    from fpipe.materialize.join import JoinSource, with_join

    parts, tags = [], []
    for part in leaf.join:
        ds = _open(part.path, open_kwargs)
        cfg = ds.dataset_config(part.dataset_config)  # a part keeps its own dataset config
        files = dict(split_config=part.split_config, dataset_config=part.dataset_config)
        if len(ds.split_indices(part.split_part, **files)) == 0:
            raise ConfigError(f"{leaf.where}: {part.path}: split {part.split_part!r} is empty")
        own = DatasetOptions(open_kwargs=open_kwargs)
        source = _source(part.path, cfg, own, part.subflavors, ds.layout, part.dataset_config)
        parts.append(JoinSource(source, part.split_part, part.nonmatch, part.name, **files))
        named = (part.dataset_config, cfg.split_config or part.split_config)
        files = "".join(f"[{f}]" for f in named if f)
        tags.append(f"{Path(part.path).name}#{part.split_part}{files}#{len(ds)}:{part.nonmatch}")
    named = [leaf.join_name, *(p.name for p in leaf.join)] if leaf.join_name else []
    tag = f" joined as {leaf.name!r}: [{', '.join(tags)}] joiner={leaf.joiner} names={named}"
    return with_join(primary, parts, leaf.joiner, leaf.where), tag


def _source(
    path, cfg, options: DatasetOptions, extra_subflavors, layout, config_file=None
) -> DatasetSource:
    """How to read and cook the dataset at ``path`` (``layout``): its dataset config ``cfg``
    (read from ``config_file``; None: dataset.yaml), with the options' overrides applied."""
    sample_type, field_map = options.sample_type, options.field_map
    subflavors, open_kwargs = options.subflavors, options.open_kwargs
    st = sample_type if sample_type is not None else cfg.sample_type
    if not isinstance(st, str):
        from fpipe.samples import sample_type_name

        st = sample_type_name(st)
    if field_map is None and not cfg.field_map and cfg.sample_loader and not is_crude(st):
        raise ConfigError(
            f"{path}: {config_file or 'dataset.yaml'} maps fields with an Energon "
            "sample_loader "
            f"({cfg.sample_loader}); fpipe does not run code named in data files. Set a field "
            f"map instead: `fpipe prepare {path} --field image=jpg --field caption=txt` (or "
            "field_map={...} here), or use sample_type='CrudeSample' with a cooker"
        )
    sub = dict(subflavors if subflavors is not None else getattr(cfg, "subflavors", {}))
    sub.update(extra_subflavors or {})
    open_kwargs = dict(open_kwargs or {})
    if layout == "parquet" and "row_group_cache" not in open_kwargs:
        # Workers keep the row groups of the slices a shuffle window interleaves, so a
        # slice read in order decodes each of its row groups once.
        open_kwargs["row_group_cache"] = row_group_cache_for(
            options.shuffle_buffer_size, options.max_samples_per_sequence
        )
    return DatasetSource(
        path=str(path),
        sample_type=st,
        field_map=dict(field_map if field_map is not None else cfg.field_map),
        subflavors=sub,
        open_kwargs=open_kwargs,
    )


def _dataset_name(path) -> str:
    """A dataset's name in a plan of one dataset: its folder's name."""
    return Path(os.fspath(path)).name


def _mix_views(
    path,
    options: DatasetOptions,
    *,
    training: bool,
    columns,
    unit: str | None = None,
    mix: Mix | None = None,
) -> tuple[Mix, tuple[str, ...], list[DatasetSource], list[View]]:
    """A metadataset split resolved: its mix, the leaves' names, and each leaf's source and
    index-order view (dataset id = the leaf's position); ``unit``: the blend's unit column,
    which every leaf's index must have; ``mix``: the split already resolved."""
    for key in ("dataset_config", "split_config"):
        if getattr(options, key) is not None:
            raise ConfigError(
                f"{path}: {key}={getattr(options, key)!r} names a file of a dataset folder; "
                f"in a metadataset, set '{key}:' on the dataset's entry"
            )
    if mix is None:
        mix = resolve_mix(load_metadataset(path), options.split, training=training)
    sources, views = [], []
    for d, leaf in enumerate(mix.leaves):
        try:
            source, view = dataset_view(
                leaf.path,
                leaf.split_part,
                options,
                dataset=d,
                extra_subflavors=leaf.subflavors,
                columns=columns,
                join=leaf,
            )
        except KeyError as e:
            if unit is None or repr(unit) not in str(e):
                raise
            raise ConfigError(
                f"{path}: blend_unit {unit!r}: dataset {leaf.name!r} has no index column "
                f"{unit!r} ({e.args[0]}); prepare it with that column (e.g. a token count) "
                "or blend by samples"
            ) from None
        sources.append(source)
        views.append(view)
    return mix, tuple(leaf.name for leaf in mix.leaves), sources, views


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
        return repeat(shuffled(view), num_epochs), [source], (_dataset_name(path),)
    mix = resolve_mix(load_metadataset(path), options.split, training=True)
    unit = mix.unit if options.blend_unit is None else options.blend_unit
    unit = None if unit == "samples" else unit
    if unit is not None and unit not in columns:
        columns = (*columns, unit)
    mix, names, sources, views = _mix_views(
        path, options, training=True, columns=columns, unit=unit, mix=mix
    )
    # Energon shifts each dataset's leftover samples by the samples of those before it
    rotations = [sum(v.size for v in views[:i]) for i in range(len(views))]
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
    return blend(views, schedule=schedule, unit=unit, **common), sources, names


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
    combined = None if m is None or own is None else own * m
    return msgspec.structs.replace(options, shuffle_over_epochs_multiplier=combined)


def slice_order(view: View, options: DatasetOptions, cuts=()) -> View:
    """One dataset's training order of slices (``max_samples_per_sequence`` samples each, cut
    as ``sequence_slices`` says; ``cuts``: positions where a slice must start): shuffled over
    ``shuffle_over_epochs_multiplier`` passes (None: in index order), read
    ``parallel_shard_iters`` slices at a time, interleaved (Energon's two knobs)."""
    passes, parallel = options.shuffle_over_epochs_multiplier, options.parallel_shard_iters or 1
    if passes is None:
        return view
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
        return view, [source], (_dataset_name(path),)
    mix = None
    if leaf is not None:
        mix = resolve_mix(load_metadataset(path), split, training=False)
        mix = msgspec.structs.replace(mix, leaves=(mix.leaves[leaf],))
    _, names, sources, views = _mix_views(path, options, training=False, columns=(), mix=mix)
    view = concat(views, names=list(names), limit=limit)
    if view.size == 0:
        raise ConfigError(f"{path}: split {split!r} has no samples")
    return view, sources, names
