"""A blend's choice when weights are shares of an index column (tokens), not of samples.

With ``unit="tokens"`` a weight is the share of the *tokens* (or of any numeric index column)
that a dataset contributes. The choice is deterministic, from per-dataset counters alone:
within a segment of constant weights ``w``, dataset ``d`` has contributed ``S_d`` units so far,
and its next sample (``l`` units) has the tag ``(S_d + l / 2) / w_d``; the position goes to
the dataset whose next sample has the smallest tag (ties: the lower dataset number). This is
fair queueing by start time, centred on the sample's middle: every dataset's units stay within
about half a sample of its share, at every position, so any window of positions holds the
weights' shares of units up to a sample or two at each end.

Because each dataset's tags increase along its own stream, a block of ``m`` choices is a merge
of sorted sequences, computed with numpy: look ahead in every dataset's stream, sort all tags,
and keep the prefix that no unread sample could overtake. The result depends on the counters
only, never on how the stream was cut into blocks, so a restore continues exactly.

A schedule changes the weights at its points (a linear one, every :data:`LINEAR_STEP`
positions, with the weights of the step's middle); the counters start again at each change,
so a dataset whose weight rises joins at its new share instead of catching up on the past.
A sample counts ``max(1, round(value))`` units: whole numbers such as tokens, frames or bytes
are counted exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.core.records import Refs
from fpipe.plan.blend_choice import WeightSchedule

__all__ = [
    "COUNTER_BYTES",
    "LINEAR_STEP",
    "check_counter",
    "pack_counters",
    "segment",
    "take_by_units",
    "units_of",
    "unpack_counters",
]

#: Positions per constant-weight step of a linear schedule in a blend by units.
LINEAR_STEP = 1024
#: Bytes per unit counter in the state: 48 bits, 2.8e14 units (tokens) per dataset and
#: constant-weight segment, in 6 bytes instead of 9, so a 100-dataset blend's snapshot keeps
#: under 4 KB.
COUNTER_BYTES = 6


def check_counter(value: int) -> None:
    """A ConfigError when a unit counter of ``value`` does not fit the state (2**48)."""
    if value >= 1 << (8 * COUNTER_BYTES):
        raise ConfigError(
            f"a blend by units counted {value} units of one dataset in one segment of "
            f"constant weights, past the 2**{8 * COUNTER_BYTES} a snapshot holds; add a "
            "schedule point (the counters start again at each) or use a coarser unit"
        )


def pack_counters(counters: np.ndarray) -> bytes:
    """Unit counters as fixed-width 48-bit little-endian bytes (a ConfigError past 2**48)."""
    c = np.asarray(counters, dtype=np.int64)
    if len(c):
        check_counter(int(c.max()))
    raw = c.astype("<u8").view(np.uint8).reshape(-1, 8)[:, :COUNTER_BYTES]
    return raw.tobytes()


def unpack_counters(data: bytes, n: int) -> np.ndarray:
    """The ``n`` counters of :func:`pack_counters` (zeros for empty bytes)."""
    if not data:
        return np.zeros(n, dtype=np.int64)
    raw = np.zeros((n, 8), dtype=np.uint8)
    raw[:, :COUNTER_BYTES] = np.frombuffer(data, dtype=np.uint8).reshape(n, COUNTER_BYTES)
    return raw.view("<u8").reshape(n).astype(np.int64)


def segment(schedule: WeightSchedule, position: int) -> tuple[int, int | None, np.ndarray]:
    """``(start, stop, weights)`` of the constant-weight segment holding ``position``
    (``stop`` None: the last segment, open-ended); the weights are normalized."""
    pts = schedule.points
    j = int(np.searchsorted(pts, position, side="right")) - 1
    start, stop = pts[j], (pts[j + 1] if j + 1 < len(pts) else None)
    if not schedule.linear or stop is None:
        return start, stop, schedule.at(start)
    k = (position - start) // LINEAR_STEP
    lo = start + k * LINEAR_STEP
    hi = min(lo + LINEAR_STEP, stop)
    return lo, hi, schedule.at((lo + hi - 1) // 2)


def units_of(refs: Refs, unit: str, name: str) -> np.ndarray:
    """The units of each ref (int64, at least 1) from column ``unit``; a ConfigError names
    the dataset and sample when the column is missing or holds a negative or non-number."""
    try:
        raw = refs.column(unit)
    except KeyError:
        raise ConfigError(
            f"blend_unit {unit!r}: dataset {name!r} has no index column {unit!r} "
            f"(its refs have {sorted(refs.columns)}); prepare it with that column or pick "
            "another unit"
        ) from None
    values = np.asarray(raw, dtype=np.float64)
    bad = ~(np.isfinite(values) & (values >= 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ConfigError(
            f"blend_unit {unit!r}: dataset {name!r}, sample index {int(refs.index[i])}: "
            f"{unit} is {raw[i]}; a blend by units needs finite values >= 0"
        )
    return np.maximum(np.rint(values), 1).astype(np.int64)


def take_by_units(
    fetch: Callable[[int, int, int], Refs],
    unit: str,
    names: Sequence[str],
    weights: np.ndarray,
    taken: Sequence[int] | np.ndarray,
    used: Sequence[int] | np.ndarray,
    m: int,
) -> tuple[Refs, np.ndarray, np.ndarray]:
    """The next ``m`` choices of one constant-weight segment.

    ``fetch(d, start, stop)``: refs ``start..stop-1`` of dataset ``d``'s stream; ``taken[d]``:
    refs ``d`` gave so far; ``used[d]``: units ``d`` gave in this segment. Returns the chosen
    refs in order, their dataset ids (int32) and their units (int64).
    """
    active = [d for d in range(len(weights)) if weights[d] > 0]
    total_w = float(sum(weights[d] for d in active))
    look = {d: min(m, int(m * weights[d] / total_w) + 16) for d in active}
    chunks: dict[int, list[Refs]] = {d: [] for d in active}
    units: dict[int, np.ndarray] = {d: np.zeros(0, dtype=np.int64) for d in active}
    while True:
        for d in active:
            have = len(units[d])
            if look[d] > have:
                more = fetch(d, taken[d] + have, taken[d] + look[d])
                chunks[d].append(more)
                units[d] = np.concatenate([units[d], units_of(more, unit, names[d])])
        tags, bounds = [], []
        for d in active:
            u = units[d]
            before = used[d] + np.cumsum(u) - u
            tags.append((2 * before + u) / (2.0 * weights[d]))
            # The next unread sample of d has a tag above this (units are >= 1).
            full = len(u) >= m  # d cannot give more than m of the m choices
            bounds.append(np.inf if full else (used[d] + int(u.sum())) / weights[d])
        ids = np.concatenate([np.full(len(units[d]), d, dtype=np.int32) for d in active])
        tag = np.concatenate(tags)
        order = np.lexsort((ids, tag))
        sorted_tags = tag[order]
        valid = int(np.searchsorted(sorted_tags, min(bounds), side="right"))
        if valid >= m:
            break
        cutoff = sorted_tags[m - 1] if len(sorted_tags) >= m else np.inf
        for d, b in zip(active, bounds):
            if b < cutoff:
                look[d] = min(m, 2 * look[d])
    chosen = order[:m]
    chosen_ids = ids[chosen]
    base = np.zeros(len(weights), dtype=np.int64)
    off = np.zeros(len(weights), dtype=np.int64)
    counts = np.bincount(chosen_ids, minlength=len(weights))
    acc_base = acc_off = 0
    parts = []
    for d in active:
        base[d], off[d] = acc_base, acc_off
        acc_base += len(units[d])
        acc_off += int(counts[d])
        if counts[d]:
            parts.append(Refs.concat(chunks[d])[: int(counts[d])])
    j = chosen - base[chosen_ids]
    refs = Refs.concat(parts)[off[chosen_ids] + j]
    all_units = np.concatenate([units[d] for d in active])
    return refs, chosen_ids, all_units[chosen]
