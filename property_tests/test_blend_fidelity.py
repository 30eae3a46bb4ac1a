"""Invariant 7 (blend fidelity) and the blend's share of invariants 2 and 6: proportions follow
the weights (and the schedule, interval by interval); epochized blends give exact counts; any
cut resumes exactly, across a dataset's epoch boundary and across a schedule point; the state
does not grow."""

from __future__ import annotations

import numpy as np
from hypothesis import given, note
from hypothesis import strategies as st

from fpipe.core import Pipeline, chain
from fpipe.core.testing import assert_bounded_state, assert_exact_resume, run
from fpipe.plan import batch, distribute, samples, slice_shuffle, window_shuffle
from fpipe.plan.blend import blend
from fpipe.plan.blend_choice import WeightSchedule, choose_epochized, choose_weighted

# Upper 0.01% points of chi-square by degrees of freedom (a hypothesis run tries many seeds);
# with one dataset of weight > 0 every draw must be it.
CHI2_9999 = {0: 1e-9, 1: 15.14, 2: 18.42, 3: 21.11, 4: 23.51, 5: 25.74, 6: 27.86}

weights_st = st.lists(st.integers(0, 9), min_size=2, max_size=7).filter(lambda w: sum(w) > 0)


def chi2(ids, probs) -> float:
    probs = np.asarray(probs, dtype=np.float64)
    observed = np.bincount(ids, minlength=len(probs)).astype(np.float64)
    expected = observed.sum() * probs
    assert observed[expected == 0].sum() == 0, "a dataset of weight 0 was chosen"
    keep = expected > 0
    return float(((observed - expected) ** 2 / np.where(keep, expected, 1))[keep].sum())


@given(weights=weights_st, seed=st.integers(0, 2**32))
def test_proportions_follow_weights(weights, seed):
    ids = choose_weighted(seed, WeightSchedule.constant(weights), np.arange(20_000))
    w = np.asarray(weights, dtype=np.float64)
    assert chi2(ids, w / w.sum()) < CHI2_9999[int((w > 0).sum()) - 1]


@given(rows=st.lists(weights_st, min_size=2, max_size=3), seed=st.integers(0, 2**32))
def test_proportions_follow_a_step_schedule_per_interval(rows, seed):
    width = min(len(r) for r in rows)
    rows = [r[:width] for r in rows]
    if any(sum(r) == 0 for r in rows):
        return
    s = WeightSchedule(
        points=tuple(i * 10_000 for i in range(len(rows))), weights=tuple(map(tuple, rows))
    )
    for i, row in enumerate(rows):
        ids = choose_weighted(seed, s, np.arange(i * 10_000, (i + 1) * 10_000))
        w = np.asarray(row, dtype=np.float64)
        assert chi2(ids, w / w.sum()) < CHI2_9999[int((w > 0).sum()) - 1]


@given(
    counts=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    seed=st.integers(0, 2**32),
    epochs=st.integers(1, 3),
)
def test_epochized_counts_exact(counts, seed, epochs):
    total = sum(counts)
    ids = choose_epochized(seed, counts, np.arange(epochs * total))
    for e in range(epochs):
        assert np.bincount(ids[e * total : (e + 1) * total], minlength=len(counts)).tolist() == (
            counts
        )


@st.composite
def blend_pipelines(draw):
    sizes = draw(st.lists(st.integers(1, 12), min_size=1, max_size=4))
    n = len(sizes)
    kind = draw(st.sampled_from(["weighted", "schedule", "epochized"]))
    slice_size = draw(st.integers(1, 4))
    window = draw(st.sampled_from([None, 3, 8]))
    b = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**20))
    epochs = draw(st.integers(1, 2))
    weights = draw(st.lists(st.integers(1, 5), min_size=n, max_size=n))
    point = draw(st.integers(1, 30))
    linear = draw(st.booleans())
    reps = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))

    def make():
        views = [slice_shuffle(samples(s, dataset=d), slice_size) for d, s in enumerate(sizes)]
        names = [f"ds{d}" for d in range(n)]
        if kind == "weighted":
            head = blend(views, weights=weights, names=names, num_epochs=epochs)
        elif kind == "schedule":
            s = WeightSchedule(
                points=(0, point), weights=(tuple(weights), tuple(reversed(weights))), linear=linear
            )
            head = blend(views, schedule=s, names=names, num_epochs=epochs)
        else:
            head = blend(views, repetitions=reps, names=names, num_epochs=epochs)
        stages = [window_shuffle(window)] if window else []
        return Pipeline(chain(head, *stages, distribute(b), batch(b, drop_last=False)), seed)

    desc = f"{kind} sizes={sizes} w={weights} reps={reps} point={point} lin={linear} win={window}"
    return make, desc


@given(case=blend_pipelines(), data=st.data())
def test_blend_exact_resume_and_bounded_state(case, data):
    make, desc = case
    _, ref = run(make())
    cuts = data.draw(st.lists(st.integers(0, len(ref)), min_size=1, max_size=3))
    note(f"{desc} outputs={len(ref)} cuts={cuts}")
    assert_exact_resume(make, cuts, reference=ref)
    assert_bounded_state(make, [0, *cuts])
