"""The multi-input model, shown by a round-robin interleave of two sub-plans."""

import numpy as np

from fpipe.core import Pipeline, chain
from fpipe.core.testing import run
from fpipe.plan import batch, filter_refs, repeat, samples, window_shuffle
from tests.plan.interleave import interleave


def _sub(n, dataset, window=4):
    cols = {"t": np.arange(n) % 5}
    return chain(repeat(samples(n, dataset=dataset, columns=cols), 1), window_shuffle(window))


def test_round_robin_then_the_longer_input():
    p = Pipeline(chain(interleave(_sub(3, 0), _sub(6, 1)), batch(3, drop_last=False)), seed=1)
    _, out = run(p)
    datasets = [d for r in out for d in r.refs.dataset.tolist()]
    assert datasets == [0, 1, 0, 1, 0, 1, 1, 1, 1]
    got = sorted((d, i) for r in out for d, i, _ in r.refs.triples())
    assert got == [(0, i) for i in range(3)] + [(1, i) for i in range(6)]


def test_same_sub_plan_twice_gives_two_streams():
    p = Pipeline(interleave(_sub(40, 0, 40), _sub(40, 0, 40)), seed=3)
    _, out = run(p)
    first, second = [r.index[0] for r in out[0::2]], [r.index[0] for r in out[1::2]]
    assert sorted(first) == sorted(second) == list(range(40)) and first != second


def test_steps_by_path_and_nested_description():
    sub = chain(repeat(samples(10, columns={"t": np.arange(10)}), 1), filter_refs("t", "<", 6))
    p = Pipeline(chain(interleave(sub, _sub(5, 1)), batch(2)), seed=0)
    state, _ = run(p)
    assert p.get(state, "interleave/0/filter").dropped == 4
    assert p.stats(state)["interleave/0/filter"] == {"filtered": 4}
    steps = p.describe()
    assert [s["name"] for s in steps] == ["pipeline", "interleave", "batch"]
    inputs = steps[1]["inputs"]
    assert [s["name"] for s in inputs[0]] == ["samples", "repeat", "filter"]
    assert inputs[0][2]["value"] == 6 and inputs[1][-1]["window_size"] == 4
    assert "interleave/1/window_shuffle" in dict(p.parts)
