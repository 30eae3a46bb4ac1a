"""The pack algorithms as they were before the whole-buffer rewrites (per sample, or per pack
for ``greedy``): a reference.

Kept only for tests: the fast algorithms of :mod:`fpipe.plan.packing.algorithms` must give the
very same packs (same items, same order), so the iteration order of packed pipelines does not
change. Not optimized on purpose; do not import from ``fpipe``.
"""

import bisect
import heapq

import numpy as np

from fpipe.plan.packing._base import Packing, _as_costs, _decreasing, _from_assignment


def greedy(costs, limits) -> Packing:
    """Sequential fill, one pack at a time: a ``searchsorted`` per budget for each pack's end."""
    c, lim = _as_costs(costs, limits)
    n = len(c)
    cum = np.cumsum(c, axis=0)
    cols = [np.ascontiguousarray(cum[:, j]) for j in range(c.shape[1])]
    offsets = [0]
    start = 0
    while start < n:
        end = n
        for j, col in enumerate(cols):
            base = col[start - 1] if start else 0
            end = min(end, int(np.searchsorted(col, base + lim[j], side="right")))
        offsets.append(end)
        start = end
    return Packing(np.arange(n, dtype=np.int64), np.asarray(offsets, dtype=np.int64))


def _fit_decreasing(costs, limits, best: bool) -> Packing:
    """Largest first, into the first (or best-fitting) open pack that fits every budget.

    The candidate is chosen on the first budget with numpy; the other budgets are checked with
    scalars, and only when the candidate fails them is the mask over every budget built (the
    same choice either way: a pack that fits every budget fits the first one).
    """
    c, lim = _as_costs(costs, limits)
    n, k = c.shape
    placed = _decreasing(c)
    pack_of = np.empty(n, dtype=np.int64)
    rooms = [np.full(max(n, 1), -1, dtype=np.int64) for _ in range(k)]  # -1: not open
    mirror = [[-1] * max(n, 1) for _ in range(k)]
    rows = c.tolist()
    limit = lim.tolist()
    others = range(1, k)
    big = np.iinfo(np.int64).max
    npacks = 0
    views = [r[:0] for r in rooms]
    for i in placed.tolist():
        ci = rows[i]
        p = -1
        if npacks:
            fits = views[0] >= ci[0]
            p = int(np.where(fits, views[0], big).argmin() if best else fits.argmax())
            if not fits[p]:
                p = -1
            elif k > 1 and not all(mirror[j][p] >= ci[j] for j in others):
                for j in others:
                    fits &= views[j] >= ci[j]
                p = int(np.where(fits, views[0], big).argmin() if best else fits.argmax())
                if not fits[p]:
                    p = -1
        if p < 0:
            p = npacks
            npacks += 1
            for j in range(k):
                rooms[j][p] = mirror[j][p] = limit[j]
            views = [r[:npacks] for r in rooms]
        for j in range(k):
            v = mirror[j][p] - ci[j]
            mirror[j][p] = v
            rooms[j][p] = v
        pack_of[i] = p
    return _from_assignment(pack_of, placed, npacks)


def ffd(costs, limits) -> Packing:
    """First-fit decreasing: largest first (on the first budget), into the first pack that fits
    every budget; packs are numbered in the order they were opened."""
    return _fit_decreasing(costs, limits, best=False)


def bfd(costs, limits) -> Packing:
    """Best-fit decreasing: largest first, into the fitting pack with the least room left on the
    first budget."""
    c, lim = _as_costs(costs, limits)
    if c.shape[1] > 1:
        return _fit_decreasing(c, lim, best=True)
    # One budget: a sorted list of (room, pack); the best fit is found by bisection.
    placed = _decreasing(c)
    cost = c[:, 0].tolist()
    pack_of = np.empty(len(c), dtype=np.int64)
    rooms: list[tuple[int, int]] = []
    npacks = 0
    for i in placed.tolist():
        ci = cost[i]
        at = bisect.bisect_left(rooms, (ci, -1))
        if at < len(rooms):
            room, p = rooms.pop(at)
        else:
            room, p = int(lim[0]), npacks
            npacks += 1
        bisect.insort(rooms, (room - ci, p))
        pack_of[i] = p
    return _from_assignment(pack_of, placed, npacks)


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


def _least_ratio_after(share, limit, placed, start, pack_of) -> int:
    """Several budgets, in units of the target load: one column of loads per budget.

    The pack with the smallest score usually fits, so the score is computed over every open
    pack, its minimum checked with scalars, and the masked minimum only computed when it does
    not fit (the same choice as masking first, with fewer numpy calls). Loads are mirrored in
    Python lists for the scalar checks.
    """
    n, k = share.shape
    size = n + start
    cols = [np.zeros(size) for _ in range(k)]
    loads = [[0.0] * size for _ in range(k)]
    bufs = [np.empty(size) for _ in range(k)]
    npacks = start
    views = [col[:npacks] for col in cols]
    outs = [buf[:npacks] for buf in bufs]
    rows = share.tolist()
    lim = limit.tolist()
    budgets = range(k)
    # The first `start` items (largest first) each open an empty pack, in order: all packs
    # score the same, and the least index wins.
    first = placed[:start]
    pack_of[first] = np.arange(len(first))
    for j in budgets:
        cols[j][: len(first)] = share[first, j]
        loads[j][: len(first)] = share[first, j].tolist()
    for i in placed[start:].tolist():
        ci = rows[i]
        # max_j(load_j + c_j) = c_0 + max(load_0, max_j>0(load_j + c_j - c_0)): the same order
        # of packs as the score after adding the item, with one numpy call fewer per budget.
        score = outs[0]
        np.add(views[1], ci[1] - ci[0], out=score)
        np.maximum(score, views[0], out=score)
        for j in range(2, k):
            np.add(views[j], ci[j] - ci[0], out=outs[j])
            np.maximum(score, outs[j], out=score)
        p = int(score.argmin())
        if not all(loads[j][p] + ci[j] <= lim[j] for j in budgets):
            fits = np.ones(npacks, dtype=bool)
            for j in budgets:
                fits &= views[j] <= lim[j] - ci[j]
            p = int(np.where(fits, score, np.inf).argmin())
            if not fits[p]:
                p = npacks
                npacks += 1
                views = [col[:npacks] for col in cols]
                outs = [buf[:npacks] for buf in bufs]
        for j in budgets:
            v = loads[j][p] + ci[j]
            loads[j][p] = v
            cols[j][p] = v
        pack_of[i] = p
    return npacks


ALGORITHMS = {"balanced": balanced, "bfd": bfd, "ffd": ffd, "greedy": greedy}
