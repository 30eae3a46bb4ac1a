"""Bucketed and grouped batching: one bucket (or group) per global step, its own batch size.

:func:`bucket_batches` batches an epoch view by OpenSora's ``bucket_config`` (see
:mod:`fpipe.plan.buckets._config` and :mod:`fpipe.plan.buckets._assign`); :func:`group_batches`
does the same for any ``batch_group_criterion(row) -> (group, batch_size)`` on metadata rows
(Energon's hook, run here in the plan tier). Both are sources over a
:class:`~fpipe.plan.source.View` that emit batch recipes for one rank in global mode; the
algorithm and the state are in :mod:`fpipe.plan.buckets.group_batch`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.core.records import Config, Refs
from fpipe.core.rng import Key, fold_in, name_id
from fpipe.core.stage import Source, View
from fpipe.plan.batch import Remainder
from fpipe.plan.buckets._assign import assign_buckets
from fpipe.plan.buckets._config import BucketTable, load_bucket_config
from fpipe.plan.buckets.group_batch import GroupBatchState, make_next
from fpipe.plan.slice_order import tiles

__all__ = [
    "BucketBatchConfig",
    "GroupBatchConfig",
    "bucket_batches",
    "group_batches",
]

_ASSIGN = 0xA551C7  # fold_in tag of the keep-or-not draws


class BucketBatchConfig(Config, frozen=True):
    """Batches by bucket: ``buckets`` (the parsed bucket_config), the metadata columns read
    (``frames=None``: every sample is an image), the window (None: one epoch), whether each
    bucket's samples are shuffled in the window, the epochs (None: forever), this rank of
    ``world_size`` (both compatible: elastic resume), and what happens to leftovers at the end
    of a window."""

    compatible: ClassVar[frozenset[str]] = frozenset({"rank", "world_size"})

    buckets: BucketTable
    width: str = "width"
    height: str = "height"
    frames: str | None = "num_frames"
    window: int | None = None
    shuffle: bool = True
    num_epochs: int | None = None
    rank: int = 0
    world_size: int = 1
    remainder: Remainder = Remainder.DROP


class GroupBatchConfig(Config, frozen=True):
    """Batches by the group of ``criterion`` (a function, by qualified name) over ``columns``,
    at most ``max_groups`` groups per window (the state holds a count per group, so its size is
    fixed by this bound); the other fields as in :class:`BucketBatchConfig`."""

    compatible: ClassVar[frozenset[str]] = frozenset({"rank", "world_size"})

    criterion: str
    columns: tuple[str, ...]
    max_groups: int = 16
    window: int | None = None
    shuffle: bool = True
    num_epochs: int | None = None
    rank: int = 0
    world_size: int = 1
    remainder: Remainder = Remainder.DROP


def _check_common(view: View, rank: int, world_size: int, window, num_epochs) -> None:
    if world_size < 1 or not 0 <= rank < world_size:
        raise ConfigError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
    if window is not None and window < 1:
        raise ConfigError(f"window must be >= 1 or None (one epoch), got {window}")
    if num_epochs is not None and num_epochs < 0:
        raise ConfigError(f"num_epochs must be >= 0 or None, got {num_epochs}")


def _source(view: View, name: str, config, assign, num_groups: int, drawn: bool) -> Source:
    nxt, advance = make_next(
        size=view.size,
        window=config.window,
        num_epochs=config.num_epochs,
        take=view.gather,
        assign=assign,
        rank=config.rank,
        world_size=config.world_size,
        keep_remainder=config.remainder is Remainder.KEEP,
        num_groups=num_groups,
        shuffle=config.shuffle,
        name=name,
        drawn=drawn,
        retags_epochs=tiles(view),
    )
    zeros = (0,) * (num_groups or 0)
    return Source(
        name=name,
        config=config,
        init=lambda root: GroupBatchState(root, consumed=zeros),
        next=nxt,
        state_type=GroupBatchState,
        inputs=(view,),
        split=_split,
        stats=_stats,
        step_count=lambda s: s.step,
        advance=advance,
    )


def _split(state: GroupBatchState):
    return state, (None,)


def _stats(state: GroupBatchState) -> dict[str, int]:
    return {"unfit": state.unfit, "rejected": state.rejected, "group_remainder": state.dropped}


def bucket_batches(
    view: View,
    bucket_config: Mapping | str | BucketTable,
    *,
    rank: int = 0,
    world_size: int = 1,
    drop_last: bool = True,
    num_epochs: int | None = None,
    window: int | None = None,
    shuffle: bool = True,
    width: str = "width",
    height: str = "height",
    frames: str | None = "num_frames",
    name: str = "bucket",
) -> Source:
    """Recipes for rank ``rank`` in global mode: each step is one bucket of the config, and
    every rank gets ``batch_size(bucket)`` samples of it.

    ``bucket_config`` is OpenSora's mapping, a YAML string or file, or a parsed
    :class:`~fpipe.plan.buckets._config.BucketTable`. The view must carry the ``width``,
    ``height`` (and ``frames``) metadata columns. ``recipe.bucket`` is the bucket id and
    ``recipe.shape`` the bucket's ``(frames, height, width)``. ``window``: refs per block of an
    epoch that is bucketed at once (None: the whole epoch, as OpenSora; a restore recomputes
    one window);
    ``shuffle``: permute each bucket's samples in the window (keyed), else keep view order;
    ``drop_last``: drop the leftovers of each bucket at the end of a window (counted in
    ``state.dropped``), else emit them as one short global batch per bucket.

    Example:
        >>> from fpipe.core import Pipeline
        >>> from fpipe.plan import samples
        >>> v = samples(6, columns={"width": np.full(6, 64), "height": np.full(6, 64),
        ...                         "num_frames": np.array([1, 1, 1, 1, 9, 9])})
        >>> p = Pipeline(bucket_batches(v, {"1:1": {64: {1: (1.0, 2), 8: (1.0, 2)}}},
        ...                             num_epochs=1), seed=0)
        >>> state, out = p.next(p.init(), 10)
        >>> sorted((r.bucket, len(r)) for r in out)
        [(0, 2), (0, 2), (1, 2)]
    """
    table = load_bucket_config(bucket_config)
    _check_common(view, rank, world_size, window, num_epochs)
    if not any(b.batch_size for b in table.buckets):
        raise ConfigError("bucket_config: every bucket has probability 0 (batch size None)")
    config = BucketBatchConfig(
        buckets=table,
        width=width,
        height=height,
        frames=frames,
        window=window,
        shuffle=shuffle,
        num_epochs=num_epochs,
        rank=rank,
        world_size=world_size,
        remainder=Remainder.DROP if drop_last else Remainder.KEEP,
    )
    sizes = np.array([b.batch_size for b in table.buckets], dtype=np.int64)
    ids = tuple(range(len(table)))
    shapes = tuple(b.shape for b in table.buckets)

    def assign(refs: Refs, key: Key):
        gid = assign_buckets(
            table,
            fold_in(key, _ASSIGN),
            width=refs.column(width),
            height=refs.column(height),
            frames=None if frames is None else refs.column(frames),
            index=refs.index,
            dataset=refs.dataset,
            epoch=refs.epoch,
        )
        return gid, sizes, ids, shapes

    # a probability of 0 or 1 draws the same every epoch: then so are the buckets' sizes
    drawn = any(0.0 < b.probability < 1.0 for b in table.buckets)
    return _source(view, name, config, assign, num_groups=len(table), drawn=drawn)


def _fn_id(fn: Callable, name: str, default: str) -> str:
    qual = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"
    if "<lambda>" in qual or "<locals>" in qual:
        if name == default:
            raise ConfigError(
                f"{default} with a lambda or local function needs name=... so that snapshots "
                "can tell pipelines apart"
            )
        return f"local:{name}"
    return qual


def group_batches(
    view: View,
    batch_group_criterion: Callable[[dict], tuple[Hashable, int]],
    *,
    columns: Sequence[str],
    max_groups: int = 16,
    rank: int = 0,
    world_size: int = 1,
    drop_last: bool = True,
    num_epochs: int | None = None,
    window: int | None = None,
    shuffle: bool = True,
    name: str = "group_batches",
) -> Source:
    """Grouped batching on metadata: ``batch_group_criterion(row) -> (group, batch_size)``.

    ``row`` maps each of ``columns`` to the ref's value (plain Python numbers). A group is an
    int or a string (``recipe.bucket`` is the int, or ``fpipe.core.rng.name_id`` of the
    string); ``None`` as group leaves the sample out (counted as unfit). A window may hold at
    most ``max_groups`` groups. Every step takes one
    group for all ranks, as :func:`bucket_batches` does with buckets.

    Example:
        >>> from fpipe.core import Pipeline
        >>> from fpipe.plan import samples
        >>> def by_parity(row):
        ...     return row["t"] % 2, 2
        >>> v = samples(8, columns={"t": np.arange(8)})
        >>> p = Pipeline(group_batches(v, by_parity, columns=["t"], num_epochs=1), seed=0)
        >>> [r.refs.column("t").tolist() for r in p.next(p.init(), 9)[1]]
        [[1, 7], [5, 3], [4, 2], [6, 0]]
    """
    _check_common(view, rank, world_size, window, num_epochs)
    if max_groups < 1:
        raise ConfigError(f"max_groups must be >= 1, got {max_groups}")
    columns = tuple(columns)
    config = GroupBatchConfig(
        criterion=_fn_id(batch_group_criterion, name, "group_batches"),
        columns=columns,
        max_groups=max_groups,
        window=window,
        shuffle=shuffle,
        num_epochs=num_epochs,
        rank=rank,
        world_size=world_size,
        remainder=Remainder.DROP if drop_last else Remainder.KEEP,
    )

    def assign(refs: Refs, key: Key):
        cols = [refs.column(c).tolist() for c in columns]
        slots: dict[Any, int] = {}
        sizes: list[int] = []
        gid = np.empty(len(refs), dtype=np.int64)
        for i, values in enumerate(zip(*cols) if cols else [()] * len(refs)):
            group, bs = batch_group_criterion(dict(zip(columns, values)))
            if group is None:
                gid[i] = -1
                continue
            g = slots.get(group)
            if g is None:
                if not isinstance(group, (int, str)) or isinstance(group, bool):
                    raise ConfigError(f"{name}: group {group!r} must be an int or a str")
                if isinstance(bs, bool) or not isinstance(bs, (int, np.integer)) or bs < 1:
                    raise ConfigError(f"{name}: group {group!r}: batch size {bs!r} is not >= 1")
                if len(sizes) == max_groups:
                    raise ConfigError(
                        f"{name}: more than max_groups={max_groups} groups in one window (group "
                        f"{group!r}); raise max_groups"
                    )
                g = slots[group] = len(sizes)
                sizes.append(int(bs))
            elif bs != sizes[g]:
                raise ConfigError(
                    f"{name}: group {group!r} got batch sizes {sizes[g]} and {bs}; a group has "
                    "one batch size"
                )
            gid[i] = g
        ids = tuple(g if isinstance(g, int) else name_id(g) for g in slots)
        pad = max_groups - len(sizes)  # unused slots: empty groups, so the state keeps its size
        return (
            gid,
            np.array(sizes + [0] * pad, dtype=np.int64),
            ids + (-1,) * pad,
            ((),) * max_groups,
        )

    return _source(view, name, config, assign, num_groups=max_groups, drawn=False)
