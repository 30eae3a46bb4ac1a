"""Each dataset of a plan, opened: its split's samples in index order (a
:class:`~fpipe.plan.source.View`) and how to read and cook them (a
:class:`~fpipe.materialize.sources.DatasetSource`), for one dataset folder or each leaf of a
metadataset split (its subset, joined parts and auxiliary stores applied). The plan heads
(:mod:`fpipe.datasets._mix`) order what these views hold.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import msgspec
import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.datasets.options import DatasetOptions
from fpipe.materialize.sources import DatasetSource
from fpipe.plan import samples
from fpipe.plan.source import View
from fpipe.storage.config.dataset_yaml import is_crude
from fpipe.storage.config.metadataset import (
    Leaf,
    Mix,
    load_metadataset,
    resolve_mix,
)
from fpipe.storage.config.metadataset_subset import subset_bounds

__all__ = [
    "dataset_name",
    "dataset_view",
    "mix_views",
    "open_leaf",
    "open_path",
    "row_group_cache_for",
]


def row_group_cache_for(shuffle_buffer_size, max_samples_per_sequence) -> int:
    """:func:`fpipe.storage.read.parquet.row_group_cache_for`, imported when first needed."""
    from fpipe.storage.read.parquet import row_group_cache_for as size

    return size(shuffle_buffer_size, max_samples_per_sequence)


def open_path(path, open_kwargs):
    """The dataset at ``path``, opened with ``open_kwargs`` (None: the defaults) for planning:
    a prepared folder's record and configs are read, its shard table and arrays are checked
    where a worker opens it to read (``plan_only``), so a blend of many datasets opens fast."""
    from fpipe.storage.read.layouts import open_dataset

    return open_dataset(path, plan_only=True, **(open_kwargs or {}))


def open_leaf(path, shared, own=None):
    """A dataset of a metadataset opened for planning, with those of the ``shared`` open
    arguments its layout takes and its entry's ``own``; and what it was opened with
    (:func:`~fpipe.storage.read.layouts.open_taking`)."""
    from fpipe.storage.read.layouts import open_taking

    return open_taking(path, shared, own, plan_only=True)


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
    it by key (its own open arguments, such as a corpus's GPT sequence options, go over the
    options')."""
    shared = options.open_kwargs  # a metadataset's: given once for datasets of any layout
    if join is None:
        ds = open_path(path, shared)
    else:  # the shared arguments its layout takes, then its entry's own (GPT options)
        try:
            ds, taken = open_leaf(path, shared, join.open_kwargs)
        except ConfigError as e:
            raise ConfigError(f"{join.where}: {e}") from e  # which entry of which file named it
        shared = {**(shared or {}), **join.open_kwargs}
        options = msgspec.structs.replace(options, open_kwargs=taken)
    # The config files to read: the leaf's (a metadataset entry), else the options' (a dataset
    # folder); a split_config named in the dataset config wins, as in Energon.
    files = join if join is not None else options
    cfg = ds.dataset_config(files.dataset_config)
    subset = join.subset if join is not None else None
    if _whole(ds, cfg, files):  # samples 0..n-1: a range, not n indices (format 3 indexes)
        indices = _Range(len(ds))
    else:
        indices = ds.split_samples(split, files.split_config, dataset_config=files.dataset_config)
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
    source_id = f"{dataset_name(path)}#{split}#{len(ds)}"
    order_of = getattr(ds.reader, "order_tag", None)  # what else decides its samples' order
    if order_of is not None:
        source_id += order_of()
    if subset is not None:
        source_id += f"[{start}:{end}]"
    if join is not None and join.join:
        source, tag = _joined(join, source, shared)
        source_id += tag
    cols = {c: ds.column(c) for c in columns}
    joined = join is not None and bool(join.join)
    if options.sequence_slices == "shards" and "shard_id" in ds.column_names and not joined:
        # where the slices end (shard_slices); Energon slices a join by its workers' parts only
        cols["shard_id"] = ds.column("shard_id")
    if isinstance(indices, _Range) and indices.start == 0:
        view = samples(indices.stop, columns=cols, source_id=source_id, dataset=dataset)
    else:  # a range (one run of a split's shards) stays two numbers: samples() digests it
        if isinstance(indices, _Range):
            indices = range(indices.start, indices.stop)
        view = samples(indices=indices, columns=cols, source_id=source_id, dataset=dataset)
    return source, view


class _Range:
    """Sample indices ``start..stop-1`` as two numbers: what a split of a whole dataset is.
    Slicing gives a range; ``np.asarray`` the indices themselves."""

    def __init__(self, stop: int, start: int = 0):
        self.start, self.stop = start, max(start, stop)

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, s: slice) -> _Range:
        a, b, step = s.indices(len(self))
        assert step == 1
        return _Range(self.start + b, self.start + a)

    def __array__(self, dtype=None, copy=None):
        return np.arange(self.start, self.stop, dtype=dtype or np.int64)


def _whole(ds, cfg, files) -> bool:
    """Whether every sample of ``ds`` is in the split, in index order, for a format 3 index
    (a shard list in arrays): its view is then ``samples(n)``, whose config holds no digest
    of ``n`` indices (computing one reads O(samples)). Older indexes keep the digest of their
    indices, so their snapshots still restore."""
    record = ds.record
    return (
        getattr(record, "shard_arrays", False)
        and ds.split is None
        and files.split_config is None
        and cfg.split_config is None
    )


def _joined(leaf: Leaf, primary: DatasetSource, open_kwargs) -> tuple[DatasetSource, str]:
    """The primary's source with the leaf's joined datasets (opened and checked here), and
    what the snapshot fingerprint records of them (each part's name, split, size, nonmatch)."""
    from fpipe.materialize.join import JoinSource, with_join

    parts, tags = [], []
    for part in leaf.join:
        ds, taken = open_leaf(part.path, open_kwargs)
        cfg = ds.dataset_config(part.dataset_config)  # a part keeps its own dataset config
        files = dict(split_config=part.split_config, dataset_config=part.dataset_config)
        if len(ds.split_samples(part.split_part, **files)) == 0:
            raise ConfigError(f"{leaf.where}: {part.path}: split {part.split_part!r} is empty")
        own = DatasetOptions(open_kwargs=taken)
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


def _opened_with(source: DatasetSource) -> list[dict]:
    """The open arguments of a leaf's source and of the datasets joined to it."""
    return [source.open_kwargs, *(part.source.open_kwargs for part in source.join)]


def dataset_name(path) -> str:
    """A dataset's name in a plan of one dataset: its folder's name."""
    return Path(os.fspath(path)).name


def mix_views(
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
    from fpipe.storage.read.open_args import refuse_untaken

    refuse_untaken(str(path), options.open_kwargs, [k for s in sources for k in _opened_with(s)])
    return mix, tuple(leaf.name for leaf in mix.leaves), sources, views
