"""Pack selection algorithms: pure functions from per-item costs to groups of items.

Every algorithm takes ``costs``, an integer array of shape ``(n, k)`` (one row per item of a
packing buffer, one column per budget: tokens, images, bytes...) and ``limits``, the ``k``
budgets, and returns a :class:`Packing`: the positions of the items pack by pack. No pack
exceeds any budget. Items that exceed a budget on their own are handled before packing by
:func:`apply_over_budget` (drop and count, truncate by a hook, or raise).

- ``greedy``: sequential fill; a pack is closed when the next item does not fit (order kept).
- ``ffd``: first-fit decreasing on the first budget: largest first, into the first pack that
  fits every budget.
- ``bfd``: best-fit decreasing: into the pack that fits with the least room left on the first
  budget.
- ``balanced``: the balanced greedy knapsack of Eagle 2: start with as many packs as the first
  budget needs, put each item (largest first) into the least-loaded pack that fits, where the
  load is the largest fill ratio over all budgets; open a pack when none fits. The packs of a
  buffer end up with similar loads on every budget (tokens and images alike).

Example (the toy of the Hugging Face multimodal data pipeline post):
    >>> import numpy as np
    >>> costs = np.arange(1, 25)
    >>> [g.tolist() for g in greedy(costs, 100).groups()][1]
    [13, 14, 15, 16, 17, 18]
    >>> [int(costs[g].sum()) for g in ffd(costs, 100).groups()]
    [100, 100, 100]
"""

from __future__ import annotations

import bisect
import enum
import heapq
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from fpipe.core.errors import ConfigError

__all__ = [
    "ALGORITHMS",
    "OverBudget",
    "Packing",
    "apply_over_budget",
    "balanced",
    "bfd",
    "ffd",
    "greedy",
    "packing_from_groups",
]


class Packing(NamedTuple):
    """Groups of item positions, flat: pack ``p`` is ``order[offsets[p]:offsets[p + 1]]``.

    ``order``: int64 positions into the buffer, pack by pack; ``offsets``: int64, one more than
    the number of packs, starting at 0.
    """

    order: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def groups(self) -> list[np.ndarray]:
        """The packs as a list of position arrays."""
        return np.split(self.order, self.offsets[1:-1])

    def sizes(self) -> np.ndarray:
        """Items per pack."""
        return np.diff(self.offsets)

    def loads(self, costs: np.ndarray) -> np.ndarray:
        """Per-pack sums of ``costs`` (shape ``(packs, k)``, or ``(packs,)`` for 1-D costs)."""
        c = np.asarray(costs)
        if len(self.order) == 0:
            return np.zeros((0, *c.shape[1:]), dtype=c.dtype)
        return np.add.reduceat(c[self.order], self.offsets[:-1], axis=0)

    def take(self, positions: np.ndarray) -> Packing:
        """The same packs over a subset: positions are mapped through ``positions``."""
        return Packing(np.asarray(positions, dtype=np.int64)[self.order], self.offsets)


def _as_costs(costs, limits) -> tuple[np.ndarray, np.ndarray]:
    c = np.asarray(costs, dtype=np.int64)
    if c.ndim == 1:
        c = c[:, None]
    lim = np.atleast_1d(np.asarray(limits, dtype=np.int64))
    if c.ndim != 2 or c.shape[1] != len(lim):
        raise ConfigError(f"costs of shape {c.shape} do not match {len(lim)} budget(s)")
    if (lim < 1).any():
        raise ConfigError(f"budgets must be >= 1, got {lim.tolist()}")
    if (c < 0).any():
        raise ConfigError("pack costs must be >= 0")
    over = (c > lim).any(axis=1)
    if over.any():
        i = int(np.flatnonzero(over)[0])
        raise ConfigError(
            f"item {i} costs {c[i].tolist()}, over the budgets {lim.tolist()}; apply an "
            "over-budget policy (apply_over_budget) before packing"
        )
    return c, lim


