"""Blend weights changed while a run trains (online data mixing), kept in the blend's state.

A change sets new weights from a *global step*. The blend chooses by global position, and a
shuffle window, packing buffer or bucket after it may already have drawn positions for the
steps before that one; those positions keep the weights they were drawn with. The change
therefore takes effect from the blend's *frontier* at that step: the first position that no
output so far was computed from (:func:`frontier`). Every rank runs the same plan, so every
rank finds the same frontier, and a replay of the same changes at the same steps finds it again.

The blend's state records the changes in its ``weights`` field, after the 2-byte digests of the
configured weights (so a blend that was never changed keeps its bytes): an :class:`OnlineMix`
with the number of changes, the step of the last one, an 8-byte hash chain over every
``(step, weights)`` so far, and the few entries ``(position, weights)`` that positions at or
after the blend's own position still need (the one in force, and those a lookahead has not
reached yet). Weights are stored as float32 (what the blend then uses), so a 100-dataset blend
adds about 460 bytes per entry to the state, whatever the number of changes.

A blend with ``draw="quota"`` (:mod:`fpipe.plan.blend_quota`) keeps every entry instead (its
counts after a change follow from all the earlier ones; at most :data:`MAX_QUOTA_CHANGES`),
each holding its weights as compressed integer shares, not float32.

Positions before the first entry follow the configured weights (or schedule); from an entry's
position on, its weights hold until the next entry. A blend by units (tokens) starts its
counters again at each entry, as at a schedule point.

Example:
    >>> w = weights32([1, 3])
    >>> mix = add_change(None, position=100, step=2, weights=w)
    >>> mix.changes, mix.step, [e.position for e in mix.entries]
    (1, 2, [100])
    >>> decode_mix(encode_mix(mix), 2) == mix
    True
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from fpipe.core.compose import Lifted
from fpipe.core.errors import ConfigError, SnapshotError
from fpipe.core.rng import Key, uniform_array
from fpipe.core.snapshot import pack, unpack
from fpipe.plan._blend_units import segment
from fpipe.plan.blend_choice import WeightSchedule, choose_weighted, pick
from fpipe.plan.blend_quota import decode_shares

__all__ = [
    "MAX_ENTRIES",
    "OnlineEntry",
    "OnlineMix",
    "add_change",
    "chain_digest",
    "choose_online",
    "decode_mix",
    "drawn_state",
    "encode_mix",
    "entry_weights",
    "online_segment",
    "prune",
    "replace_step_state",
    "weights32",
]

#: Entries a blend state may hold at once (the one in force and those not reached yet). Each
#: lookahead stage after the blend can hold back at most one, so plans stay far below it.
MAX_ENTRIES = 8
#: Entries a quota blend's state holds: every change of the run (see ``draw="quota"``).
MAX_QUOTA_CHANGES = 64
#: The digest of an empty history.
EMPTY_DIGEST = bytes(8)


class OnlineEntry(msgspec.Struct, frozen=True, array_like=True):
    """Weights in force from blend position ``position`` on (float32, little-endian)."""

    position: int
    weights: bytes


class OnlineMix(msgspec.Struct, frozen=True, array_like=True):
    """The online changes a blend state knows: ``changes`` so far, the global ``step`` of the
    last one, ``digest`` (8 bytes) of the whole history, and the entries still needed."""

    changes: int
    step: int
    digest: bytes
    entries: tuple[OnlineEntry, ...]

    @property
    def current(self) -> bytes:
        """The weights of the last change (float32 bytes)."""
        return self.entries[-1].weights


def weights32(weights: Sequence[float]) -> bytes:
    """Weights as the float32 bytes a blend stores and uses; a ConfigError unless they are
    finite, >= 0 and not all 0."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or not len(w):
        raise ConfigError(f"blend weights are one number per dataset, got {weights!r}")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ConfigError(f"blend weights must be finite, >= 0 and not all 0: {list(weights)}")
    w32 = w.astype("<f4")
    if w32.sum() <= 0:
        raise ConfigError(f"blend weights {list(weights)} are all 0 in float32")
    return w32.tobytes()


def entry_weights(data: bytes) -> tuple[float, ...]:
    """The weights of float32 bytes, as Python floats (exact)."""
    return tuple(np.frombuffer(data, dtype="<f4").astype(np.float64).tolist())


