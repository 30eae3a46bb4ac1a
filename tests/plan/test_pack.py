"""The plan-tier packing step: budgets, coverage, determinism, exact resume inside a buffer."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fpipe.core import ConfigError, Pipeline, Refs, chain
from fpipe.core.testing import assert_exact_resume, check_stage, run
from fpipe.plan import batch, in_memory, pack, repeat
from fpipe.plan.packing.algorithms import ALGORITHMS


def _refs(n, seed=0):
    rng = np.random.default_rng(seed)
    return Refs.of(
        index=np.arange(n),
        tokens=rng.integers(1, 130, n),  # some over the budget of 100
        images=rng.integers(0, 4, n),
    )


REFS = _refs(90)
BUDGETS = {"tokens": 100, "images": 6}


def test_contract():
    check_stage(
        lambda: pack(BUDGETS, packing_buffer_size=16),
        lambda: repeat(in_memory(REFS), 2),
        cut_points=[0, 2, 5, 11],
    )


def _packs(strategy, buffer, refs=REFS, epochs=1, **kw):
    p = Pipeline(
        chain(
            repeat(in_memory(refs), epochs),
            pack(BUDGETS, strategy=strategy, packing_buffer_size=buffer, **kw),
        ),
        seed=3,
    )
    state, packs = run(p)
    return p.get(state, "pack"), packs


@settings(max_examples=25)
@given(
    strategy=st.sampled_from(sorted(ALGORITHMS)),
    buffer=st.integers(1, 40),
    seed=st.integers(0, 50),
    n=st.integers(0, 80),
)
def test_budgets_coverage_and_determinism(strategy, buffer, seed, n):
    refs = _refs(n, seed)
    state, packs = _packs(strategy, buffer, refs)
    for p in packs:
        assert len(p) > 0
        assert p.column("tokens").sum() <= 100 and p.column("images").sum() <= 6
    placed = np.concatenate([p.index for p in packs]) if packs else np.zeros(0, dtype=np.int64)
    over = int((refs.column("tokens") > 100).sum())
    assert sorted(placed.tolist()) == sorted(refs.index[refs.column("tokens") <= 100].tolist())
    assert state.dropped == over  # every ref placed exactly once, or counted as dropped
    again = _packs(strategy, buffer, refs)[1]
    assert len(again) == len(packs) and all(a == b for a, b in zip(again, packs))


def test_exact_resume_from_inside_a_buffer():
    def make():
        return Pipeline(
            chain(
                repeat(in_memory(REFS), 2),
                pack(BUDGETS, strategy="balanced", packing_buffer_size=30),
                batch(3, drop_last=False),
            ),
            seed=1,
        )

    # 90 refs per epoch in buffers of 30, ~8-10 packs per buffer: cuts inside buffers too.
    assert_exact_resume(make, cut_points=[0, 1, 2, 4, 7, 9])


def pairs(refs):
    """A user strategy: consecutive pairs."""
    return [[i, i + 1] if i + 1 < len(refs) else [i] for i in range(0, len(refs), 2)]


def test_over_budget_policies_and_user_strategy():
    with pytest.raises(ConfigError, match="over the pack budgets"):
        _packs("ffd", 30, over_budget="raise")
    state, packs = _packs("ffd", 30, over_budget="truncate")
    assert state.truncated == int((REFS.column("tokens") > 100).sum())
    assert sum(len(p) for p in packs) == len(REFS)
    assert max(int(p.column("tokens").max()) for p in packs) == 100

    state, packs = _packs(pairs, 10, refs=Refs.of(index=np.arange(10), tokens=1, images=0))
    assert sorted(len(p) for p in packs) == [2] * 5
    with pytest.raises(ConfigError, match="name="):
        pack(BUDGETS, strategy=lambda r: [[0]])
    with pytest.raises(ConfigError, match="strategy"):
        pack(BUDGETS, strategy="best")


def test_greedy_keeps_order_without_shuffle():
    refs = Refs.of(index=np.arange(24), tokens=np.arange(1, 25), images=0)
    _, packs = _packs("greedy", 24, refs=refs, shuffle_packs=False)
    assert [p.column("tokens").tolist() for p in packs] == [
        list(range(1, 14)),
        list(range(14, 20)),
        list(range(20, 24)),
        [24],
    ]
