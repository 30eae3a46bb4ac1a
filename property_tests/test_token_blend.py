"""Blend fidelity by tokens (``blend(..., unit="tokens")``): weights are shares of an index
column, held over every window of positions; the state stays small; any cut resumes exactly,
across epochs and schedule points."""

from __future__ import annotations

import numpy as np
from hypothesis import given, note, settings
from hypothesis import strategies as st

from fpipe.core import Pipeline, chain
from fpipe.core.testing import assert_bounded_state, assert_exact_resume, run
from fpipe.plan import batch, distribute, samples, slice_shuffle, window_shuffle
from fpipe.plan.blend import blend
from fpipe.plan.blend_choice import WeightSchedule

WINDOW = 1000  # positions (one sample per step)
STEPS = 20_000


def lognormal_tokens(seed: int, n: int, median: float, sigma: float = 0.5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.maximum(1, np.round(rng.lognormal(np.log(median), sigma, n))).astype(np.int64)


def two_datasets(seed: int, n: int):
    """Views of two datasets whose token lengths differ 10x (medians 100 and 1,000)."""
    short = lognormal_tokens(seed, n, 100)
    long = lognormal_tokens(seed + 1, n, 1000)
    return [
        slice_shuffle(samples(n, dataset=0, columns={"tokens": short}), 16),
        slice_shuffle(samples(n, dataset=1, columns={"tokens": long}), 16),
    ]


def window_shares(refs) -> np.ndarray:
    """Token share of dataset 0 in every window of WINDOW consecutive positions."""
    tokens = refs.column("tokens").astype(np.int64)
    mine = np.concatenate([[0], np.cumsum(np.where(refs.dataset == 0, tokens, 0))])
    total = np.concatenate([[0], np.cumsum(tokens)])
    return (mine[WINDOW:] - mine[:-WINDOW]) / (total[WINDOW:] - total[:-WINDOW])


@settings(max_examples=6)
@given(seed=st.integers(0, 2**31))
def test_token_weights_hold_in_every_window(seed):
    views = two_datasets(seed, 8_000)  # STEPS positions cross several epochs of each
    tok = Pipeline(blend(views, weights=[1, 1], names=["s", "l"], unit="tokens"), seed)
    _, refs = tok.next(tok.init(), STEPS)
    shares = window_shares(refs)
    note(f"token weights: share of s in [{shares.min():.4f}, {shares.max():.4f}]")
    assert len(refs) == STEPS
    assert np.all(np.abs(shares - 0.5) <= 0.02)
    # The same weights as shares of samples give the short dataset about 1/11 of the tokens.
    smp = Pipeline(blend(views, weights=[1, 1], names=["s", "l"]), seed)
    _, refs = smp.next(smp.init(), STEPS)
    assert not np.all(np.abs(window_shares(refs) - 0.5) <= 0.02)


def test_token_weights_follow_unequal_weights_and_steps():
    views = two_datasets(7, 8_000)
    s = WeightSchedule(points=(0, 10_000), weights=((1.0, 3.0), (1.0, 1.0)))
    p = Pipeline(blend(views, schedule=s, names=["s", "l"], unit="tokens"), 7)
    _, refs = p.next(p.init(), STEPS)
    shares = window_shares(refs)
    first, second = shares[: 10_000 - WINDOW + 1], shares[10_000:]
    assert np.all(np.abs(first - 0.25) <= 0.02), (first.min(), first.max())
    assert np.all(np.abs(second - 0.5) <= 0.02), (second.min(), second.max())


def blend_plan(num_datasets: int, seed: int = 0) -> Pipeline:
    views = [
        slice_shuffle(
            samples(50, dataset=d, columns={"tokens": lognormal_tokens(d, 50, 100 * (1 + d % 10))}),
            4,
        )
        for d in range(num_datasets)
    ]
    head = blend(views, weights=[1.0] * num_datasets, unit="tokens")
    return Pipeline(chain(head, window_shuffle(64), distribute(8), batch(8)), seed)


def test_state_size_for_3_and_100_datasets():
    for n, limit in ((3, 1024), (100, 4096)):
        sizes = set()
        p = blend_plan(n)
        state, done = p.init(), 0
        for steps in (1, 40, 400):  # one run, snapshot on its way (the state after 1, 40, 400)
            state, _ = run(p, state, limit=steps - done)
            done = steps
            sizes.add(len(p.snapshot(state)))
        assert len(sizes) == 1 and max(sizes) <= limit, (n, sizes)


@st.composite
def unit_blends(draw):
    sizes = draw(st.lists(st.integers(1, 12), min_size=1, max_size=4))
    n = len(sizes)
    kind = draw(st.sampled_from(["constant", "steps", "linear"]))
    weights = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n).filter(any))
    point = draw(st.integers(1, 40))
    window = draw(st.sampled_from([None, 5]))
    b = draw(st.integers(1, 4))
    epochs = draw(st.integers(1, 2))
    seed = draw(st.integers(0, 2**20))
    lengths = [draw(st.lists(st.integers(0, 50), min_size=s, max_size=s)) for s in sizes]

    def make():
        views = [
            slice_shuffle(samples(s, dataset=d, columns={"tokens": np.asarray(lengths[d])}), 3)
            for d, s in enumerate(sizes)
        ]
        if kind == "constant":
            schedule = WeightSchedule.constant(weights)
        else:
            rows = (tuple(weights), tuple(reversed(weights)) if any(weights[::-1]) else weights)
            schedule = WeightSchedule(points=(0, point), weights=rows, linear=kind == "linear")
        head = blend(views, schedule=schedule, num_epochs=epochs, unit="tokens")
        stages = [window_shuffle(window)] if window else []
        return Pipeline(chain(head, *stages, distribute(b), batch(b, drop_last=False)), seed)

    return make, f"{kind} sizes={sizes} w={weights} point={point} win={window} b={b}"


@settings(max_examples=40)
@given(case=unit_blends(), data=st.data())
def test_token_blend_exact_resume_and_bounded_state(case, data):
    make, desc = case
    _, ref = run(make())
    cuts = data.draw(st.lists(st.integers(0, len(ref)), min_size=1, max_size=3))
    note(f"{desc} outputs={len(ref)} cuts={cuts}")
    assert_exact_resume(make, cuts, reference=ref)
    assert_bounded_state(make, [0, *cuts])