def chain_digest(previous: bytes, step: int, weights: bytes) -> bytes:
    """The history digest after a change ``(step, weights)`` follows one with ``previous``."""
    h = hashlib.blake2b(previous, digest_size=8)
    h.update(int(step).to_bytes(8, "little", signed=True))
    h.update(weights)
    return h.digest()


def add_change(
    mix: OnlineMix | None,
    *,
    position: int,
    step: int,
    weights: bytes,
    stored: bytes | None = None,
    limit: int = MAX_ENTRIES,
) -> OnlineMix:
    """``mix`` with the change ``(step, weights)`` in force from ``position`` on. A change at
    the position of the last entry replaces its weights (no position took them). ``stored``:
    what the entry keeps instead of the float32 ``weights`` (a quota blend's shares; the
    history digest is of ``weights`` all the same); ``limit``: the entries a state may hold."""
    digest = chain_digest(EMPTY_DIGEST if mix is None else mix.digest, step, weights)
    entries = () if mix is None else mix.entries
    if entries and position < entries[-1].position:
        raise ConfigError(
            f"a blend weight change from position {position} comes before the last one "
            f"({entries[-1].position}): changes must follow the run's steps in order"
        )
    if entries and entries[-1].position == position:
        entries = entries[:-1]
    entries = (*entries, OnlineEntry(position, weights if stored is None else stored))
    if len(entries) > limit and stored is not None:  # a quota blend: every change is kept
        raise ConfigError(
            f"a blend with draw='quota' keeps every weight change in its state (its counts "
            f"follow from them), at most {limit} in a run"
        )
    if len(entries) > limit:
        raise ConfigError(
            f"{len(entries)} blend weight changes are waiting for the plan's lookahead to reach "
            f"them (at most {MAX_ENTRIES}); change the weights less often than once per "
            "shuffle window or packing buffer"
        )
    changes = 1 if mix is None else mix.changes + 1
    return OnlineMix(changes, step, digest, entries)


def prune(mix: OnlineMix, position: int) -> OnlineMix:
    """``mix`` without the entries that no position from ``position`` on uses (the one in
    force at ``position`` and every later one stay)."""
    entries = mix.entries
    keep = 0
    while keep + 1 < len(entries) and entries[keep + 1].position <= position:
        keep += 1
    if keep == 0:
        return mix
    return OnlineMix(mix.changes, mix.step, mix.digest, entries[keep:])


def encode_mix(mix: OnlineMix) -> bytes:
    """The fixed-width bytes of ``mix`` (see :func:`fpipe.core.snapshot.pack`)."""
    return pack(msgspec.to_builtins(mix, builtin_types=(bytes,)))


@functools.lru_cache(maxsize=64)
def decode_mix(data: bytes, n: int, shares: bool = False) -> OnlineMix:
    """The :class:`OnlineMix` of :func:`encode_mix` bytes for ``n`` datasets, checked; a
    SnapshotError names what is wrong (edited or corrupted bytes). ``shares``: the entries hold
    a quota blend's integer shares (:func:`fpipe.plan.blend_quota.decode_shares`), not
    float32 weights."""
    try:
        mix = msgspec.convert(unpack(data), type=OnlineMix)
    except (msgspec.ValidationError, SnapshotError) as e:
        raise SnapshotError(f"a blend's online weights in the snapshot are malformed: {e}") from e
    positions = [e.position for e in mix.entries]
    ok = (
        mix.changes >= 1
        and mix.step >= 0
        and len(mix.digest) == 8
        and 1 <= len(mix.entries) <= (MAX_QUOTA_CHANGES if shares else MAX_ENTRIES)
        and positions[0] >= 0
        and all(b > a for a, b in zip(positions, positions[1:]))
    )
    if shares:
        for entry in mix.entries:
            decode_shares(entry.weights, n)  # a SnapshotError if malformed
        ok = ok and mix.changes >= len(mix.entries)
    for entry in () if shares else mix.entries:
        raw = entry.weights
        w = np.frombuffer(raw, dtype="<f4") if len(raw) == 4 * n else None
        ok = ok and w is not None and bool(np.isfinite(w).all() and (w >= 0).all() and w.sum() > 0)
    if not ok:
        raise SnapshotError(
            "a blend's online weights in the snapshot are not possible (entries out of order, "
            "weights not one finite non-negative float32 per dataset): the snapshot was edited or "
            "corrupted"
        )
    return mix


