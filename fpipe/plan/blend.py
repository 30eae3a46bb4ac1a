"""Blending several datasets into one stream of refs: by weight (optionally scheduled over the
run) or epochized (exact passes per blend epoch). Validation splits are concatenated instead
(:mod:`fpipe.plan.concat`).

Each dataset is a :class:`~fpipe.plan.source.View` with its own slice shuffle: dataset ``d``'s
stream is its epochs one after the other, epoch ``e`` in that view's keyed order of epoch
``e``, so a dataset that runs out starts its next epoch in a fresh order. The blend decides
which dataset feeds global position ``i`` from ``(key, i)`` alone (see
:mod:`fpipe.plan.blend_choice`); the k-th position that chose ``d`` takes the k-th ref of ``d``'s
stream. The state is therefore the position plus one counter per dataset: fixed width,
O(datasets), whatever the step; with ``draw="quota"`` the counters are a formula of the
position (:mod:`fpipe.plan.blend_quota`) and the state holds none. Window shuffle,
distribution and batching come after the blend, so a batch mixes datasets.

This module builds the step and hands out positions (``next``, ``advance``); its records and
their checks are :mod:`fpipe.plan.blend_state`, the blocks of positions it memoizes
:mod:`fpipe.plan.blend_block`, and its advance on counts :mod:`fpipe.plan.blend_advance`.

Example:
    >>> from fpipe.plan.source import samples
    >>> src = blend([samples(4, dataset=0), samples(6, dataset=1)], weights=[1, 1])
    >>> state, refs = src.next(src.init(0), 8)
    >>> len(refs), sorted(set(refs.dataset.tolist()))
    (8, [0, 1])
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from fpipe.core.advance import Passed, advance_by_next
from fpipe.core.graph import step_key
from fpipe.core.records import Refs
from fpipe.core.rng import fold_in
from fpipe.core.stage import Source, View
from fpipe.plan._blend_units import pack_counters
from fpipe.plan._unit_count import Uncountable
from fpipe.plan.blend_advance import BlendCounting
from fpipe.plan.blend_block import blend_blocks
from fpipe.plan.blend_choice import WeightSchedule, choose_epochized
from fpipe.plan.blend_count import count_draws
from fpipe.plan.blend_quota import QuotaPlan
from fpipe.plan.blend_state import (
    BlendConfig,
    BlendMode,
    BlendState,
    QuotaBlendState,
    UnitBlendState,
    blend_config,
    online_mix,
    restore_check,
    weight_digests,
    with_online_change,
)
from fpipe.plan.online_mix import choose_online, decode_mix, encode_mix, prune

__all__ = [
    "BlendConfig",
    "BlendMode",
    "BlendState",
    "QuotaBlendState",
    "UnitBlendState",
    "blend",
    "blend_counters",
    "choice_key",
    "online_mix",
    "quota_taken",
    "with_online_change",
]

_CHOICE = 0xB1E2D  # fold_in tag of the blend's choice key
_BLOCK = 8192  # positions computed at once when callers ask for fewer (memoized, invisible)
_FIRST_BLOCK = 256  # the first such block of a blend; each later one twice the last, to _BLOCK


def blend(
    views: Sequence[View],
    *,
    weights: Sequence[float] | None = None,
    schedule: WeightSchedule | None = None,
    repetitions: Sequence[float] | None = None,
    counts: Sequence[int] | None = None,
    names: Sequence[str] | None = None,
    num_epochs: int | None = None,
    allow_changed_weights: bool = False,
    unit: str | None = None,
    draw: str = "hash",
    name: str = "blend",
) -> Source:
    """A source mixing ``views`` (give exactly one of ``weights``, ``schedule``, ``repetitions``).

    Args:
      views: one view per dataset (each with its own slice shuffle); view ``d`` should tag its
        refs with ``dataset=d``.
      weights / schedule: a weighted blend (constant weights, or a :class:`WeightSchedule`
        over the global position).
      repetitions: an epochized blend: each blend epoch takes ``round(r_d * size_d)`` refs
        from dataset ``d`` (``r_d`` whole passes when ``r_d`` is an integer), interleaved.
      counts: with ``repetitions``, the refs each blend epoch takes from each dataset instead
        of ``round(r_d * size_d)`` (Energon's per-worker rounding, for instance; each >= 1).
      names: unique dataset names (default ``d0, d1, ...``): keys, messages and stats use them.
      num_epochs: blend epochs before the end (None: forever).
      allow_changed_weights: accept a snapshot taken with other weights; each dataset goes on
        from its own counter and the new weights apply from the restored position.
      unit: a weighted blend's weights are shares of this index column (``"tokens"``) instead
        of shares of samples: each view's refs must carry the column. The choice is then
        deterministic, from per-dataset counters (see :mod:`fpipe.plan._blend_units`).
      draw: how a weighted blend draws each position's dataset: ``"hash"`` (the default, each
        position on its own) or ``"quota"`` (blocks of 4,096 positions holding each dataset's
        share of them, in a keyed order: the counters are then a formula of the position and
        the state holds none; constant weights or a schedule of steps, see
        :mod:`fpipe.plan.blend_quota`).
    """
    config, limit = blend_config(
        views,
        weights=weights,
        schedule=schedule,
        repetitions=repetitions,
        counts=counts,
        names=names,
        num_epochs=num_epochs,
        allow_changed_weights=allow_changed_weights,
        unit=unit,
        draw=draw,
    )
    names, sizes, mode = config.datasets, config.sizes, config.mode
    schedule, counts, unit = config.schedule, config.counts, config.unit
    n = len(names)
    digests = weight_digests(schedule, n, unit, config.draw)
    quota: QuotaPlan | None = None
    if config.draw == "quota" and schedule is not None:  # counters derived, none stored
        quota = QuotaPlan(schedule.points, schedule.weights, n)
    ranges = [v.take_range for v in views]
    cache: OrderedDict = OrderedDict()
    # a fresh plan (a restore, a seek, a small run) pays for a short block only; a long run
    # reaches _BLOCK after a few misses
    block_size = [_FIRST_BLOCK]
    zero_units = pack_counters(np.zeros(n, dtype=np.int64))

    def init(root):
        if quota is not None:
            return QuotaBlendState(root, 0, (), digests)
        if unit is not None:
            return UnitBlendState(root, 0, (0,) * n, digests, zero_units)
        return BlendState(root, 0, (0,) * n, digests)

    def entries(state):
        extra = state.weights[len(digests) :]
        return decode_mix(extra, n, quota is not None).entries if extra else ()

    def counters(state, position=None) -> np.ndarray:
        """Each dataset's refs given before ``position`` (default: the state's): the state's
        own counters, or a quota blend's formula."""
        if quota is None:
            assert position is None or position == state.position
            return np.asarray(state.taken, dtype=np.int64)
        at = state.position if position is None else position
        return quota.counts(choice_key(state.key, name), entries(state), at)

    def choose(state, positions):
        ck = choice_key(state.key, name)
        if quota is not None:
            return quota.choose(ck, entries(state), positions)
        if schedule is not None:  # a weighted blend (an epochized one has no schedule)
            return choose_online(ck, schedule, entries(state), positions)
        return choose_epochized(ck, counts, positions)

    leaf_roots, leaf_refs, compute, compute_units, units_after, reuse = blend_blocks(
        name=name,
        n=n,
        names=names,
        sizes=sizes,
        ranges=ranges,
        schedule=schedule,
        unit=unit,
        digests=digests,
        choose=choose,
        entries=entries,
        counters=counters,
        cache=cache,
        restarts=quota is not None,
    )
    check = restore_check(
        name=name,
        names=names,
        n=n,
        mode=mode,
        unit=unit,
        digests=digests,
        allow_changed_weights=allow_changed_weights,
        draw=config.draw,
    )

    def own_weights(state, position) -> bytes:
        """The ``weights`` field of a state at ``position``: the digests, and the online
        record without the entries no later position uses."""
        extra = state.weights[len(digests) :]
        if not extra:
            return digests
        if quota is not None:  # its counts follow from every change: all kept
            return state.weights
        mix = decode_mix(extra, n)
        pruned = prune(mix, position)
        return digests + (extra if pruned is mix else encode_mix(pruned))

    def next_(state: Any, want: int):
        if state.weights[: len(digests)] != digests or (
            len(state.weights) > len(digests) and mode != "weighted"
        ):
            check(state)
            state = _reset(state)
        left = want if limit is None else min(want, limit - state.position)
        if left <= 0:
            return state, Refs.empty()
        hit = cache.get(state)
        if hit is None and len(state.weights) > len(digests):
            hit = reuse(state)
        if hit is None:
            block = max(left, block_size[0])
            block_size[0] = min(_BLOCK, 2 * block_size[0])
            if limit is not None:
                block = min(block, limit - state.position)
            if unit is None:
                refs, ids = compute(state, block)
                hit = (refs, ids, None, 0)
            else:
                hit = (*compute_units(state, block), 0)
        refs, ids, units, off = hit
        take = min(left, len(refs) - off)
        new: BlendState | QuotaBlendState
        weights = own_weights(state, state.position + take)
        if quota is not None:
            new = QuotaBlendState(state.key, state.position + take, (), weights)
            return _keep(new, hit, take), refs[off : off + take]
        counts_ = np.bincount(ids[off : off + take], minlength=n)
        taken = tuple((np.asarray(state.taken, dtype=np.int64) + counts_).tolist())
        if unit is None:
            new = BlendState(state.key, state.position + take, taken, weights)
        else:
            used = units_after(state, ids, units, off, take)
            new = UnitBlendState(state.key, state.position + take, taken, weights, used)
        return _keep(new, hit, take), refs[off : off + take]

    def _keep(new, hit, take):
        """``new``, with the rest of the block ``hit`` memoized for it."""
        refs, ids, units, off = hit
        if off + take < len(refs):
            cache[new] = (refs, ids, units, off + take)
            while len(cache) > 4:
                cache.popitem(last=False)
        return new

    def _reset(state: Any) -> BlendState:
        """A state restored under other (accepted) weights or unit: the new digests, and the
        unit counters from zero (the new weights start a new segment). Never a quota blend's:
        its ``check`` refuses other weights (a quota draw's counts follow from its weights)."""
        assert quota is None
        extra = state.weights[len(digests) :]
        if unit is None:
            return BlendState(state.key, state.position, state.taken, digests + extra)
        return UnitBlendState(state.key, state.position, state.taken, digests + extra, zero_units)

    def draws(state, lo, hi):
        """How many of positions ``lo..hi-1`` choose each dataset (a weighted hash draw)."""
        assert schedule is not None  # a weighted blend
        ck = choice_key(state.key, name)
        return count_draws(ck, schedule, entries(state), lo, hi, n, lambda p: choose(state, p))

    counting = BlendCounting(
        name=name,
        names=names,
        sizes=sizes,
        views=tuple(views),
        ranges=tuple(ranges),
        mode=mode,
        counts=counts,
        schedule=schedule,
        unit=unit,
        limit=limit,
        choose=choose,
        entries=entries,
        leaf_roots=leaf_roots,
        leaf_refs=leaf_refs,
        derived=None if quota is None else counters,
        draws=draws if quota is None and schedule is not None and unit is None else None,
    )

    def advance(state: Any, want: int) -> tuple[BlendState | QuotaBlendState, Passed]:
        """next_'s state after ``want`` positions, from their choices counted per dataset
        (no ref gathered, see :mod:`fpipe.plan.blend_advance`)."""
        if state.weights[: len(digests)] != digests or (
            len(state.weights) > len(digests) and mode != "weighted"
        ):
            return advance_by_next(source, state, want)  # next_ checks or resets these
        try:
            stop, taken, tokens, epoch = counting.count(state, want)
        except Uncountable:  # a dataset whose epochs hold other units: build them
            return advance_by_next(source, state, want)
        new: BlendState | QuotaBlendState
        if quota is not None:
            new = QuotaBlendState(state.key, stop, (), own_weights(state, stop))
        elif unit is None:
            new = BlendState(state.key, stop, taken, own_weights(state, stop))
        else:
            new = UnitBlendState(state.key, stop, taken, own_weights(state, stop), tokens)
        return new, Passed(stop - state.position, stop - state.position, epoch)

    no_input_state = (None,) * n
    source = Source(
        name=name,
        config=config,
        init=init,
        next=next_,
        state_type=(
            QuotaBlendState if quota is not None else BlendState if unit is None else UnitBlendState
        ),
        inputs=tuple(views),
        split=lambda s: (s, no_input_state),
        check=check,
        advance=advance,
    )
    return source


