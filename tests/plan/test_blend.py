"""Blending: the stage contract, fidelity to weights and schedules, epochized counts, resume."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fpipe.core import Pipeline, chain
from fpipe.core.errors import ConfigError, SnapshotMismatchError
from fpipe.core.rng import uniform_array
from fpipe.core.testing import check_pipeline, run
from fpipe.plan import batch, distribute, samples, slice_shuffle, window_shuffle
from fpipe.plan.blend import BlendState, blend, blend_counters
from fpipe.plan.blend_choice import WeightSchedule, choose_epochized, choose_weighted, pick
from fpipe.plan.online_mix import OnlineEntry, choose_online, weights32

# Upper 0.1% points of the chi-square distribution by degrees of freedom.
CHI2_999 = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52}


def chi2(observed, probs) -> float:
    observed = np.asarray(observed, dtype=np.float64)
    expected = observed.sum() * np.asarray(probs, dtype=np.float64)
    keep = expected > 0
    assert observed[~keep].sum() == 0, "a zero-weight dataset was chosen"
    return float((((observed - expected) ** 2)[keep] / expected[keep]).sum())


def views(sizes, slice_size=3):
    return [slice_shuffle(samples(n, dataset=d), slice_size) for d, n in enumerate(sizes)]


def names(n):
    return [f"ds{i}" for i in range(n)]


@pytest.mark.parametrize(
    "weights", [[1, 1], [5, 2, 1], [0.1, 0.3, 0.6], [1, 0, 3], [10, 1, 1, 1, 1], [1, 2, 3, 4]]
)
def test_proportions_converge_to_weights(weights):
    ids = choose_weighted(1234, WeightSchedule.constant(weights), np.arange(200_000))
    w = np.asarray(weights, dtype=np.float64)
    observed = np.bincount(ids, minlength=len(w))
    df = int((w > 0).sum()) - 1
    assert chi2(observed, w / w.sum()) < CHI2_999[df]


@pytest.mark.parametrize("linear", [False, True])
def test_schedule_proportions_per_interval(linear):
    s = WeightSchedule.of(
        [(0, {"a": 1, "b": 1}), (100_000, {"a": 1, "b": 3}), (200_000, {"a": 4, "c": 1})],
        ["a", "b", "c"],
        linear=linear,
    )
    # Each interval is cut in pieces short enough that a linear schedule is nearly flat.
    for lo in range(0, 300_000, 10_000):
        pos = np.arange(lo, lo + 10_000)
        ids = choose_weighted(99, s, pos)
        expected = np.mean([s.at(int(p)) for p in pos[::50]], axis=0)
        df = int((expected > 0).sum()) - 1
        assert chi2(np.bincount(ids, minlength=3), expected) < CHI2_999[df], lo
    # Steps change at the point; linear ones meet the next row at it.
    assert s.at(99_999) == pytest.approx([0.5, 0.5, 0] if not linear else [0.25, 0.75, 0], 1e-4)
    assert s.at(100_000) == pytest.approx([0.25, 0.75, 0])


def test_choice_is_a_function_of_key_and_position():
    s = WeightSchedule.constant([1, 2, 3])
    whole = choose_weighted(5, s, np.arange(1000))
    assert np.array_equal(choose_weighted(5, s, np.arange(500, 1000)), whole[500:])
    assert not np.array_equal(choose_weighted(6, s, np.arange(1000)), whole)


def test_epochized_exact_counts_per_blend_epoch():
    counts = [7, 3, 12]
    ids = choose_epochized(3, counts, np.arange(5 * 22))
    for e in range(5):
        assert np.bincount(ids[e * 22 : (e + 1) * 22], minlength=3).tolist() == counts
    assert not np.array_equal(ids[:22], ids[22:44])  # a new interleaving each epoch


def test_epochized_blend_passes_and_stop():
    src = blend(views([5, 4, 6]), repetitions=[2, 1, 3], names=names(3), num_epochs=1)
    p = Pipeline(src, seed=3)
    _, out = run(p)
    triples = [t for r in out for t in r.triples()]
    assert len(triples) == 5 * 2 + 4 + 6 * 3  # repeat=False: one blend epoch, then the end
    by = {d: sorted((i, e) for dd, i, e in triples if dd == d) for d in range(3)}
    # Each dataset: exactly `repetitions` whole passes, each pass one leaf epoch.
    assert by[0] == sorted((i, e) for e in range(2) for i in range(5))
    assert by[1] == sorted((i, 0) for i in range(4))
    assert by[2] == sorted((i, e) for e in range(3) for i in range(6))
    assert [t[0] for t in triples] != sorted(t[0] for t in triples)  # interleaved


def test_leaf_runs_out_and_starts_a_fresh_order():
    src = blend(views([6, 50], slice_size=1), weights=[1, 1], names=names(2))
    _, out = run(Pipeline(src, seed=11), limit=200)
    small = [(i, e) for r in out for d, i, e in r.triples() if d == 0]
    ep0 = [i for i, e in small if e == 0]
    ep1 = [i for i, e in small if e == 1]
    assert sorted(ep0) == list(range(6)) and sorted(ep1) == list(range(6))
    assert ep0 != ep1


def make_weighted(sizes=(13, 7, 29), window=8, schedule=None, **kw):
    def make():
        s = schedule or WeightSchedule.constant([5, 2, 1][: len(sizes)])
        src = blend(views(sizes), schedule=s, names=names(len(sizes)), **kw)
        return Pipeline(chain(src, window_shuffle(window), distribute(6), batch(6)), seed=7)

    return make


def test_contract_weighted_across_epoch_boundaries():
    # Dataset 1 has 7 samples: its first epoch ends within the first ~3 batches.
    check_pipeline(make_weighted(num_epochs=2), cut_points=[0, 1, 2, 3, 5, 8])


def test_contract_across_a_schedule_point():
    s = WeightSchedule.of([(0, {"ds0": 1}), (30, {"ds1": 1, "ds2": 2})], names(3), linear=False)
    make = make_weighted(schedule=s, num_epochs=1)
    _, out = run(make())
    ds = np.concatenate([r.refs.dataset for r in out])
    assert set(ds[:24].tolist()) == {0}  # positions < 30 (the window of 8 mixes 24..31)
    assert 0 not in set(ds[32:].tolist())
    check_pipeline(make, cut_points=[3, 4, 5, 6])  # the point falls in batch 5


def test_contract_epochized():
    def make():
        src = blend(views([5, 4]), repetitions=[2, 3], names=names(2), num_epochs=2)
        return Pipeline(chain(src, window_shuffle(4), distribute(4), batch(4)), seed=1)

    check_pipeline(make, cut_points=[0, 2, 5, 6, 9])


def test_request_size_does_not_change_the_stream():
    src = blend(views([13, 7, 29]), weights=[1, 2, 3], names=names(3), num_epochs=3)
    p = Pipeline(src, seed=2)
    _, ones = run(p)
    state, chunks = p.init(), []
    while True:
        state, c = p.next(state, 10_000)
        if not len(c):
            break
        chunks.append(c)
    assert [r.triples()[0] for r in ones] == [t for c in chunks for t in c.triples()]


def test_snapshot_size_bounded():
    def make(n):
        vs = [slice_shuffle(samples(50 + d, dataset=d), 10) for d in range(n)]
        src = blend(vs, weights=range(1, n + 1), names=names(n))
        return Pipeline(chain(src, window_shuffle(1000), distribute(32), batch(32)), seed=1)

    for n, limit in ((3, 1024), (100, 4096)):
        p = make(n)
        state, sizes = p.init(), []
        for _ in range(4):
            state, _ = run(p, state, limit=40)
            sizes.append(len(p.snapshot(state)))
        assert len(set(sizes)) == 1 and sizes[0] <= limit, (n, sizes)


def test_changed_weights_refused_by_name_unless_allowed():
    old = make_weighted()()
    state, _ = run(old, limit=3)
    data = old.snapshot(state)
    s = WeightSchedule.constant([5, 3, 1])
    with pytest.raises(SnapshotMismatchError, match=r"weights of \['ds1'\]"):
        make_weighted(schedule=s)().restore(data)  # refused at restore, naming the dataset
    new = make_weighted(schedule=s, allow_changed_weights=True)()
    restored = new.restore(data)
    _, rest = run(new, restored, limit=2)
    assert len(rest) == 2
    counters = blend_counters(new, restored)
    assert [c["taken"] for c in counters.values()] == list(_blend_state(state).taken)


def _blend_state(state):
    while not isinstance(state, BlendState):
        state = state.up
    return state


def test_added_dataset_refused():
    old = make_weighted(sizes=(13, 7))()
    data = old.snapshot(run(old, limit=2)[0])
    with pytest.raises(SnapshotMismatchError, match="datasets of a blend changed"):
        make_weighted(sizes=(13, 7, 29))().restore(data)


def test_bad_configs():
    with pytest.raises(ConfigError, match="exactly one of"):
        blend(views([3]), weights=[1], repetitions=[1])
    with pytest.raises(ConfigError, match="unique name"):
        blend(views([3, 3]), weights=[1, 1], names=["a", "a"])
    with pytest.raises(ConfigError, match="not all 0"):
        blend(views([3, 3]), weights=[0, 0])
    with pytest.raises(ConfigError, match="has no samples"):
        blend([samples(0)], weights=[1])


def test_golden_order():
    """Pinned orders: changing them is an ITERATION ORDER BREAKING CHANGE (bump ORDER_VERSION,
    docs/compatibility.md)."""
    vs = views([5, 4, 6], slice_size=2)
    names3 = ["coco", "coyo", "ocr"]
    p = Pipeline(blend(vs, weights=[5, 2, 1], names=names3), seed=1234)
    assert p.next(p.init(), 12)[1].triples() == [
        (1, 0, 0), (1, 1, 0), (2, 2, 0), (2, 3, 0), (1, 2, 0), (0, 0, 0),
        (1, 3, 0), (0, 1, 0), (0, 2, 0), (0, 3, 0), (0, 4, 0), (0, 2, 1),
    ]  # fmt: skip
    p = Pipeline(blend(vs, repetitions=[1, 2, 1], names=names3, num_epochs=1), seed=1234)
    assert p.next(p.init(), 19)[1].triples() == [
        (0, 0, 0), (1, 0, 0), (2, 2, 0), (2, 3, 0), (1, 1, 0), (1, 2, 0), (1, 3, 0),
        (0, 1, 0), (2, 0, 0), (1, 2, 1), (1, 3, 1), (2, 1, 0), (0, 2, 0), (2, 4, 0),
        (0, 3, 0), (1, 0, 1), (0, 4, 0), (2, 5, 0), (1, 1, 1),
    ]  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    changes=st.lists(
        st.tuples(st.integers(0, 400), st.lists(st.integers(0, 5), min_size=3, max_size=3)),
        min_size=1,
        max_size=4,
    ),
    positions=st.lists(st.integers(0, 600), min_size=1, max_size=80),
    contiguous=st.booleans(),
)
def test_online_choice_is_a_function_of_key_and_position(changes, positions, contiguous):
    """Each position gets the dataset its own entry (or the schedule, before the first) picks,
    whatever the other positions asked with it: a block, or any order with repeats."""
    entries, last = [], -1
    for pos, w in sorted(changes):
        if pos > last and sum(w):
            entries.append(OnlineEntry(pos, weights32(w)))
            last = pos
    if not entries:
        return
    points = [(0, {"a": 1, "b": 2, "c": 3}), (300, {"a": 3, "c": 1})]
    s = WeightSchedule.of(points, ["a", "b", "c"])
    p = np.array(positions)
    if contiguous:
        p = np.arange(positions[0], positions[0] + len(positions))
    got = choose_online(9, s, entries, p)
    for i, q in enumerate(p.tolist()):
        own = [e for e in entries if e.position <= q]
        one = np.array([q])
        row = () if not own else tuple(np.frombuffer(own[-1].weights, "<f4").astype(float))
        want = choose_weighted(9, s, one) if not own else pick(row, uniform_array(9, one))
        assert got[i] == want[0], (q, own)
