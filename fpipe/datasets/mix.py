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

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fpipe.core.errors import ConfigError
from fpipe.core.stage import Source
from fpipe.materialize.sources import DatasetSource
from fpipe.plan import repeat, samples, slice_shuffle
from fpipe.plan.blend import blend
from fpipe.plan.blend_choice import WeightSchedule
from fpipe.plan.concat import concat
from fpipe.plan.distribute import per_rank
from fpipe.plan.source import View
from fpipe.storage.config.dataset_yaml import is_crude
from fpipe.storage.config.metadataset import (
    Leaf,
    Mix,
    is_metadataset,
    load_metadataset,
    resolve_mix,
)

__all__ = ["eval_head", "train_head"]


def _open(path, open_kwargs):
    from fpipe.storage.read.layouts import open_dataset

    return open_dataset(path, **(open_kwargs or {}))


def dataset_view(
    path, split, *, dataset=0, extra_subflavors=None, overrides, columns, limit=None, join=None
) -> tuple[DatasetSource, View]:
    """The source and the index-order view of one dataset's split (dataset id ``dataset``);
    ``join``: the leaf whose ``join:`` parts are joined to it by key."""
    ds = _open(path, overrides.get("open_kwargs"))
    indices = ds.split_indices(split)
    if limit is not None:
        indices = indices[:limit]
    if len(indices) == 0:
        raise ConfigError(f"{path}: split {split!r} has no samples")
    source = _source(path, ds, overrides, extra_subflavors)
    source_id = f"{_dataset_name(path)}#{split}#{len(ds)}"
    if join is not None and join.join:
        source, tag = _joined(join, source, overrides)
        source_id += tag
    cols = {c: ds.column(c) for c in columns}
    view = samples(indices=indices, columns=cols, source_id=source_id, dataset=dataset)
    return source, view


def _joined(leaf: Leaf, primary: DatasetSource, overrides) -> tuple[DatasetSource, str]:
    """The primary's source with the leaf's joined datasets (opened and checked here), and
    what the snapshot fingerprint records of them (each part's name, split, size, nonmatch)."""
    from fpipe.materialize.join import JoinSource, with_join

    open_kwargs = overrides.get("open_kwargs")
    parts, tags = [], []
    for part in leaf.join:
        ds = _open(part.path, open_kwargs)
        if len(ds.split_indices(part.split_part)) == 0:
            raise ConfigError(f"{leaf.where}: {part.path}: split {part.split_part!r} is empty")
        source = _source(part.path, ds, {"open_kwargs": open_kwargs}, part.subflavors)
        parts.append(JoinSource(source, part.split_part, part.nonmatch, part.name))
        tags.append(f"{Path(part.path).name}#{part.split_part}#{len(ds)}:{part.nonmatch}")
    named = [leaf.join_name, *(p.name for p in leaf.join)] if leaf.join_name else []
    tag = f" joined as {leaf.name!r}: [{', '.join(tags)}] joiner={leaf.joiner} names={named}"
    return with_join(primary, parts, leaf.joiner, leaf.where), tag


def _source(path, ds, overrides, extra_subflavors) -> DatasetSource:
    """How to read and cook ``ds``: its dataset.yaml, with ``overrides`` applied."""
    sample_type, field_map, subflavors, open_kwargs = (
        overrides.get(k) for k in ("sample_type", "field_map", "subflavors", "open_kwargs")
    )
    cfg = ds.config
    st = sample_type if sample_type is not None else cfg.sample_type
    if not isinstance(st, str):
        from fpipe.samples import sample_type_name

        st = sample_type_name(st)
    if field_map is None and not cfg.field_map and cfg.sample_loader and not is_crude(st):
        raise ConfigError(
            f"{path}: dataset.yaml maps fields with an Energon sample_loader "
            f"({cfg.sample_loader}); fpipe does not run code named in data files. Set a field "
            f"map instead: `fpipe prepare {path} --field image=jpg --field caption=txt` (or "
            "field_map={...} here), or use sample_type='CrudeSample' with a cooker"
        )
    sub = dict(subflavors if subflavors is not None else getattr(cfg, "subflavors", {}))
    sub.update(extra_subflavors or {})
    return DatasetSource(
        path=str(path),
        sample_type=st,
        field_map=dict(field_map if field_map is not None else cfg.field_map),
        subflavors=sub,
        open_kwargs=dict(open_kwargs or {}),
    )


