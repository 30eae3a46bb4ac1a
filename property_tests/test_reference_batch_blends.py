"""Invariant 8 for blends of whole datasets: ``blend_recipes`` and ``mix_recipes`` (what
``blend_datasets``, ``concat_datasets`` and ``mix_datasets`` build) equal the slow reference of
their documented rules (:mod:`property_tests.reference.recipe_blend`, docs/design/blend.md
"Blends of whole datasets").

Random small configurations (:mod:`property_tests.reference_blend_runs`): one to three inputs,
each a fixed-batch plan (any head, window shuffle, filter; fixed batches, a step table or
ramp-up), grouped batching, or a nested blend; weighted or concatenated, mixed in groups or not,
on 1-3 ranks, with skipped steps and an elastic restore on another world size at a cut.

The default profile runs a few dozen examples (a few seconds); ``HYPOTHESIS_PROFILE=long``
runs ten times as many.
"""

from __future__ import annotations

import pytest
from hypothesis import given, note

from property_tests.reference_blend_runs import (
    Nested,
    base_case,
    blend_cases,
    compare_blend,
    fast_blend,
    input_case,
)
from property_tests.reference_cases import scaled


@scaled(25)
@given(blend=blend_cases())
def test_batch_blends_equal_the_reference(blend):
    note(repr(blend))
    compare_blend(*blend)


@pytest.mark.parametrize("mix", [None, 3])
def test_a_finite_input_leaves_the_draw(mix):
    """Two finite inputs of different lengths and a third endless one: each input that ends
    leaves the draw, at the position it is found empty."""
    one = input_case(base_case(sizes=(5,), num_epochs=1), 1, ("fixed", 2))
    two = input_case(base_case(seed=3, sizes=(9,), num_epochs=2), 1, ("fixed", 1))
    three = input_case(base_case(seed=4, sizes=(4,), slices=("fixed", 2)), 1, ("fixed", 1))
    compare_blend(1, (one, two, three), [5, 1, 1], mix, ())
    compare_blend(1, (one, two), None, mix, ((2, 4),))


def choices(plan, n: int) -> dict[int, tuple[int, ...]]:
    """``{step: parts}`` of a plan's first ``n`` outputs (a mixed step's members' parts)."""
    _, out = plan.next(plan.init(), n)
    return {rc.step: tuple(m.part for m in rc.mix or (rc,)) for rc in out}


@pytest.mark.parametrize("mix", [None, 1, 2])
@pytest.mark.parametrize("nested", [False, True])
def test_every_rank_takes_the_same_input_at_every_step(nested, mix):
    """Input 0 (part 0) ends with a short global batch of 3 on 4 ranks (drop_last=False): rank
    2 has no part of it. Its step holds nothing there, and every rank goes on at the same
    steps with the same inputs: the steps differ only by that one batch."""
    short = input_case(base_case(sizes=(3,), num_epochs=1, drop_last=False), 4, ("fixed", 1))
    endless = input_case(base_case(seed=3, sizes=(40,)), 4, ("fixed", 1))
    other = input_case(base_case(seed=5, sizes=(40,)), 4, ("fixed", 1))
    inputs = (Nested((short, endless), (1, 1)), other) if nested else (short, endless)
    taken = [choices(fast_blend(inputs, (1, 1), mix, r, 4), 6) for r in range(4)]
    assert 0 in taken[0][0] and 0 not in taken[2].get(0, ())  # rank 2 has no part of it

    def others(r: int, step: int) -> tuple[int, ...]:
        return tuple(p for p in taken[r].get(step, ()) if p != 0)

    for step in range(min(max(got) for got in taken) + 1):
        assert all(others(r, step) == others(0, step) for r in range(4)), (step, taken)
    compare_blend(4, inputs, (1, 1), mix, ())
    compare_blend(4, inputs, (1, 1), mix, ((0, 2),))  # skipped steps over the short batch
    compare_blend(4, inputs, (1, 1), mix, (), 2, 3)  # an elastic restore after it