def _from_assignment(pack_of: np.ndarray, placed: np.ndarray, npacks: int) -> Packing:
    """Packs from ``pack_of[item]`` where items were placed in the order ``placed``."""
    # A stable sort by pack of the placement order keeps each pack's items in placement order.
    order = placed[np.argsort(pack_of[placed], kind="stable")]
    counts = np.bincount(pack_of, minlength=npacks)
    return Packing(order.astype(np.int64), np.concatenate(([0], np.cumsum(counts))))


def greedy(costs, limits) -> Packing:
    """Sequential fill: items in order; a new pack starts when the next item does not fit."""
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


def _decreasing(c: np.ndarray) -> np.ndarray:
    """Positions by decreasing first cost (ties: buffer order), then by the other costs."""
    keys = tuple(-c[:, j] for j in reversed(range(c.shape[1])))
    return np.lexsort(keys).astype(np.int64)


def _first_fit(c: np.ndarray, lim: np.ndarray) -> Packing:
    """First-fit decreasing, built pack by pack (the same packs as placing item by item).

    FFD puts an item into pack 0 exactly when it fits pack 0's room at that point, and that
    room depends only on pack 0's own items: so pack 0 is one pass over the items (decreasing)
    taking each one that fits, pack 1 the same pass over the items left, and so on. The items
    left are kept by decreasing first cost, so the next one that fits the first budget is found
    by bisection; the other budgets are checked from there on.
    """
    n, k = c.shape
    placed = _decreasing(c)
    rest = placed.tolist()
    neg = (-c[placed, 0]).tolist()  # nondecreasing
    others = [c[placed, j].tolist() for j in range(1, k)]
    second = others[0] if k == 2 else None
    limit = lim.tolist()
    order: list[int] = []
    offsets = [0]
    while rest:
        room0 = limit[0]
        rooms = limit[1:]
        at = 0
        while True:
            at = bisect.bisect_left(neg, -room0, at)
            if second is not None:  # two budgets: the common case, without the loop below
                end, room1 = len(neg), rooms[0]
                while at < end and second[at] > room1:
                    at += 1
                if at == end:
                    break
                rooms[0] -= second.pop(at)
            elif others:
                end = len(neg)
                while at < end and not all(o[at] <= r for o, r in zip(others, rooms)):
                    at += 1
                if at == end:
                    break
                for j, o in enumerate(others):
                    rooms[j] -= o.pop(at)
            elif at == len(neg):
                break
            room0 += neg.pop(at)
            order.append(rest.pop(at))
        offsets.append(len(order))
    return Packing(np.asarray(order, dtype=np.int64), np.asarray(offsets, dtype=np.int64))


def ffd(costs, limits) -> Packing:
    """First-fit decreasing: largest first (on the first budget), into the first pack that fits
    every budget; packs are numbered in the order they were opened."""
    c, lim = _as_costs(costs, limits)
    return _first_fit(c, lim)


