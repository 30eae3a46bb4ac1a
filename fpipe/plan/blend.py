"""Blending several datasets into one stream of refs: by weight (optionally scheduled over the
run) or epochized (exact passes per blend epoch). Validation splits are concatenated instead
(:mod:`fpipe.plan.concat`).

Each dataset is a :class:`~fpipe.plan.source.View` with its own slice shuffle: dataset ``d``'s
stream is its epochs one after the other, epoch ``e`` in that view's keyed order of epoch
``e``, so a dataset that runs out starts its next epoch in a fresh order. The blend decides
which dataset feeds global position ``i`` from ``(key, i)`` alone (see
:mod:`fpipe.plan.blend_choice`); the k-th position that chose ``d`` takes the k-th ref of ``d``'s
stream. The state is therefore the position plus one counter per dataset: fixed width,
O(datasets), whatever the step. Window shuffle, distribution and batching come after the
blend, so a batch mixes datasets.

Example:
    >>> from fpipe.plan.source import samples
    >>> src = blend([samples(4, dataset=0), samples(6, dataset=1)], weights=[1, 1])
    >>> state, refs = src.next(src.init(0), 8)
    >>> len(refs), sorted(set(refs.dataset.tolist()))
    (8, [0, 1])
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import msgspec
import numpy as np

from fpipe.core.advance import Passed, advance_by_next
from fpipe.core.errors import ConfigError, SnapshotError, SnapshotMismatchError
from fpipe.core.graph import input_root, step_key
from fpipe.core.records import Config, Refs, State
from fpipe.core.rng import Key, fold_in, name_id
from fpipe.core.stage import Source, View
from fpipe.plan._blend_units import (
    COUNTER_BYTES,
    pack_counters,
    take_by_units,
    unpack_counters,
)
from fpipe.plan._unit_count import Uncountable
from fpipe.plan.blend_advance import BlendCounting
from fpipe.plan.blend_choice import WeightSchedule, choose_epochized
from fpipe.plan.online_mix import (
    OnlineMix,
    add_change,
    agree_until,
    choose_online,
    decode_mix,
    encode_mix,
    online_segment,
    prune,
)

__all__ = [
    "BlendConfig",
    "BlendMode",
    "BlendState",
    "UnitBlendState",
    "blend",
    "blend_counters",
    "online_mix",
    "with_online_change",
]

#: How a blend chooses: by weight (a schedule), or epochized (exact counts per blend epoch).
BlendMode = Literal["weighted", "epochized"]

_CHOICE = 0xB1E2D  # fold_in tag of the blend's choice key
_BLOCK = 8192  # positions computed at once when callers ask for fewer (memoized, invisible)
_FIRST_BLOCK = 256  # the first such block of a blend; each later one twice the last, to _BLOCK

CHANGED_MIX_HINT = (
    "the datasets of a blend changed: a snapshot keeps one counter per dataset, so adding, "
    "removing or renaming a dataset cannot continue the same run. Resume with the same "
    "datasets, or start a new run from the new metadataset."
)


class BlendConfig(Config, frozen=True):
    """A blend of ``datasets`` (names, in order) with ``sizes`` refs per epoch each.

    ``mode``: ``"weighted"`` (``schedule`` gives the weights) or ``"epochized"`` (dataset ``d``
    gives ``counts[d]`` refs per blend epoch). ``num_epochs``: blend epochs before the stream
    ends (None: forever); a weighted blend's epoch is ``sum(sizes)`` positions.
    ``unit``: None (weights are shares of samples) or the index column whose values weights
    share (``"tokens"``; see :mod:`fpipe.plan._blend_units`).
    ``schedule`` and ``unit`` are declared compatible: a restore checks them itself, by
    dataset name (the state's weight digests cover both), and accepts a change when
    ``allow_changed_weights`` is set.
    """

    compatible: ClassVar[frozenset[str]] = frozenset({"schedule", "allow_changed_weights", "unit"})
    mismatch_hint: ClassVar[str] = CHANGED_MIX_HINT

    datasets: tuple[str, ...]
    sizes: tuple[int, ...]
    mode: BlendMode = "weighted"
    schedule: WeightSchedule | None = None
    counts: tuple[int, ...] = ()
    num_epochs: int | None = None
    allow_changed_weights: bool = False
    unit: str | None = None


class BlendState(State, frozen=True, array_like=True):
    """``key``: the root key of the blend's plan; ``position``: next global position;
    ``taken[d]``: refs dataset ``d`` gave so far (its epoch is ``taken[d] // size``);
    ``weights``: 2-byte digest per dataset of its scheduled weights, checked on restore; after
    weights changed online, followed by the :class:`~fpipe.plan.online_mix.OnlineMix` record
    of the changes (see :func:`online_mix`)."""

    key: Key
    position: int
    taken: tuple[int, ...]
    weights: bytes = b""


class UnitBlendState(BlendState, frozen=True, array_like=True):
    """The state of a blend by units (``unit="tokens"``): :class:`BlendState` plus
    ``tokens``: for each dataset ``d``, the units it gave since the start of the
    constant-weight segment that holds ``position``, as 6-byte counters (fixed width)."""

    tokens: bytes = b""


def _weight_digests(schedule: WeightSchedule | None, n: int, unit: str | None = None) -> bytes:
    if schedule is None:
        return b""
    out = bytearray()
    for d in range(n):
        col = (schedule.linear, schedule.points, tuple(row[d] for row in schedule.weights))
        text = repr(col) if unit is None else repr((*col, unit))
        out += (name_id(text) & 0xFFFF).to_bytes(2, "little")
    return bytes(out)


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
    """
    n = len(views)
    names = tuple(names) if names is not None else tuple(f"d{i}" for i in range(n))
    if n == 0 or len(names) != n or len(set(names)) != n:
        raise ConfigError(f"blend needs one unique name per view, got {names} for {n} views")
    sizes = tuple(v.size for v in views)
    for nm, size in zip(names, sizes):
        if size <= 0:
            raise ConfigError(f"blend: dataset {nm!r} has no samples")
    if sum(x is not None for x in (weights, schedule, repetitions)) != 1:
        raise ConfigError("blend: give exactly one of weights, schedule or repetitions")
    if num_epochs is not None and num_epochs < 0:
        raise ConfigError(f"num_epochs must be >= 0 or None, got {num_epochs}")
    given_counts, counts = counts, ()
    mode: BlendMode
    if given_counts is not None and repetitions is None:
        raise ConfigError("blend: counts apply to an epochized blend (repetitions)")
    if repetitions is not None:
        if len(repetitions) != n or any(not r > 0 for r in repetitions):
            raise ConfigError(f"blend: repetitions must be > 0, one per dataset: {repetitions}")
        counts = tuple(max(1, round(r * s)) for r, s in zip(repetitions, sizes))
        if given_counts is not None:
            if len(given_counts) != n or any(int(c) < 1 for c in given_counts):
                raise ConfigError(f"blend: counts must be >= 1, one per dataset: {given_counts}")
            counts = tuple(int(c) for c in given_counts)
        mode, epoch_len = "epochized", sum(counts)
    else:
        if schedule is None:
            assert weights is not None  # exactly one of the three is given (checked above)
            schedule = WeightSchedule.constant(weights)
        if len(schedule.weights[0]) != n:
            raise ConfigError(f"blend: {len(schedule.weights[0])} weights for {n} datasets")
        mode, epoch_len = "weighted", sum(sizes)
    if unit in ("", "samples"):
        unit = None  # the default: weights are shares of samples
    if unit is not None and mode != "weighted":
        raise ConfigError(
            f"blend: unit {unit!r} applies to a weighted blend; an epochized blend takes whole "
            "passes of samples"
        )
    config = BlendConfig(
        datasets=names,
        sizes=sizes,
        mode=mode,
        schedule=schedule,
        counts=counts,
        num_epochs=num_epochs,
        allow_changed_weights=allow_changed_weights,
        unit=unit,
    )
    limit = None if num_epochs is None else num_epochs * epoch_len
    digests = _weight_digests(schedule, n, unit)
    ranges = [v.take_range for v in views]
    sort_dtype = np.uint8 if n <= 256 else np.uint16 if n <= 65536 else np.int64
    cache: OrderedDict = OrderedDict()
    # a fresh plan (a restore, a seek, a small run) pays for a short block only; a long run
    # reaches _BLOCK after a few misses
    block_size = [_FIRST_BLOCK]
    zero_units = pack_counters(np.zeros(n, dtype=np.int64))

    def init(root):
        if unit is not None:
            return UnitBlendState(root, 0, (0,) * n, digests, zero_units)
        return BlendState(root, 0, (0,) * n, digests)

    def entries(state):
        extra = state.weights[len(digests) :]
        return decode_mix(extra, n).entries if extra else ()

    def choose(state, positions):
        ck = fold_in(step_key(state.key, name), _CHOICE)
        if schedule is not None:  # a weighted blend (an epochized one has no schedule)
            return choose_online(ck, schedule, entries(state), positions)
        return choose_epochized(ck, counts, positions)

    @functools.lru_cache(maxsize=4)
    def leaf_roots(root: Key) -> tuple[Key, ...]:
        # A memo of a pure function (the root key of each input), computed once per root.
        return tuple(input_root(root, name, d) for d in range(n))

    def leaf_refs(state, d, start, stop) -> list[Refs]:
        size, out, lk = sizes[d], [], leaf_roots(state.key)[d]
        while start < stop:
            e, pos = divmod(start, size)
            take = min(stop - start, size - pos)
            out.append(ranges[d](lk, e, pos, pos + take))
            start += take
        return out

    streams: dict = {}  # (root key, d) -> (start, refs): a memo of dataset d's stream

    def stream_refs(state, d, start, stop) -> Refs:
        """Refs ``start..stop-1`` of dataset ``d``'s stream, read ahead three times as far: the
        next blocks (and a block chosen again after an online change) slice the same read."""
        k = (state.key, d)
        hit = streams.get(k)
        if hit is not None and hit[0] <= start and stop <= hit[0] + len(hit[1]):
            return hit[1][start - hit[0] : stop - hit[0]]
        refs = Refs.concat(leaf_refs(state, d, start, start + 3 * (stop - start)))
        streams[k] = (start, refs)
        return refs[: stop - start]

    def compute(state, m):
        positions = np.arange(state.position, state.position + m, dtype=np.int64)
        ids = choose(state, positions)
        counts_ = np.bincount(ids, minlength=n)
        # Stable sort by dataset; small integer types take numpy's radix sort.
        order = np.argsort(ids.astype(sort_dtype, copy=False), kind="stable")
        chunks = []
        for d in np.flatnonzero(counts_).tolist():
            t0 = state.taken[d]
            chunks.append(stream_refs(state, d, t0, t0 + int(counts_[d])))
        inv = np.empty(m, dtype=np.int64)
        inv[order] = np.arange(m, dtype=np.int64)
        return Refs.concat(chunks)[inv], ids

    def check(state):
        if unit is not None and len(getattr(state, "tokens", b"")) not in (0, COUNTER_BYTES * n):
            raise SnapshotError(
                f"snapshot state of blend {name!r}: {len(state.tokens)} bytes of unit counters "
                f"for {n} datasets: the snapshot was edited or corrupted"
            )
        own = state.weights[: len(digests)]
        if len(state.weights) > len(digests):
            if mode != "weighted":
                raise SnapshotError(
                    f"snapshot state of blend {name!r}: online weights in an epochized blend: "
                    "the snapshot was edited or corrupted"
                )
            decode_mix(state.weights[len(digests) :], n)  # a SnapshotError if malformed
        if own == digests or allow_changed_weights:
            return
        if len(own) != len(digests):
            raise SnapshotMismatchError(f"blend {name!r}: {CHANGED_MIX_HINT}")
        changed = [
            nm for d, nm in enumerate(names) if own[2 * d : 2 * d + 2] != digests[2 * d : 2 * d + 2]
        ]
        raise SnapshotMismatchError(
            f"blend {name!r}: the weights of {changed} differ from the snapshot's (or the "
            "blend_unit that weighs them changed); resuming "
            "would change the mix mid-run. Pass allow_changed_weights=True to continue each "
            "dataset from its own position with the new weights from here on."
        )

    def compute_units(state, m):
        """``m`` choices by units from ``state``: refs, dataset ids, units of each."""
        assert schedule is not None and unit is not None  # a weighted blend by units
        pos, taken, used = state.position, np.asarray(state.taken), unpack_counters(state.tokens, n)
        parts, ids_parts, unit_parts = [], [], []
        online = entries(state)

        def fetch(d, start, stop):
            return Refs.concat(leaf_refs(state, d, start, stop))

        while m:
            _, stop, w = online_segment(schedule, online, pos)
            k = m if stop is None else min(m, stop - pos)
            refs, ids, units = take_by_units(fetch, unit, names, w, taken, used, k)
            taken = taken + np.bincount(ids, minlength=n)
            used = used + np.bincount(ids, weights=units, minlength=n).astype(np.int64)
            parts.append(refs)
            ids_parts.append(ids)
            unit_parts.append(units)
            pos, m = pos + k, m - k
            if pos == stop:  # the weights change: the counters start again
                used = np.zeros(n, dtype=np.int64)
        return Refs.concat(parts), np.concatenate(ids_parts), np.concatenate(unit_parts)

    def units_after(state, ids, units, start, take) -> bytes:
        """``tokens`` of the state ``take`` positions after ``state``, which is at offset
        ``start`` of a block whose choices are ``ids`` (units ``units``)."""
        end = state.position + take
        lo = online_segment(schedule, entries(state), end)[0] if schedule is not None else 0
        if lo <= state.position:  # still in the segment of state.position
            first, acc = start, unpack_counters(state.tokens, n)
        else:  # a new segment began inside: count from its start
            first, acc = start + (lo - state.position), np.zeros(n, dtype=np.int64)
        stop = start + take
        got = np.bincount(ids[first:stop], weights=units[first:stop], minlength=n)
        return pack_counters(acc + got.astype(np.int64))

    def reuse(state):
        """A block memoized for the same position under other online weights, cut where the
        two choose differently (a change applied at the loader leaves the positions before
        its frontier as they were)."""
        for k, (refs, ids, units, off) in cache.items():
            if (
                k.position != state.position
                or k.taken != state.taken
                or k.key != state.key
                or getattr(k, "tokens", None) != getattr(state, "tokens", None)
                or k.weights[: len(digests)] != digests
            ):
                continue
            same = agree_until(entries(k), entries(state), state.position) - state.position
            if same <= 0:
                continue
            end = min(len(refs), off + same)
            return refs[:end], ids[:end], None if units is None else units[:end], off
        return None

    def own_weights(state, position) -> bytes:
        """The ``weights`` field of a state at ``position``: the digests, and the online
        record without the entries no later position uses."""
        extra = state.weights[len(digests) :]
        if not extra:
            return digests
        mix = decode_mix(extra, n)
        pruned = prune(mix, position)
        return digests + (extra if pruned is mix else encode_mix(pruned))

    def next_(state: BlendState, want: int):
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
        counts_ = np.bincount(ids[off : off + take], minlength=n)
        taken = tuple((np.asarray(state.taken, dtype=np.int64) + counts_).tolist())
        new: BlendState
        weights = own_weights(state, state.position + take)
        if unit is None:
            new = BlendState(state.key, state.position + take, taken, weights)
        else:
            used = units_after(state, ids, units, off, take)
            new = UnitBlendState(state.key, state.position + take, taken, weights, used)
        if off + take < len(refs):
            cache[new] = (refs, ids, units, off + take)
            while len(cache) > 4:
                cache.popitem(last=False)
        return new, refs[off : off + take]

    def _reset(state: BlendState) -> BlendState:
        """A state restored under other (accepted) weights or unit: the new digests, and the
        unit counters from zero (the new weights start a new segment)."""
        extra = state.weights[len(digests) :]
        if unit is None:
            return BlendState(state.key, state.position, state.taken, digests + extra)
        return UnitBlendState(state.key, state.position, state.taken, digests + extra, zero_units)

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
    )

    def advance(state: BlendState, want: int) -> tuple[BlendState, Passed]:
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
        new: BlendState
        if unit is None:
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
        state_type=BlendState if unit is None else UnitBlendState,
        inputs=tuple(views),
        split=lambda s: (s, no_input_state),
        check=check,
        advance=advance,
    )
    return source


