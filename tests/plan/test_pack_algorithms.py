"""Pack selection algorithms: budgets, coverage, determinism, and the toy of the HF post."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fpipe.core.errors import ConfigError
from fpipe.plan.packing.algorithms import (
    ALGORITHMS,
    OverBudget,
    apply_over_budget,
    balanced,
    ffd,
    greedy,
    packing_from_groups,
)
from tests.plan import pack_reference

TOY = np.arange(1, 25)


def _values(packing, costs):
    return [costs[g].tolist() for g in packing.groups()]


def test_greedy_toy_matches_the_post():
    assert _values(greedy(TOY, 100), TOY) == [
        list(range(1, 14)),
        list(range(14, 20)),
        list(range(20, 24)),
        [24],
    ]


def test_ffd_toy_fills_three_packs_to_exactly_100():
    packs = ffd(TOY, 100)
    assert len(packs) == 3
    assert packs.loads(TOY).tolist() == [100, 100, 100]
    assert _values(packs, TOY)[0] == [24, 23, 22, 21, 10]


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_empty_buffer(name):
    packs = ALGORITHMS[name](np.zeros(0, dtype=np.int64), 10)
    assert len(packs) == 0 and len(packs.order) == 0


costs_2d = st.integers(0, 60).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 100), min_size=n, max_size=n),
        st.lists(st.integers(0, 8), min_size=n, max_size=n),
    )
)


@settings(max_examples=40)
@given(data=costs_2d, name=st.sampled_from(sorted(ALGORITHMS)), two=st.booleans())
def test_every_item_once_and_no_pack_over_any_budget(data, name, two):
    tokens, images = (np.asarray(x, dtype=np.int64) for x in data)
    costs = np.stack([tokens, images], axis=1) if two else tokens
    limits = [100, 8] if two else 100
    packs = ALGORITHMS[name](costs, limits)
    assert sorted(packs.order.tolist()) == list(range(len(tokens)))
    assert (packs.sizes() > 0).all()
    loads = packs.loads(np.atleast_2d(costs.T).T)
    assert (loads <= np.atleast_1d(limits)).all()
    again = ALGORITHMS[name](costs.copy(), limits)
    assert np.array_equal(again.order, packs.order)
    assert np.array_equal(again.offsets, packs.offsets)


def test_balanced_balances_images_better_than_ffd():
    rng = np.random.default_rng(3)
    tokens = np.clip(rng.lognormal(np.log(300), 1.0, 1000), 16, 4096).astype(np.int64)
    images = rng.integers(0, 5, 1000)
    costs = np.stack([tokens, images], axis=1)

    def ratio(packs):
        load = packs.loads(images)
        return load.max() / load.mean()

    b, f = balanced(costs, [4096, 32]), ffd(costs, [4096, 32])
    assert ratio(b) < 1.3 < ratio(f)
    assert tokens.sum() / (len(b) * 4096) > 0.97


def test_over_budget_policies():
    keep, c = apply_over_budget([5, 120, 7], 100)
    assert keep.tolist() == [0, 2] and c[:, 0].tolist() == [5, 7]
    keep, c = apply_over_budget([5, 120], 100, OverBudget.TRUNCATE)
    assert keep.tolist() == [0, 1] and c[:, 0].tolist() == [5, 100]
    keep, c = apply_over_budget([5, 120], 100, "truncate", truncate=lambda c, lim: c // 2)
    assert c[:, 0].tolist() == [5, 60]
    with pytest.raises(ConfigError, match="sample x1"):
        apply_over_budget([5, 120], 100, "raise", describe=lambda i: f"sample x{i}")
    with pytest.raises(ConfigError, match="truncate hook"):
        apply_over_budget([5, 120], 100, "truncate", truncate=lambda c, lim: c)


def test_algorithms_refuse_over_budget_items():
    with pytest.raises(ConfigError, match="over-budget policy"):
        ffd([5, 120], 100)


def test_user_groups_are_checked():
    packs = packing_from_groups([[2, 0], [], [1]], 3)
    assert [g.tolist() for g in packs.groups()] == [[2, 0], [1]]
    with pytest.raises(ConfigError, match="more than one pack"):
        packing_from_groups([[0, 1], [1]], 3)
    with pytest.raises(ConfigError, match="outside"):
        packing_from_groups([[3]], 3)


costs_k = st.integers(1, 3).flatmap(
    lambda k: st.tuples(
        st.lists(st.integers(1, 60), min_size=k, max_size=k),
        st.lists(st.lists(st.integers(0, 70), min_size=k, max_size=k), max_size=70),
    )
)


@settings(max_examples=60)
@given(data=costs_k, name=st.sampled_from(sorted(pack_reference.ALGORITHMS)))
def test_same_packs_as_the_per_sample_reference(data, name):
    """The whole-buffer algorithms give the packs of the per-sample ones, item for item (so the
    iteration order of packed pipelines does not change)."""
    limits, rows = data
    costs = np.minimum(np.asarray(rows, dtype=np.int64).reshape(-1, len(limits)), limits)
    got, want = ALGORITHMS[name](costs, limits), pack_reference.ALGORITHMS[name](costs, limits)
    assert got.order.tolist() == want.order.tolist()
    assert got.offsets.tolist() == want.offsets.tolist()


@pytest.mark.parametrize("name", sorted(pack_reference.ALGORITHMS))
@pytest.mark.parametrize("images", [32, 8])
def test_same_packs_as_the_reference_on_the_benchmark_lengths(name, images):
    rng = np.random.default_rng(5)
    tokens = np.clip(np.round(rng.lognormal(np.log(300), 1.0, 1000)), 16, 4096).astype(np.int64)
    costs = np.stack([tokens, rng.integers(0, 5, 1000)], axis=1)
    for c, limits in ((costs, [4096, images]), (tokens, 4096)):
        got, want = ALGORITHMS[name](c, limits), pack_reference.ALGORITHMS[name](c, limits)
        assert np.array_equal(got.order, want.order)
        assert np.array_equal(got.offsets, want.offsets)