def bfd(costs, limits) -> Packing:
    """Best-fit decreasing: largest first, into the fitting pack with the least room left on the
    first budget (ties: the pack opened first).

    The open packs are kept in a sorted list of ``(room, pack)`` on the first budget: the least
    room that fits is found by bisection, and the other budgets are checked from there on.
    """
    c, lim = _as_costs(costs, limits)
    placed = _decreasing(c)
    cost = c[:, 0].tolist()
    other_costs = [c[:, j].tolist() for j in range(1, c.shape[1])]
    limit = lim.tolist()
    pack_of = [0] * len(c)
    rooms: list[tuple[int, int]] = []
    other_rooms: list[list[int]] = [[] for _ in other_costs]
    two = len(other_costs) == 1
    second, second_rooms = (other_costs[0], other_rooms[0]) if two else (None, None)
    npacks = 0
    for i in placed.tolist():
        ci = cost[i]
        at = bisect.bisect_left(rooms, (ci, -1))
        if second is not None:  # two budgets: the common case, without the loop below
            end, c1 = len(rooms), second[i]
            while at < end and second_rooms[rooms[at][1]] < c1:
                at += 1
        elif other_costs:
            end = len(rooms)
            while at < end and not all(
                oc[i] <= orooms[rooms[at][1]] for oc, orooms in zip(other_costs, other_rooms)
            ):
                at += 1
        if at < len(rooms):
            room, p = rooms.pop(at)
        else:
            room, p = limit[0], npacks
            npacks += 1
            for orooms, lim_j in zip(other_rooms, limit[1:]):
                orooms.append(lim_j)
        bisect.insort(rooms, (room - ci, p))
        for oc, orooms in zip(other_costs, other_rooms):
            orooms[p] -= oc[i]
        pack_of[i] = p
    return _from_assignment(np.asarray(pack_of, dtype=np.int64), placed, npacks)


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

    For each item the score of every open pack is computed with numpy (a few calls over the
    open packs, into preallocated buffers) and the best-scored pack's fit is checked with the
    loads mirrored in Python lists. When it does not fit, the next best packs are tried in
    score order (ties: the pack opened first), the same choice as the best-scored fitting pack.
    """
    n, k = share.shape
    size = n + start
    cols = [np.zeros(size) for _ in range(k)]
    loads = [[0.0] * size for _ in range(k)]
    # The first `start` items (largest first) each open an empty pack, in order: all packs
    # score the same, and the least index wins.
    first = placed[:start]
    pack_of[first] = np.arange(len(first))
    for j in range(k):
        cols[j][: len(first)] = share[first, j]
        loads[j][: len(first)] = share[first, j].tolist()
    rows = share.tolist()
    lim = limit.tolist()
    l0, l1, lim0, lim1 = loads[0], loads[1], lim[0], lim[1]
    more = range(2, k)
    budgets = range(k)
    score_buf, tmp_buf = np.empty(size), np.empty(size)
    npacks = start
    v0, v1 = cols[0][:npacks], cols[1][:npacks]
    vs = [col[:npacks] for col in cols]
    score, tmp = score_buf[:npacks], tmp_buf[:npacks]
    bad_buf, bad2_buf = np.empty(size, dtype=bool), np.empty(size, dtype=bool)
    bad, bad2 = bad_buf[:npacks], bad2_buf[:npacks]
    add, maximum, greater, logical_or, putmask = (
        np.add,
        np.maximum,
        np.greater,
        np.logical_or,
        np.putmask,
    )
    inf = np.inf
    rest = placed[start:].tolist()
    chosen = []
    for i in rest:
        ci = rows[i]
        c0, c1 = ci[0], ci[1]
        # max_j(load_j + c_j) = c_0 + max(load_0, max_j>0(load_j + c_j - c_0)): the same order
        # of packs as the score after adding the item, with one numpy call fewer per budget.
        add(v1, c1 - c0, out=score)
        maximum(score, v0, out=score)
        for j in more:
            add(vs[j], ci[j] - c0, out=tmp)
            maximum(score, tmp, out=score)
        p = int(score.argmin())
        if not (
            l0[p] + c0 <= lim0
            and l1[p] + c1 <= lim1
            and (k == 2 or all(loads[j][p] + ci[j] <= lim[j] for j in more))
        ):
            # The best-scored pack that fits as `load <= limit - cost`, else a new pack.
            room = [lim[j] - ci[j] for j in budgets]
            if not all(loads[j][p] <= room[j] for j in budgets):
                greater(v0, room[0], out=bad)
                for j in budgets[1:]:
                    logical_or(bad, greater(vs[j], room[j], out=bad2), out=bad)
                putmask(score, bad, inf)
                p = int(score.argmin())
                if score[p] == inf:
                    p = npacks
                    npacks += 1
                    v0, v1 = cols[0][:npacks], cols[1][:npacks]
                    vs = [col[:npacks] for col in cols]
                    score, tmp = score_buf[:npacks], tmp_buf[:npacks]
                bad, bad2 = bad_buf[:npacks], bad2_buf[:npacks]
        for j in budgets:
            x = loads[j][p] + ci[j]
            loads[j][p] = x
            cols[j][p] = x
        chosen.append(p)
    pack_of[rest] = chosen
    return npacks


ALGORITHMS: dict[str, Callable] = {"balanced": balanced, "bfd": bfd, "ffd": ffd, "greedy": greedy}
"""The built-in strategies by name."""


def packing_from_groups(groups: Sequence[Sequence[int]], n: int) -> Packing:
    """Check and flatten a user strategy's groups of buffer positions (each at most once)."""
    parts = [np.asarray(g, dtype=np.int64).reshape(-1) for g in groups]
    parts = [p for p in parts if len(p)]
    order = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    if len(order) and (order.min() < 0 or order.max() >= n):
        raise ConfigError(f"a packing strategy returned positions outside 0..{n - 1}")
    if len(np.unique(order)) != len(order):
        raise ConfigError("a packing strategy placed an item in more than one pack")
    sizes = [len(p) for p in parts]
    return Packing(order, np.concatenate(([0], np.cumsum(sizes, dtype=np.int64))))