def choose_online(
    key: Key, schedule: WeightSchedule, entries: Sequence[OnlineEntry], positions: np.ndarray
) -> np.ndarray:
    """:func:`~fpipe.plan.blend_choice.choose_weighted` with the online ``entries`` in force
    from their positions on (the same uniform of ``(key, position)`` picks the dataset)."""
    positions = np.asarray(positions, dtype=np.int64)
    if not entries or not len(positions) or int(positions.max()) < entries[0].position:
        return choose_weighted(key, schedule, positions)
    bounds = np.asarray([e.position for e in entries], dtype=np.int64)
    if len(positions) > 1 and not bool((positions[1:] >= positions[:-1]).all()):
        order = np.argsort(positions, kind="stable")  # any order: choose sorted, put back
        out = np.empty(len(positions), dtype=np.int32)
        out[order] = choose_online(key, schedule, entries, positions[order])
        return out
    # Sorted positions (a block of the blend): each entry's positions are one slice.
    cuts = np.searchsorted(positions, bounds, side="left").tolist()
    out = np.empty(len(positions), dtype=np.int32)
    if cuts[0]:
        out[: cuts[0]] = choose_weighted(key, schedule, positions[: cuts[0]])
    u = uniform_array(key, positions[cuts[0] :])
    for j, (lo, hi) in enumerate(zip(cuts, [*cuts[1:], len(positions)])):
        if hi > lo:
            out[lo:hi] = pick(_row(entries[j].weights), u[lo - cuts[0] : hi - cuts[0]])
    return out


def agree_until(
    a: Sequence[OnlineEntry], b: Sequence[OnlineEntry], position: int, restarts: bool = False
) -> int:
    """The first position at or after ``position`` where the online entries ``a`` and ``b``
    may choose differently (a very large number when they agree everywhere from there).

    ``restarts``: each entry starts a segment whose choices depend on where it starts, not
    only on its weights (a quota blend's blocks begin again at each entry): the entries in
    force at ``position`` agree only if they are the same entry."""

    def effective(entries):
        j = 0
        while j < len(entries) and entries[j].position <= position:
            j += 1
        if not j:
            head: tuple[OnlineEntry, ...] = ()
        elif restarts:
            head = (entries[j - 1],)
        else:
            head = (OnlineEntry(position, entries[j - 1].weights),)
        return head + tuple(entries[j:])

    ea, eb = effective(a), effective(b)
    for x, y in zip(ea, eb):
        if x != y:
            return max(position, min(x.position, y.position))
    if len(ea) != len(eb):
        longer = ea if len(ea) > len(eb) else eb
        return longer[min(len(ea), len(eb))].position
    return 1 << 62


def _row(weights: bytes) -> tuple[float, ...]:
    return tuple(np.frombuffer(weights, dtype="<f4").astype(np.float64).tolist())


def online_segment(
    schedule: WeightSchedule, entries: Sequence[OnlineEntry], position: int
) -> tuple[int, int | None, np.ndarray]:
    """:func:`~fpipe.plan._blend_units.segment` with the online ``entries``: each entry starts
    a segment of constant weights that lasts to the next one."""
    j = int(np.searchsorted([e.position for e in entries], position, side="right")) - 1
    if j >= 0:
        stop = entries[j + 1].position if j + 1 < len(entries) else None
        w = np.asarray(_row(entries[j].weights), dtype=np.float64)
        return entries[j].position, stop, w / w.sum()
    start, stop, w = segment(schedule, position)
    if entries:
        first = entries[0].position
        stop = first if stop is None else min(stop, first)
    return start, stop, w


def drawn_state(source: Any, state: Any) -> Any:
    """``state`` with every lookahead its outputs so far were computed from drawn (see
    ``Source.drawn``); a ConfigError for a plan step that cannot say."""
    if source.drawn is not None:
        return source.drawn(state)
    if any(hasattr(i, "next") for i in source.inputs):
        raise ConfigError(
            f"plan step {source.name!r} cannot say how far it has read its input, so online "
            "blend weights cannot find the step boundary in it"
        )
    return state


def replace_step_state(source: Any, state: Any, path: str, new: Any) -> Any:
    """``state`` with the state of the step at ``path`` (a step of the main chain) replaced
    by ``new``."""
    if source.name == path:
        return new
    if isinstance(state, Lifted) and len(source.inputs) == 1:
        up = replace_step_state(source.inputs[0], state.up, path, new)
        return Lifted(up, state.st, state.cur)
    raise ConfigError(f"the blend {path!r} is not in the main chain of this plan")
