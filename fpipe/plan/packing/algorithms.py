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
from collections.abc import Callable

import numpy as np

from fpipe.plan.packing._balanced import balanced
from fpipe.plan.packing._base import (
    OverBudget,
    Packing,
    _as_costs,
    _decreasing,
    _from_assignment,
    apply_over_budget,
    packing_from_groups,
)

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


def greedy(costs, limits) -> Packing:
    """Sequential fill: items in order; a new pack starts when the next item does not fit.

    The end of a pack that starts at item ``i`` is found for every ``i`` at once (one
    ``searchsorted`` per budget over the running sums); the packs are then the chain
    ``0 -> end(0) -> end(end(0)) -> ...``.
    """
    c, lim = _as_costs(costs, limits)
    n = len(c)
    if not n:
        return Packing(np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64))
    cum = np.cumsum(c, axis=0)
    ends = None
    for j in range(c.shape[1]):
        col = np.ascontiguousarray(cum[:, j])
        base = np.concatenate((np.zeros(1, dtype=col.dtype), col[:-1]))  # sum before item i
        end = np.searchsorted(col, base + lim[j], side="right")
        ends = end if ends is None else np.minimum(ends, end)
    assert ends is not None
    nxt = ends.tolist()
    offsets = [0]
    start = 0
    while start < n:
        start = nxt[start]
        offsets.append(start)
    return Packing(np.arange(n, dtype=np.int64), np.asarray(offsets, dtype=np.int64))


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
    second = other_costs[0] if two else None
    second_rooms = other_rooms[0] if two else []
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


ALGORITHMS: dict[str, Callable] = {"balanced": balanced, "bfd": bfd, "ffd": ffd, "greedy": greedy}
"""The built-in strategies by name."""