def online_mix(state: BlendState, n: int) -> OnlineMix | None:
    """The online weight changes a weighted blend's state of ``n`` datasets holds (None:
    never changed)."""
    extra = state.weights[2 * n :]
    return decode_mix(extra, n) if extra else None


def with_online_change(
    state: BlendState, n: int, *, position: int, step: int, weights: bytes
) -> BlendState:
    """``state`` (a weighted blend of ``n`` datasets) with the weights ``weights`` (float32
    bytes, see :func:`fpipe.plan.online_mix.weights32`) in force from ``position`` (at or after
    the state's own position) on, recorded as a change at global step ``step``. A blend by
    units counts its units from ``position`` on (from zero, as at a schedule point)."""
    if position < state.position:
        raise ConfigError(
            f"online weights from blend position {position}, before the blend's {state.position}"
        )
    mix = add_change(online_mix(state, n), position=position, step=step, weights=weights)
    mix = prune(mix, state.position)
    new = msgspec.structs.replace(state, weights=state.weights[: 2 * n] + encode_mix(mix))
    if isinstance(new, UnitBlendState) and position == state.position:
        # The change starts a segment at the state's own position (no lookahead drew past it:
        # a shuffle window used up to the step, or none at all), so the unit counters, which
        # count from the start of the segment holding the position, start again here. A change
        # further ahead is reached inside a block, where the blend starts them again itself.
        new = msgspec.structs.replace(new, tokens=bytes(COUNTER_BYTES * n))
    return new


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
    return {
        name: {"taken": t, "epoch": t // size}
        for name, t, size in zip(config.datasets, own.taken, config.sizes)
    }
