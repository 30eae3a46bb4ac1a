"""Random small plan configurations for the reference comparisons (plain data).

A :class:`Case` names every setting of a plan: the datasets, their slices, the head (one
dataset repeated, or a blend), the epochs, the window shuffle and filter, the batch sizes and
world size, skipped steps, online weight changes and an elastic restore. The fast plan and the
reference are both built from it (:mod:`property_tests.reference_runs`).
"""

from __future__ import annotations

import dataclasses
import math

from hypothesis import settings
from hypothesis import strategies as st

from fpipe.plan.online_mix import entry_weights, weights32
from fpipe.plan.skip import normalize_step_ranges

STEPS = 24  # delivered steps compared per rank


def scaled(per_100: int) -> settings:
    """``per_100`` examples per 100 of the profile's (ci 100, long 1000)."""
    return settings(
        max_examples=max(3, settings.default.max_examples * per_100 // 100), deadline=None
    )


# ---------------------------------------------------------------------------------------------
# the configurations


@dataclasses.dataclass(frozen=True)
class Case:
    seed: int
    sizes: tuple[int, ...]
    slices: tuple  # ("fixed", k) | ("shards", k or None, shard starts per dataset) | ("none",)
    head: str  # repeat | weighted | schedule | linear | epochized | tokens | tokens_schedule
    weights: tuple[int, ...]
    second: tuple[int, ...]  # the schedule's second row
    point: int  # the schedule's second point
    reps: tuple[int, ...]
    num_epochs: int | None
    window: int | None
    token_limit: int | None  # filter: tokens < token_limit
    filter_first: bool  # the filter before the window shuffle (else after)
    world: int
    sizes_kind: tuple  # ("fixed", per-rank b) | ("table", {step: size}) | ("ramp", ...)
    drop_last: bool
    skip: tuple[tuple[int, int], ...]
    changes: tuple[tuple[int, tuple[float, ...]], ...]
    cut: int | None  # elastic restore after this many delivered steps (rank 0)
    world2: int
    b2: int  # per-rank batch after the restore (fixed sizes)
    # pack selection after the window shuffle and filter, before distribute: (strategy,
    # ((column, budget), ...), packing_buffer_size, over_budget, shuffle_packs), or None
    pack: tuple | None = None

    def tokens(self, d: int) -> list[int]:
        n = self.sizes[d]
        return [(i * 7919 + 104729 * d + self.seed) % 29 + 1 for i in range(n)]

    def images(self, d: int) -> list[int]:
        return [(i * 31 + 7 * d + self.seed) % 5 for i in range(self.sizes[d])]

    @property
    def weighted(self) -> bool:
        return self.head in ("weighted", "schedule", "linear", "tokens", "tokens_schedule")


def _lcm(a: int, b: int) -> int:
    return a * b // math.gcd(a, b)


HEADS = ("repeat", "weighted", "schedule", "linear", "epochized", "tokens", "tokens_schedule")


STRATEGIES = ("greedy", "ffd", "bfd", "balanced")


@st.composite
def packings(draw) -> tuple:
    strategy = draw(st.sampled_from(STRATEGIES))
    budgets: tuple = (("tokens", draw(st.integers(10, 70))),)
    # balanced on several budgets compares float shares (see test_reference_plan's xfail)
    if strategy != "balanced" and draw(st.booleans()):
        budgets += (("images", draw(st.integers(1, 8))),)
    return (
        strategy,
        budgets,
        draw(st.integers(1, 30)),
        draw(st.sampled_from(["drop", "truncate"])),
        draw(st.booleans()),
    )


@st.composite
def cases(draw, heads=HEADS, packed: bool = False) -> Case:
    head = draw(st.sampled_from(heads))
    n = 1 if head == "repeat" else draw(st.integers(1, 3))
    sizes = tuple(draw(st.lists(st.integers(1, 60), min_size=n, max_size=n)))
    kind = draw(st.sampled_from(["fixed", "shards", "none"]))
    if kind == "fixed":
        slices: tuple = ("fixed", draw(st.integers(1, 12)))
    elif kind == "shards":
        k = draw(st.one_of(st.none(), st.integers(1, 12)))
        starts = tuple(
            tuple(sorted({0, *draw(st.lists(st.integers(1, max(1, s - 1)), max_size=4))} - {s}))
            for s in sizes
        )
        slices = ("shards", k, starts)
    else:
        slices = ("none",)

    def row():
        w = draw(st.lists(st.sampled_from([0, 1, 2, 3, 5]), min_size=n, max_size=n))
        if sum(w) == 0:
            w[draw(st.integers(0, n - 1))] = 1
        return tuple(w)

    world = draw(st.integers(1, 4))
    cut = draw(st.one_of(st.none(), st.integers(1, STEPS - 1)))
    world2 = draw(st.integers(1, 4)) if cut is not None else world
    unit = _lcm(world, world2)
    sizes_kind: tuple
    which = draw(st.sampled_from(["fixed", "fixed", "table", "ramp"]))
    if which == "fixed":
        sizes_kind = ("fixed", draw(st.integers(1, 4)))
    elif which == "table":
        a, b = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        sizes_kind = ("table", ((0, unit * a), (draw(st.integers(1, 12)), unit * b)))
    else:
        start, inc, m = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(0, 3))
        samples_ = draw(st.integers(0, 60))
        sizes_kind = ("ramp", unit * start, unit * inc, samples_, unit * (start + inc * m))
    spans = st.tuples(st.integers(0, 30), st.integers(1, 5)).map(lambda t: (t[0], t[0] + t[1]))
    skip = normalize_step_ranges(draw(st.lists(spans, max_size=2)))
    changes: tuple = ()
    if head in ("weighted", "schedule", "linear", "tokens", "tokens_schedule"):
        steps = sorted(draw(st.lists(st.integers(0, STEPS), max_size=3)))
        changes = tuple(
            (s, tuple(entry_weights(weights32([float(w) for w in row()])))) for s in steps
        )
    case = Case(
        seed=draw(st.integers(0, 2**32)),
        sizes=sizes,
        slices=slices,
        head=head,
        weights=row(),
        second=row(),
        point=draw(st.integers(1, 80)),
        reps=tuple(draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))),
        num_epochs=draw(st.one_of(st.none(), st.integers(1, 3))),
        window=draw(st.one_of(st.none(), st.integers(1, 40))),
        token_limit=draw(st.one_of(st.none(), st.integers(1, 31))),
        filter_first=draw(st.booleans()),
        world=world,
        sizes_kind=sizes_kind,
        drop_last=draw(st.booleans()),
        skip=skip,
        changes=changes,
        cut=cut,
        world2=world2,
        b2=draw(st.integers(1, 4)),
        pack=draw(packings()) if packed else None,
    )
    if case.pack is not None and case.pack[3] == "drop" and case.num_epochs is None:
        # an endless stream must keep a sample of every dataset: no ref over a budget
        roomy = tuple((c, max(b, 29 if c == "tokens" else 4)) for c, b in case.pack[1])
        case = dataclasses.replace(case, pack=(case.pack[0], roomy, *case.pack[2:]))
    if case.token_limit is not None and case.num_epochs is None:
        # an endless stream must keep a sample of every dataset (or never yields again)
        lowest = max(min(case.tokens(d)) for d in range(n))
        case = dataclasses.replace(case, token_limit=max(case.token_limit, lowest + 1))
    return case


def _case(**kw) -> Case:
    base = dict(
        seed=0, sizes=(1,), slices=("none",), head="repeat", weights=(1,), second=(1,),
        point=1, reps=(1,), num_epochs=None, window=None, token_limit=None, filter_first=False,
        world=1, sizes_kind=("fixed", 1), drop_last=True, skip=(), changes=(), cut=None,
        world2=1, b2=1,
    )  # fmt: skip
    return Case(**{**base, **kw})
