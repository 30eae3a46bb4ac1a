"""Blends of whole datasets for the reference comparisons.

Inputs are fixed-batch plans of :mod:`property_tests.reference_cases`, grouped batching of
:mod:`property_tests.reference_group_runs` and nested blends. A blend is built two ways:
``blend_recipes`` / ``mix_recipes`` as ``blend_datasets`` and ``mix_datasets`` build them, and
the reference of :mod:`property_tests.reference.recipe_blend`; :func:`compare_blend` checks every
rank, and every rank after an elastic restore of rank 0's state.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from hypothesis import strategies as st

import property_tests.reference as ref
from fpipe.core import Pipeline
from fpipe.plan.recipe_blend import blend_recipes
from fpipe.plan.recipe_mix import mix_recipes
from fpipe.plan.skip import normalize_step_ranges
from property_tests.reference import buckets as ref_buckets
from property_tests.reference import recipe_blend as ref_blend
from property_tests.reference_cases import STEPS, Case, cases
from property_tests.reference_group_runs import (
    BucketCase,
    bucket_cases,
    fast_source,
    ref_group_steps,
    taken,
)
from property_tests.reference_runs import fast_plan, ref_sizes, ref_steps

# ---------------------------------------------------------------------------------------------
# blends of whole datasets: inputs are plans of either kind


def input_case(case: Case, world: int, sizes_kind: tuple) -> Case:
    """A fixed-batch input on ``world`` ranks (no skips, changes or restores: the blend's)."""
    return dataclasses.replace(
        case, world=world, world2=world, sizes_kind=sizes_kind, skip=(), changes=(), cut=None
    )


@st.composite
def input_sizes(draw, unit: int) -> tuple:
    """Per-rank fixed batches, or a step table or ramp-up of global sizes (``unit``: the
    multiple that every world size of the run divides)."""
    which = draw(st.sampled_from(["fixed", "fixed", "table", "ramp"]))
    if which == "fixed":
        return ("fixed", draw(st.integers(1, 3)))
    if which == "table":
        a, b = draw(st.integers(1, 2)), draw(st.integers(1, 2))
        return ("table", ((0, unit * a), (draw(st.integers(1, 8)), unit * b)))
    start, inc, m = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(0, 2))
    return ("ramp", unit * start, unit * inc, draw(st.integers(0, 30)), unit * (start + inc * m))


@dataclasses.dataclass(frozen=True)
class Nested:
    """A blend (or concatenation: ``weights=None``) of whole datasets used as an input."""

    inputs: tuple
    weights: tuple | None

    @property
    def seed(self) -> int:  # blend_datasets runs a blend with its first dataset's seed
        return self.inputs[0].seed

    @property
    def parts(self) -> int:
        return sum(parts(c) for c in self.inputs)


def parts(case) -> int:
    return case.parts if isinstance(case, Nested) else 1


@st.composite
def blend_inputs(draw, world: int, unit: int, nested: bool):
    k = draw(st.integers(1, 3))
    inputs: list = []
    for _ in range(k):
        kind = draw(st.sampled_from(["bucket", "plan", "nested"] if nested else ["bucket", "plan"]))
        if kind == "bucket":
            inputs.append(draw(bucket_cases(world=world)))
        elif kind == "plan":
            c = draw(cases(heads=("repeat", "weighted", "epochized")))
            inputs.append(input_case(c, world, draw(input_sizes(unit))))
        else:
            inner = draw(blend_inputs(world, unit, False))
            inputs.append(Nested(*inner))
    weights = draw(st.one_of(st.none(), st.lists(st.integers(1, 5), min_size=k, max_size=k)))
    return tuple(inputs), None if weights is None else tuple(weights)


