"""Counting a weighted blend's hash draws in bulk: how many of positions ``lo..hi-1`` choose
each dataset, without searching the weights once per position.

The hash draw (:func:`fpipe.plan.blend_choice.choose_weighted`) picks position ``i``'s dataset
as ``pick(row, u_i)``, ``u_i`` the uniform of ``(key, i)``: its top 53 hash bits over 2**53.
``pick`` is monotone in ``u`` (a product with a positive total, then a sorted search), so
every ``u`` between two that pick the same dataset picks it too. The ``2**BITS`` buckets of
the hash's top bits are therefore *pure* (the lowest and the highest ``u`` of the bucket pick
the same dataset: all of its positions do) or *mixed* (a dataset boundary falls inside). A
count tallies the positions per bucket (one ``bincount``), credits each pure bucket's tally to
its dataset, and picks only the positions of mixed buckets one by one: with 10,000 datasets
and 2**18 buckets, at most 4% of them. The result is exactly ``bincount(choose(...))``.

Where the weights are not one constant row (a linear schedule segment), or a run of one row
is too short to pay for its table, the blend's own ``choose`` draws each position.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from fpipe.core.rng import UNIFORM_BITS, Key, fold_in_array, uniform_of_hashes
from fpipe.plan.blend_choice import WeightSchedule, pick
from fpipe.plan.online_mix import _row

__all__ = ["BITS", "count_draws", "row_runs"]

#: Buckets of the hash's top bits: 2**BITS of them.
BITS = 18
_DIRECT_BELOW = 1 << 21  # positions of one row below which each is drawn (the table costs more)
_BLOCK = 1 << 20  # positions hashed per numpy pass (bounded memory)
_U = 1.0 / (1 << UNIFORM_BITS)


@functools.lru_cache(maxsize=8)
def _table(row: tuple[float, ...], bits: int) -> tuple[np.ndarray, np.ndarray]:
    """``(dataset of each bucket's lowest u, whether the bucket is mixed)`` for ``row``."""
    # each bucket's lowest and highest uniform numerator (UNIFORM_BITS bits)
    top = np.arange(1 << bits, dtype=np.uint64) << np.uint64(UNIFORM_BITS - bits)
    lo = pick(row, top.astype(np.float64) * _U)
    hi = pick(row, (top + np.uint64((1 << (UNIFORM_BITS - bits)) - 1)).astype(np.float64) * _U)
    return lo, lo != hi


def row_runs(
    schedule: WeightSchedule, entries: Sequence, lo: int, hi: int
) -> list[tuple[int, int, tuple[float, ...] | None]]:
    """The runs ``(a, b, row)`` of positions ``lo..hi-1`` drawn with one constant ``row`` of
    weights (None: a linear segment, whose weights move with the position), as
    :func:`fpipe.plan.online_mix.choose_online` draws them: the schedule before the first
    online entry, each entry's weights from its position to the next entry's."""
    cuts: list[tuple[int, tuple[float, ...] | None]] = []
    first = entries[0].position if entries else None
    pts = schedule.points
    for j, p in enumerate(pts):
        if first is not None and p >= first:
            break
        linear = schedule.linear and j + 1 < len(pts)
        cuts.append((p, None if linear else tuple(schedule.weights[j])))
    for e in entries:
        cuts.append((e.position, _row(e.weights)))
    runs = []
    for j, (a, row) in enumerate(cuts):
        b = cuts[j + 1][0] if j + 1 < len(cuts) else hi
        a, b = max(a, lo), min(b, hi)
        if a < b:
            runs.append((a, b, row))
    return runs


def count_draws(
    key: Key,
    schedule: WeightSchedule,
    entries: Sequence,
    lo: int,
    hi: int,
    n: int,
    choose: Callable[[np.ndarray], np.ndarray],
    *,
    bits: int | None = None,
    direct_below: int | None = None,
) -> np.ndarray:
    """How many of positions ``lo..hi-1`` choose each of the ``n`` datasets (int64), the hash
    draw of choice key ``key`` under ``schedule`` and the online ``entries``: exactly
    ``bincount(choose(positions))``, ``choose`` the blend's own draw (which this calls where
    a run of one row is shorter than ``direct_below``, or not one row; ``bits``: the buckets,
    2**bits; None: the module's defaults)."""
    bits = BITS if bits is None else bits
    direct_below = _DIRECT_BELOW if direct_below is None else direct_below
    counts = np.zeros(n, dtype=np.int64)
    for a, b, row in row_runs(schedule, entries, lo, hi):
        if row is None or b - a < direct_below:
            for c in range(a, b, _BLOCK):
                ids = choose(np.arange(c, min(c + _BLOCK, b), dtype=np.int64))
                counts += np.bincount(ids, minlength=n)
            continue
        ids_of, mixed = _table(row, bits)
        tally = np.zeros(1 << bits, dtype=np.int64)
        for c in range(a, b, _BLOCK):
            h = fold_in_array(key, np.arange(c, min(c + _BLOCK, b), dtype=np.int64))
            bucket = (h >> np.uint64(64 - bits)).astype(np.intp)
            tally += np.bincount(bucket, minlength=1 << bits)
            one_by_one = mixed[bucket]
            counts += np.bincount(pick(row, uniform_of_hashes(h[one_by_one])), minlength=n)
        pure = ~mixed
        counts += np.bincount(ids_of[pure], weights=tally[pure], minlength=n).astype(np.int64)
    return counts