def blend_counters(pipeline: Any, state: Any) -> dict[str, dict[str, int]]:
    """Per dataset of the first blend in a :class:`~fpipe.core.Pipeline`: ``{"taken": refs it
    gave, "epoch": its current epoch}`` (empty without a blend). The counters are global (all
    ranks); with a shuffle window after the blend they are those at the start of the window.

    Example:
        >>> from fpipe.core import Pipeline
        >>> from fpipe.plan.source import samples
        >>> p = Pipeline(blend([samples(3), samples(5, dataset=1)], weights=[1, 1],
        ...                    names=["a", "b"]), seed=0)
        >>> state, _ = p.next(p.init(), 10)
        >>> c = blend_counters(p, state)
        >>> c["a"]["taken"] + c["b"]["taken"], c["a"]["epoch"] == c["a"]["taken"] // 3
        (10, True)
    """
    found = next(((p, c) for p, c in pipeline.parts if isinstance(c, BlendConfig)), None)
    if found is None:
        return {}
    path, config = found
    own = pipeline.get(state, path)
    taken = quota_taken(config, path, own) if own.compact_changes else own.taken
    return {
        name: {"taken": t, "epoch": t // size}
        for name, t, size in zip(config.datasets, taken, config.sizes)
    }


def choice_key(root: Any, name: str) -> Any:
    """The choice key of the blend step ``name`` in the plan of root key ``root``."""
    return fold_in(step_key(root, name), _CHOICE)


def quota_taken(config: BlendConfig, path: str, state: QuotaBlendState) -> tuple[int, ...]:
    """Each dataset's refs given so far by the quota blend at ``path`` (config ``config``) in
    state ``state``: a formula of its position and changes (:mod:`fpipe.plan.blend_quota`)."""
    assert config.schedule is not None  # a quota blend is weighted
    n = len(config.datasets)
    mix = online_mix(state, n)
    plan = QuotaPlan(config.schedule.points, config.schedule.weights, n)
    ck = choice_key(state.key, path.rsplit("/", 1)[-1])
    return tuple(plan.counts(ck, mix.entries if mix else (), state.position).tolist())