@st.composite
def blend_cases(draw):
    world = draw(st.integers(1, 3))
    cut = draw(st.one_of(st.none(), st.integers(1, STEPS - 1)))
    world2 = draw(st.integers(1, 3)) if cut is not None else world
    unit = world * world2 // math.gcd(world, world2)
    inputs, weights = draw(blend_inputs(world, unit, True))
    mix = draw(st.one_of(st.none(), st.integers(1, 4)))
    spans = st.tuples(st.integers(0, 30), st.integers(1, 5)).map(lambda t: (t[0], t[0] + t[1]))
    skip = normalize_step_ranges(draw(st.lists(spans, max_size=2)))
    return world, inputs, weights, mix, skip, cut, world2


def fast_input(case, rank: int, world: int):
    if isinstance(case, Nested):
        return fast_blended(case.inputs, case.weights, rank, world)
    if isinstance(case, BucketCase):
        return fast_source(case, rank, world)
    return fast_plan(case, rank, world).source


def fast_blended(inputs, weights, rank: int, world: int):
    """``blend_recipes`` as ``blend_datasets`` (or ``concat_datasets``) builds it."""
    return blend_recipes(
        [fast_input(c, rank, world) for c in inputs], seeds=[c.seed for c in inputs],
        weights=weights, mode="concat" if weights is None else "weighted",
        name="concat_batches" if weights is None else "blend_batches",
        parts=[parts(c) for c in inputs],
    )  # fmt: skip


def ref_input(case, rank: int):
    """One rank's batches of an input: ``(part, bucket, shape, triples)`` each."""
    if isinstance(case, Nested):
        offsets = [sum(parts(c) for c in case.inputs[:d]) for d in range(len(case.inputs))]
        outs = ref_blend.blend_batches(
            [ref_input(c, rank) for c in case.inputs], case.seed, case.weights
        )
        for _, d, batch in outs:
            yield None if batch is None else (offsets[d] + batch[0], *batch[1:])
        return
    if isinstance(case, BucketCase):
        for s in ref_group_steps(case):
            yield (0, s.ident, s.shape, [x.triple for x in s.ranks[rank]])
        return
    stream, mixer, phases, counters = ref_steps(case)
    steps = ref.steps(stream, phases, drop_last=case.drop_last, blend=mixer, counters=counters)
    yield from rank_batches(steps, rank)


def rank_batches(steps, rank: int):
    """Rank ``rank``'s batches of a plan's global steps: None for the last, short global batch
    where the other ranks have parts of it and this rank none."""
    for s in steps:
        if s.ranks[rank] is None:  # this rank's stream has ended
            if any(r is not None for r in s.ranks):
                yield None
            return
        yield (0, -1, (), [x.triple for x in s.ranks[rank]])


def fast_blend(inputs, weights, mix, rank: int, world: int) -> Pipeline:
    src = fast_blended(inputs, weights, rank, world)
    if mix is not None:
        src = mix_recipes(src, mix)
    return Pipeline(src, seed=inputs[0].seed)


def fast_steps(got, mix) -> list:
    if mix is None:
        return [(rc.step, rc.part, rc.bucket, tuple(rc.shape), rc.refs.triples()) for rc in got]
    return [
        (rc.step, [(m.part, m.bucket, tuple(m.shape), m.refs.triples()) for m in rc.mix])
        for rc in got
    ]


def ref_stream(iters, inputs, weights, mix, ended=None):
    """The reference's outputs, ``(step, part, bucket, shape, triples)`` or, mixed, ``(step,
    [(part, bucket, shape, triples), ...])``."""
    offsets = [sum(parts(c) for c in inputs[:d]) for d in range(len(inputs))]
    outs = ref_blend.blend_batches(iters, inputs[0].seed, weights, ended=ended)
    flat = ((t, offsets[d] + b[0], *b[1:]) if b is not None else None for t, d, b in outs)
    if mix is None:
        return (x for x in flat if x is not None)  # a step with nothing for this rank: none
    groups = ref_blend.mix_batches(flat, mix)
    return ((s, [b[1:] for b in g]) for s, g in enumerate(groups) if g is not None)