def _dataset_name(path) -> str:
    """A dataset's name in a plan of one dataset: its folder's name."""
    return Path(os.fspath(path)).name


def _mix_views(
    path, split: str, *, training: bool, overrides, columns
) -> tuple[Mix, tuple[str, ...], list[DatasetSource], list[View]]:
    """A metadataset split resolved: its mix, the leaves' names, and each leaf's source and
    index-order view (dataset id = the leaf's position)."""
    mix = resolve_mix(load_metadataset(path), split, training=training)
    sources, views = [], []
    for d, leaf in enumerate(mix.leaves):
        source, view = dataset_view(
            leaf.path,
            leaf.split_part,
            dataset=d,
            extra_subflavors=leaf.subflavors,
            overrides=overrides,
            columns=columns,
            join=leaf,
        )
        sources.append(source)
        views.append(view)
    return mix, tuple(leaf.name for leaf in mix.leaves), sources, views


def train_head(
    path,
    split: str,
    *,
    topology,
    distribution: str,
    slice_size: int,
    num_epochs: int | None,
    columns: Sequence[str],
    overrides: dict[str, Any],
    weight_schedule: Any = None,
    schedule_mode: str = "step",
    allow_changed_weights: bool = False,
) -> tuple[Source, list[DatasetSource], tuple[str, ...]]:
    """(source, dataset sources, dataset names) of a training plan's head."""

    def shuffled(view):
        if distribution == "per_rank":  # this rank's own contiguous part of each dataset
            view = per_rank(view, rank=topology.rank, world_size=topology.world_size)
        return slice_shuffle(view, slice_size)

    if not is_metadataset(path):
        if weight_schedule is not None:
            raise ConfigError("weight_schedule needs a metadataset with a blend")
        source, view = dataset_view(path, split, overrides=overrides, columns=columns)
        return repeat(shuffled(view), num_epochs), [source], (_dataset_name(path),)
    mix, names, sources, views = _mix_views(
        path, split, training=True, overrides=overrides, columns=columns
    )
    views = [shuffled(v) for v in views]
    if mix.mode == "single" and weight_schedule is None:
        return repeat(views[0], num_epochs), sources, names
    common = dict(names=names, num_epochs=num_epochs, allow_changed_weights=allow_changed_weights)
    if mix.mode == "blend_epochized":
        if weight_schedule is not None:
            raise ConfigError(f"{path}: weight_schedule applies to a weighted 'blend:'")
        src = blend(views, repetitions=[leaf.repetitions for leaf in mix.leaves], **common)
        return src, sources, names
    schedule = _schedule(weight_schedule, schedule_mode, names) or mix.schedule
    return blend(views, schedule=schedule, **common), sources, names


def _schedule(given, mode: str, names) -> WeightSchedule | None:
    """A Python schedule: a WeightSchedule or ``[(position, {name: weight}), ...]``."""
    if given is None or isinstance(given, WeightSchedule):
        return given
    if mode not in ("step", "linear"):
        raise ConfigError(f"schedule_mode must be 'step' or 'linear', got {mode!r}")
    return WeightSchedule.of([(p, dict(w)) for p, w in given], names, linear=mode == "linear")


def eval_head(
    path, split: str, *, limit: int | None, overrides: dict[str, Any]
) -> tuple[View, list[DatasetSource], tuple[str, ...]]:
    """(view, dataset sources, dataset names) of a validation / test pass."""
    if not is_metadataset(path):
        source, view = dataset_view(path, split, overrides=overrides, columns=(), limit=limit)
        return view, [source], (_dataset_name(path),)
    _, names, sources, views = _mix_views(
        path, split, training=False, overrides=overrides, columns=()
    )
    view = concat(views, names=list(names), limit=limit)
    if view.size == 0:
        raise ConfigError(f"{path}: split {split!r} has no samples")
    return view, sources, names
