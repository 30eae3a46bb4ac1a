"""The balanced greedy knapsack of Eagle 2 under one or several budgets (see ``balanced``).

Part of :mod:`fpipe.plan.packing.algorithms`, which lists every strategy.
"""

from __future__ import annotations

import heapq

import numpy as np

from fpipe.plan.packing._base import Packing, _as_costs, _from_assignment

__all__ = ["balanced"]


def balanced(costs, limits) -> Packing:
    """Balanced greedy knapsack (Eagle 2), under several budgets at once.

    It opens ``ceil(sum / budget)`` packs on the first budget to start with, so each pack's
    target load is the buffer's mean on every budget. Items go, largest first (by their largest
    share of a target), into the fitting pack whose largest load-to-target ratio *after* adding
    the item is the smallest; a pack is opened only when none fits. With one budget this is the
    classic least-loaded rule. Empty packs are removed.
    """
    c, lim = _as_costs(costs, limits)
    n, k = c.shape
    if n == 0:
        return Packing(np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64))
    total = c.sum(axis=0)
    start = max(1, -(-int(total[0]) // int(lim[0])))
    target = np.maximum(total / start, 1e-9)
    share = c / target
    placed = np.argsort(-share.max(axis=1), kind="stable").astype(np.int64)
    pack_of = np.empty(n, dtype=np.int64)
    if k == 1:
        npacks = _least_loaded(c[:, 0].tolist(), int(lim[0]), placed, start, pack_of)
    else:
        npacks = _least_ratio_after(share, lim / target, placed, start, pack_of)
    used = np.bincount(pack_of, minlength=npacks) > 0
    renumber = np.cumsum(used) - 1
    return _from_assignment(renumber[pack_of], placed, int(used.sum()))


def _least_loaded(cost: list, limit: int, placed: np.ndarray, start: int, pack_of) -> int:
    """One budget: a heap of (load, pack); the least-loaded pack fits if any does."""
    heap = [(0, p) for p in range(start)]
    npacks = start
    for i in placed.tolist():
        ci = cost[i]
        load, p = heap[0]
        if load + ci <= limit:
            heapq.heapreplace(heap, (load + ci, p))
        else:
            p = npacks
            npacks += 1
            heapq.heappush(heap, (ci, p))
        pack_of[i] = p
    return npacks


def _first_packs(share, placed, start: int, size: int, pack_of) -> tuple[list, list]:
    """Loads per budget (numpy columns, and the same as Python lists) of ``size`` packs, the
    first ``start`` items (largest first) each opening one: all packs score the same then, and
    the least index wins."""
    first = placed[:start]
    pack_of[first] = np.arange(len(first))
    cols = [np.zeros(size) for _ in range(share.shape[1])]
    for j, col in enumerate(cols):
        col[: len(first)] = share[first, j]
    return cols, [col.tolist() for col in cols]


def _best_fitting(p, score, cols, loads, room, bad_buf: np.ndarray) -> int:
    """The best-scored pack that fits as ``load <= limit - cost`` on every budget (ties: the
    least index), or -1; ``p`` is the best-scored pack. Overwrites ``score``."""
    if all(load[p] <= r for load, r in zip(loads, room)):
        return p
    npacks = len(score)
    bad, more = bad_buf[0, :npacks], bad_buf[1, :npacks]
    np.greater(cols[0][:npacks], room[0], out=bad)
    for col, r in zip(cols[1:], room[1:]):
        np.logical_or(bad, np.greater(col[:npacks], r, out=more), out=bad)
    np.putmask(score, bad, np.inf)
    p = int(score.argmin())
    return -1 if score[p] == np.inf else p


def _least_ratio_after(share, limit, placed, start, pack_of) -> int:
    """Several budgets, in units of the target load: one column of loads per budget.

    For each item the score of every open pack is computed with numpy (a few calls over the
    open packs, into preallocated buffers) and the best-scored pack's fit is checked with the
    loads mirrored in Python lists; only when it does not fit are the fitting packs masked
    (the same choice as masking first, with fewer numpy calls).
    """
    n, k = share.shape
    size = n + start
    cols, loads = _first_packs(share, placed, start, size, pack_of)
    if k == 2:
        return _least_ratio_after_two(share, limit, placed, start, pack_of, cols, loads)
    rows = share.tolist()
    lim = limit.tolist()
    budgets = range(k)
    score_buf, tmp_buf = np.empty(size), np.empty(size)
    bad_buf = np.empty((2, size), dtype=bool)
    npacks = start
    rest = placed[start:].tolist()
    chosen = []
    for i in rest:
        ci = rows[i]
        c0 = ci[0]
        vs = [col[:npacks] for col in cols]
        score, tmp = score_buf[:npacks], tmp_buf[:npacks]
        # max_j(load_j + c_j) = c_0 + max(load_0, max_j>0(load_j + c_j - c_0)): the same order
        # of packs as the score after adding the item, with one numpy call fewer per budget.
        np.add(vs[1], ci[1] - c0, out=score)
        np.maximum(score, vs[0], out=score)
        for j in range(2, k):
            np.add(vs[j], ci[j] - c0, out=tmp)
            np.maximum(score, tmp, out=score)
        p = int(score.argmin())
        if not all(loads[j][p] + ci[j] <= lim[j] for j in budgets):
            room = [lim[j] - ci[j] for j in budgets]
            p = _best_fitting(p, score, cols, loads, room, bad_buf)
            if p < 0:
                p = npacks
                npacks += 1
        for j in budgets:
            x = loads[j][p] + ci[j]
            loads[j][p] = x
            cols[j][p] = x
        chosen.append(p)
    pack_of[rest] = chosen
    return npacks


def _least_ratio_after_two(share, limit, placed, start, pack_of, cols, loads) -> int:
    """:func:`_least_ratio_after` on two budgets (the common case: tokens and images), with
    the budget loop unrolled and the item's ``c_1 - c_0`` in a 0-d array (a cheaper operand
    for numpy than a Python float; the same double either way)."""
    size = len(cols[0])
    L0, L1 = cols
    l0, l1 = loads
    r0, r1 = share[:, 0].tolist(), share[:, 1].tolist()
    lim0, lim1 = limit.tolist()
    score_buf = np.empty(size)
    bad_buf = np.empty(size, dtype=bool)
    d = np.zeros(())
    add, maximum, greater, putmask, inf = np.add, np.maximum, np.greater, np.putmask, np.inf
    npacks = start
    v0, v1, score, bad = L0[:npacks], L1[:npacks], score_buf[:npacks], bad_buf[:npacks]
    rest = placed[start:].tolist()
    chosen = []
    for i in rest:
        c0 = r0[i]
        c1 = r1[i]
        d[()] = c1 - c0
        add(v1, d, out=score)
        maximum(score, v0, out=score)
        p = score.argmin()
        x0 = l0[p] + c0
        x1 = l1[p] + c1
        if not (x0 <= lim0 and x1 <= lim1):
            # The best-scored pack that fits as `load <= limit - cost`: masked on the first
            # budget (the one that binds, usually), then on the second only if needed.
            room1 = lim1 - c1
            greater(v0, lim0 - c0, out=bad)
            putmask(score, bad, inf)
            p = score.argmin()
            if score[p] != inf and not l1[p] <= room1:
                greater(v1, room1, out=bad)
                putmask(score, bad, inf)
                p = score.argmin()
            if score[p] == inf:
                p = npacks
                npacks += 1
                v0, v1, score = L0[:npacks], L1[:npacks], score_buf[:npacks]
                bad = bad_buf[:npacks]
            x0 = l0[p] + c0
            x1 = l1[p] + c1
        l0[p] = x0
        L0[p] = x0
        l1[p] = x1
        L1[p] = x1
        chosen.append(p)
    pack_of[rest] = chosen
    return npacks