def check_steps(fast, refused, stream, skip, limit: int, start: int, what: str) -> None:
    """``fast`` (the plan's delivered steps from ``start`` on, ``refused`` after them or not)
    against the reference's ``stream`` less the skipped steps."""
    expected, ref_refused = [], False
    try:
        for item in stream:
            if item[0] >= start and not any(a <= item[0] < b for a, b in skip):
                expected.append(item)
            if len(expected) == limit or item[0] > 10 * STEPS:
                break
    except ref_buckets.NoBatch:
        ref_refused = True
    assert fast == expected[: len(fast)], what
    if refused:
        assert ref_refused, f"{what}: the plan refused where the reference goes on"
    else:
        assert len(fast) == min(limit, len(expected)), f"{what}: the stream ends elsewhere"


def ref_after(case, rank: int, world: int, step: int):
    """Rank ``rank``'s batches of an input from its global step ``step`` on, restored there
    on ``world`` ranks."""
    if isinstance(case, BucketCase):
        for s in ref_group_steps(dataclasses.replace(case, world2=world), resume=step):
            if s.step >= step:
                yield (0, s.ident, s.shape, [x.triple for x in s.ranks[rank]])
        return
    stream, mixer, phases, counters = ref_steps(case)
    phases.append(ref.Phase(step, world, ref_sizes(case, None, world)))
    steps = ref.steps(stream, phases, drop_last=case.drop_last, blend=mixer, counters=counters)
    yield from rank_batches((s for s in steps if s.step >= step), rank)


def compare_blend(world, inputs, weights, mix, skip, cut=None, world2=None) -> None:
    runs = {}
    for r in range(world):
        plan = fast_blend(inputs, weights, mix, r, world)
        # an input of empty epochs is refused when the blend reaches it
        runs[r] = plan, *taken(plan, plan.init(), skip, STEPS)
        fast = fast_steps([rc for _, rc in runs[r][1]], mix)
        stream = ref_stream([ref_input(c, r) for c in inputs], inputs, weights, mix)
        check_steps(fast, runs[r][2], stream, skip, STEPS, 0, f"rank {r} of {world}")
    plan0, run0, _ = runs[0]
    if cut is None or len(run0) < cut or any(isinstance(c, Nested) for c in inputs):
        return
    # restore rank 0's state after ``cut`` steps on ``world2`` ranks: each input continues
    # from its own global step (the recipes it gave) on ``world2`` ranks
    state, last = run0[cut - 1]
    resume = last.step + 1
    ended: list = []
    outs = ref_blend.blend_batches([ref_input(c, 0) for c in inputs], inputs[0].seed, weights,
                                   ended=ended)  # fmt: skip
    picks = [d for _, d, _ in itertools.islice(outs, resume * (mix or 1))]
    given = [picks.count(d) for d in range(len(inputs))]
    gone = list(ended)
    snap = plan0.snapshot(state)
    for r in range(world2):
        plan = fast_blend(inputs, weights, mix, r, world2)
        run, refused = taken(plan, plan.restore(snap), skip, STEPS - cut)
        iters = [
            itertools.chain(
                itertools.islice(ref_input(c, 0), given[d]),
                () if gone[d] else ref_after(c, r, world2, given[d]),
            )
            for d, c in enumerate(inputs)
        ]
        stream = ref_stream(iters, inputs, weights, mix)
        fast = fast_steps([rc for _, rc in run], mix)
        what = f"rank {r} of {world2} after the restore"
        check_steps(fast, refused, stream, skip, STEPS - cut, resume, what)


def base_case(**kw) -> Case:
    """One dataset repeated, in index order, one sample per rank and step; ``kw`` overrides."""
    base = dict(
        seed=1, sizes=(1,), slices=("none",), head="repeat", weights=(1,), second=(1,), point=1,
        reps=(1,), num_epochs=None, window=None, token_limit=None, filter_first=False, world=1,
        sizes_kind=("fixed", 1), drop_last=True, skip=(), changes=(), cut=None, world2=1, b2=1,
    )  # fmt: skip
    return Case(**{**base, **kw})
