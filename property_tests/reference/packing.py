"""Pack selection, one buffer at a time (docs/packing.md, docs/design/packing.md).

Each strategy is written from its documented rule, item by item, with integer costs and exact
fractions (no numpy, no bisection, no building pack by pack): ``costs[i]`` is item ``i``'s row
(one int per budget), and a strategy returns the packs as lists of item positions, each pack's
items in the order they were placed, the packs in the order they were opened.

:func:`pack` is the plan step: buffers of ``packing_buffer_size`` refs along the stream (the
last one may be short); over-budget refs dropped (counted ``"over_budget"``) or their costs
clipped (``truncate``); each buffer's packs left in the keyed order of ``shuffle_packs``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from fractions import Fraction

from property_tests.reference.rng import fold_in, permute, step_key
from property_tests.reference.stages import Counters
from property_tests.reference.views import Ref

Costs = Sequence[Sequence[int]]


def fits(load: Sequence[int], cost: Sequence[int], limits: Sequence[int]) -> bool:
    return all(a + c <= b for a, c, b in zip(load, cost, limits))


def add(load: list[int], cost: Sequence[int]) -> None:
    for j, c in enumerate(cost):
        load[j] += c


def decreasing(costs: Costs) -> list[int]:
    """Largest first on the first budget; ties by the later budgets (largest first), then in
    buffer order."""
    return sorted(range(len(costs)), key=lambda i: ([-c for c in costs[i]], i))


def greedy(costs: Costs, limits: Sequence[int]) -> list[list[int]]:
    """Sequential fill: a pack is closed when the next item does not fit."""
    packs: list[list[int]] = []
    load: list[int] = []
    for i, c in enumerate(costs):
        if not packs or not fits(load, c, limits):
            packs.append([])
            load = [0] * len(limits)
        packs[-1].append(i)
        add(load, c)
    return packs


def ffd(costs: Costs, limits: Sequence[int]) -> list[list[int]]:
    """First-fit decreasing: into the first opened pack that fits every budget."""
    packs: list[list[int]] = []
    loads: list[list[int]] = []
    for i in decreasing(costs):
        first = [p for p, load in enumerate(loads) if fits(load, costs[i], limits)]
        if first:
            p = first[0]
        else:
            p = len(packs)
            packs.append([])
            loads.append([0] * len(limits))
        packs[p].append(i)
        add(loads[p], costs[i])
    return packs


def bfd(costs: Costs, limits: Sequence[int]) -> list[list[int]]:
    """Best-fit decreasing: into the fitting pack with the least room left on the first budget
    (ties: the pack opened first)."""
    packs: list[list[int]] = []
    loads: list[list[int]] = []
    for i in decreasing(costs):
        room = [(limits[0] - load[0], p) for p, load in enumerate(loads)]
        fitting = [(r, p) for r, p in room if fits(loads[p], costs[i], limits)]
        if fitting:
            p = min(fitting)[1]
        else:
            p = len(packs)
            packs.append([])
            loads.append([0] * len(limits))
        packs[p].append(i)
        add(loads[p], costs[i])
    return packs


def balanced(costs: Costs, limits: Sequence[int]) -> list[list[int]]:
    """Eagle 2's balanced greedy knapsack on every budget (docs/design/packing.md, decision 3).

    ``m = ceil(total_0 / limit_0)`` packs (at least one) to start with; the target load of a
    budget is its total over ``m``. Items, by decreasing largest share of a target (ties in
    buffer order), the first ``m`` each into a pack of its own, then each into the fitting pack
    whose largest load-to-target ratio after adding it is the smallest (ties: the lowest pack);
    a pack is opened when none fits. Empty packs are removed."""
    n, k = len(costs), len(limits)
    if n == 0:
        return []
    totals = [sum(c[j] for c in costs) for j in range(k)]
    m = max(1, -(-totals[0] // limits[0]))
    targets = [Fraction(t, m) if t else None for t in totals]

    def ratio(x: int, j: int) -> Fraction:
        return Fraction(0) if targets[j] is None else x / targets[j]  # zero total: zero costs

    share = [max(ratio(c[j], j) for j in range(k)) for c in costs]
    order = sorted(range(n), key=lambda i: (-share[i], i))
    packs: list[list[int]] = [[] for _ in range(m)]
    loads = [[0] * k for _ in range(m)]
    for rank, i in enumerate(order):
        c = costs[i]
        if rank < m:
            p = rank
        else:
            best = None
            for q, load in enumerate(loads):
                if fits(load, c, limits):
                    score = max(ratio(load[j] + c[j], j) for j in range(k))
                    if best is None or score < best[0]:
                        best = (score, q)
            if best is None:
                packs.append([])
                loads.append([0] * k)
                p = len(packs) - 1
            else:
                p = best[1]
        packs[p].append(i)
        add(loads[p], c)
    return [p for p in packs if p]


ALGORITHMS = {"greedy": greedy, "ffd": ffd, "bfd": bfd, "balanced": balanced}


def select(
    buffer: Sequence[Ref],
    budgets: Sequence[tuple[str, int]],
    strategy: str,
    over_budget: str,
    counters: Counters,
) -> list[list[Ref]]:
    """The packs of one buffer, in the strategy's order."""
    limits = [lim for _, lim in budgets]
    kept: list[Ref] = []
    costs: list[list[int]] = []
    for ref in buffer:
        c = [int(ref.meta[col]) for col, _ in budgets]
        if all(x <= b for x, b in zip(c, limits)):
            kept.append(ref)
            costs.append(c)
        elif over_budget == "drop":
            counters.add("over_budget")
        elif over_budget == "truncate":  # the costs clipped to the budgets replace the column
            c = [min(x, b) for x, b in zip(c, limits)]
            meta = {**ref.meta, **{col: x for (col, _), x in zip(budgets, c)}}
            kept.append(ref._replace(meta=meta))
            costs.append(c)
        else:
            raise ValueError(f"ref {ref.triple} over the budgets {limits}")
    return [[kept[i] for i in p] for p in ALGORITHMS[strategy](costs, limits)]


def pack(
    refs: Iterable[Ref],
    budgets: Sequence[tuple[str, int]],
    root: int,
    *,
    strategy: str = "ffd",
    packing_buffer_size: int = 1000,
    over_budget: str = "drop",
    shuffle_packs: bool = True,
    counters: Counters,
    name: str = "pack",
) -> Iterator[tuple[Ref, ...]]:
    """Packs (tuples of refs) of each buffer; with ``shuffle_packs`` output ``i`` of buffer
    ``b`` is its pack ``pi(i)``, ``pi`` keyed ``fold_in(step_key(root, name), b)``."""
    it = iter(refs)
    k = step_key(root, name)
    for b in itertools.count():
        buffer = list(itertools.islice(it, packing_buffer_size))
        if not buffer:
            return
        packs = select(buffer, budgets, strategy, over_budget, counters)
        bk = fold_in(k, b)
        for i in range(len(packs)):
            j = permute(bk, len(packs), i) if shuffle_packs else i
            yield tuple(packs[j])