class OverBudget(str, enum.Enum):
    """What happens to an item that exceeds a budget on its own.

    DROP: leave it out and count it (the default; counted in the packing state).
    TRUNCATE: replace its costs by ``truncate(costs, limits)`` (default: clip to the budgets);
      the task encoder must cut the sample to match when it is materialized.
    RAISE: stop with a :class:`~fpipe.core.errors.ConfigError` naming the item.
    """

    DROP = "drop"
    TRUNCATE = "truncate"
    RAISE = "raise"


def _clip(costs: np.ndarray, limits: np.ndarray) -> np.ndarray:
    return np.minimum(costs, limits)


def apply_over_budget(
    costs,
    limits,
    policy: OverBudget | str = OverBudget.DROP,
    truncate: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
    describe: Callable[[int], str] = str,
) -> tuple[np.ndarray, np.ndarray]:
    """Apply the over-budget policy: returns ``(kept positions, their costs)`` (costs 2-D).

    ``describe(position)`` names an item in the error raised under ``RAISE``.

    Example:
        >>> keep, c = apply_over_budget([5, 120, 7], 100)
        >>> keep.tolist(), c[:, 0].tolist()
        ([0, 2], [5, 7])
        >>> apply_over_budget([5, 120], 100, "truncate")[1][:, 0].tolist()
        [5, 100]
    """
    c = np.asarray(costs, dtype=np.int64)
    if c.ndim == 1:
        c = c[:, None]
    lim = np.atleast_1d(np.asarray(limits, dtype=np.int64))
    over = (c > lim).any(axis=1)
    everything = np.arange(len(c), dtype=np.int64)
    if not over.any():
        return everything, c
    policy = OverBudget(policy)
    if policy is OverBudget.DROP:
        return everything[~over], c[~over]
    if policy is OverBudget.RAISE:
        i = int(np.flatnonzero(over)[0])
        raise ConfigError(
            f"{describe(i)} costs {c[i].tolist()}, over the pack budgets {lim.tolist()} "
            "(over_budget='raise'; use 'drop' to skip and count such samples, or 'truncate')"
        )
    fixed = np.asarray((truncate or _clip)(c[over], lim), dtype=np.int64).reshape(-1, len(lim))
    if fixed.shape != c[over].shape or (fixed > lim).any() or (fixed < 0).any():
        raise ConfigError(
            f"the truncate hook returned costs {fixed.tolist()} that do not fit the budgets "
            f"{lim.tolist()}"
        )
    c = c.copy()
    c[over] = fixed
    return everything, c
