"""Invariant 6 (bounded state): snapshot size does not grow with the step or with window/buffer
sizes; restoring never replays history (the state encodes a position, not what was seen)."""

from hypothesis import given
from hypothesis import strategies as st

from fpipe.core.testing import assert_bounded_state, run
from property_tests.strategies import plan_specs


@given(spec=plan_specs(), points=st.lists(st.integers(0, 60), min_size=2, max_size=5))
def test_snapshot_size_constant_over_steps(spec, points):
    assert_bounded_state(spec.build, points)


@given(spec=plan_specs(), windows=st.tuples(st.integers(1, 50), st.integers(51, 100_000)))
def test_snapshot_size_independent_of_window(spec, windows):
    import dataclasses

    sizes = set()
    for w in windows:
        s = dataclasses.replace(spec, window=w)
        p = s.build()
        state, _ = run(p, limit=3)
        sizes.add(len(p.snapshot(state)))
    assert len(sizes) == 1, sizes
