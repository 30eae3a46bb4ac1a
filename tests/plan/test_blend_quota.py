"""The quota draw of a weighted blend (``draw="quota"``): exact shares per block, counters
derived from the position (equal to counting the stream), exact resume, seek and online
changes, and a state that grows with neither the step nor the datasets."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from fpipe.core import Pipeline, chain
from fpipe.core.errors import ConfigError, SnapshotMismatchError
from fpipe.core.records import Refs
from fpipe.core.testing import check_pipeline, run
from fpipe.plan import batch, repeat, samples, slice_shuffle, window_shuffle
from fpipe.plan.blend import QuotaBlendState, blend, blend_counters, choice_key
from fpipe.plan.blend_choice import WeightSchedule
from fpipe.plan.blend_quota import (
    QUOTA_BLOCK,
    decode_shares,
    encode_shares,
    quantize,
    quota_segment,
)
from fpipe.plan.blend_state import online_mix, weight_digests, with_online_change
from fpipe.plan.online_mix import MAX_QUOTA_CHANGES, weights32
from fpipe.plan.recipe_blend import blend_recipes
from property_tests.reference.blend import quota_choice, quota_shares

B = QUOTA_BLOCK
FAST = (Phase.explicit, Phase.reuse, Phase.generate)  # no shrinking: each example is ~0.1 s


def views(sizes, slice_size=3):
    return [slice_shuffle(samples(n, dataset=d), slice_size) for d, n in enumerate(sizes)]


def quota(sizes, weights=None, schedule=None, **kw):
    return blend(views(sizes), weights=weights, schedule=schedule, draw="quota", **kw)


def take(src, state, m):
    """``m`` refs from ``state`` (a ``next`` may give fewer than asked)."""
    parts = []
    while m > 0:
        state, refs = src.next(state, m)
        assert len(refs)
        parts.append(refs)
        m -= len(refs)
    return state, Refs.concat(parts) if parts else Refs.empty()


def ids_of(src, state, m):
    state, refs = take(src, state, m)
    return state, refs.dataset.astype(np.int64)


def test_each_block_holds_the_weights_shares_exactly():
    src = quota([500, 700, 1100], weights=[1, 3, 4])  # W = 8 divides the block: no rounding
    state, ids = ids_of(src, src.init(3), 3 * B)
    for k in range(3):
        block = ids[k * B : (k + 1) * B]
        assert np.bincount(block, minlength=3).tolist() == [B // 8, 3 * B // 8, B // 2]
    assert not np.array_equal(ids[:B], ids[B : 2 * B])  # each block in its own order


def test_block_counts_are_the_quota_rounded_down_or_up():
    seg = quota_segment(7, 0, quantize([0.2, 0.3, 0.5, 1e-9]).tobytes())
    total = seg.total
    for k in range(5):
        got = seg.counts(k + 1) - seg.counts(k)
        exact = B * seg.shares / total
        assert np.all((got == np.floor(exact)) | (got == np.ceil(exact)))
    assert seg.shares[3] == 1  # a tiny weight above 0 keeps a share


@settings(max_examples=12, deadline=None, phases=FAST)
@given(
    weights=st.lists(st.integers(0, 6), min_size=1, max_size=5).filter(any),
    seed=st.integers(0, 2**32),
    cuts=st.lists(st.integers(1, 3 * B), min_size=1, max_size=4),
)
def test_derived_counters_equal_counting_the_stream(weights, seed, cuts):
    n = len(weights)
    src = quota([300 + d for d in range(n)], weights=weights)
    p = Pipeline(src, seed)
    state, done, seen = p.init(), 0, np.zeros(n, dtype=np.int64)
    for c in sorted(cuts):
        state, got = take(p, state, c - done)
        if len(got):
            seen += np.bincount(got.dataset, minlength=n)
        done = max(done, c)
        derived = [v["taken"] for v in blend_counters(p, state).values()]
        assert derived == seen.tolist()


@settings(max_examples=6, deadline=None, phases=FAST)
@given(
    weights=st.one_of(
        st.lists(st.integers(0, 5), min_size=2, max_size=4).filter(any),
        st.lists(st.floats(0.01, 3.0), min_size=2, max_size=4),
    ),
    root=st.integers(0, 2**32),
)
def test_choice_equals_the_one_position_reference(weights, root):
    src = quota([400] * len(weights), weights=weights)
    _, ids = ids_of(src, src.init(root), B + 300)
    ck = choice_key(root, "blend")
    segs = [(0, quota_shares(weights))]
    picks = list(range(0, 40)) + list(range(B - 40, B + 300))
    assert [quota_choice(ck, segs, i) for i in picks] == ids[picks].tolist()


def test_schedule_and_online_change_follow_the_reference():
    sched = WeightSchedule(points=(0, 1000), weights=((1.0, 2.0, 0.0), (0.0, 1.0, 1.0)))
    src = quota([400, 500, 600], schedule=sched)
    state, head = ids_of(src, src.init(9), 2500)  # mid-block of the second segment
    state = with_online_change(state, 3, position=2500, step=1, weights=weights32([3, 0, 1]))
    state, tail = ids_of(src, state, 1700)
    ids = np.concatenate([head, tail]).tolist()
    ck = choice_key(9, "blend")
    segs = [(0, [1, 2, 0]), (1000, [0, 1, 1]), (2500, [3, 0, 1])]
    assert [quota_choice(ck, segs, i) for i in range(4200)] == ids
    assert set(ids[2500:]) == {0, 2}


def test_a_change_to_the_weights_in_force_starts_a_segment_in_a_warm_plan_too():
    # Each online entry of a quota blend starts its blocks where it starts, even with the
    # weights already in force (a controller that sends the same weights again). A plan that
    # had drawn past that position under the entry before reused those draws: the run went
    # on differently from a restore of its own state.
    p = Pipeline(quota([400, 500, 600], weights=[1, 1, 1]), 9)
    state, _ = take(p, p.init(), 50)
    state = with_online_change(state, 3, position=50, step=1, weights=weights32([0, 1, 4]))
    state, _ = take(p, state, 50)  # draws a block past 100 under the entry at 50
    state = with_online_change(state, 3, position=100, step=2, weights=weights32([0, 1, 4]))
    _, warm = ids_of(p, state, 300)
    fresh = Pipeline(quota([400, 500, 600], weights=[1, 1, 1]), 9)
    _, restored = ids_of(fresh, fresh.restore(p.snapshot(state)), 300)
    assert warm.tolist() == restored.tolist()
    ck = choice_key(state.key, "blend")
    segs = [(0, [1, 1, 1]), (50, [0, 1, 4]), (100, [0, 1, 4])]
    assert warm.tolist() == [quota_choice(ck, segs, i) for i in range(100, 400)]


def make_online(cut, change_at=777, window=None):
    def make():
        src = quota([900, 1300, 400], weights=[2, 1, 1])
        if window:
            src = chain(src, window_shuffle(window))
        return Pipeline(src, 5)

    return make


def test_contract_resume_purity_and_constant_size():
    check_pipeline(make_online(0), cut_points=[0, 1, 4095, 4096, 4200], limit=4300)
    check_pipeline(make_online(0, window=64), cut_points=[3, 700, 4100], limit=4200)


@settings(max_examples=8, deadline=None, phases=FAST)
@given(change=st.integers(1, 2 * B), cut=st.integers(0, 3 * B), seed=st.integers(0, 99))
def test_set_weights_mid_block_then_resume_and_seek(change, cut, seed):
    p = Pipeline(quota([900, 1300, 400], weights=[2, 1, 1]), seed)

    def stream(upto):
        state, a = take(p, p.init(), change)
        state = with_online_change(state, 3, position=change, step=1, weights=weights32([0, 1, 4]))
        state, b = take(p, state, upto - change)
        return state, np.concatenate([a.index * 10 + a.dataset, b.index * 10 + b.dataset])

    whole_state, whole = stream(3 * B + 10)
    if cut <= change:
        return
    state, _ = stream(cut)
    restored = p.restore(p.snapshot(state))
    assert restored == state
    _, rest = take(p, restored, 3 * B + 10 - cut)
    assert (rest.index * 10 + rest.dataset).tolist() == whole[cut:].tolist()
    sought, _ = p.advance(restored, 10)
    direct, _ = p.next(restored, 10)
    assert sought == direct
    counted = np.bincount(whole[: 3 * B + 10] % 10, minlength=3).tolist()
    assert [v["taken"] for v in blend_counters(p, whole_state).values()] == counted


def test_seek_far_is_a_formula():
    p = Pipeline(quota([900, 1300, 400], weights=[2, 1, 1]), 1)
    far, passed = p.advance(p.init(), 10**12)  # a hash draw refuses this many draws
    assert far.position == 10**12 and passed.outputs == 10**12
    taken = [v["taken"] for v in blend_counters(p, far).values()]
    assert sum(taken) == 10**12 and abs(taken[0] - 10**12 // 2) <= 1
    nxt, refs = take(p, far, 5)
    again, refs2 = take(p, p.restore(p.snapshot(far)), 5)
    assert nxt == again and refs.index.tolist() == refs2.index.tolist()


def test_state_holds_no_counter_and_does_not_grow_with_datasets():
    sizes = []
    for n in (3, 300):
        src = quota([5] * n, weights=[1 + d % 7 for d in range(n)])
        state, _ = src.next(src.init(0), 5000)
        assert isinstance(state, QuotaBlendState)
        sizes.append(len(msgspec.msgpack.encode(state)))
    assert sizes[0] == sizes[1]


def test_changed_weights_compress_to_a_few_bits_each():
    q = quantize(np.random.default_rng(0).integers(1, 8, 10_000).astype(float))
    data = encode_shares(q)
    assert len(data) < 5000 and decode_shares(data, 10_000).tolist() == q.tolist()
    floats = quantize([0.1, 0.2, 0.7])
    assert floats.sum() == 1 << 24 and floats.tolist() == quota_shares([0.1, 0.2, 0.7])


def test_restore_with_other_weights_is_refused():
    p = Pipeline(quota([5, 6], weights=[1, 2]), 0)
    state, _ = run(p, limit=10)
    other = Pipeline(quota([5, 6], weights=[2, 1]), 0)
    with pytest.raises(SnapshotMismatchError, match="same weights"):
        other.restore(p.snapshot(state))


@pytest.mark.parametrize(
    "kw, match",
    [
        (
            dict(schedule=WeightSchedule.of([(0, {"a": 1}), (9, {"b": 1})], "ab", linear=True)),
            "linear",
        ),
        (dict(weights=[1, 1], allow_changed_weights=True), "allow_changed_weights"),
        (dict(weights=[1, 1], unit="tokens"), "counts samples"),
        (dict(repetitions=[1, 1]), "weighted"),
        (dict(weights=[1, 1], draw="dice"), "draw must be"),
    ],
)
def test_refused_configs(kw, match):
    kw.setdefault("draw", "quota")
    with pytest.raises(ConfigError, match=match):
        blend(views([3, 4]), **kw)


def test_every_change_is_kept_up_to_the_limit():
    src = quota([50, 60], weights=[1, 1])
    state = src.init(0)
    for i in range(MAX_QUOTA_CHANGES):
        state = with_online_change(state, 2, position=i, step=i, weights=weights32([1, i + 1]))
    assert len(online_mix(state, 2).entries) == MAX_QUOTA_CHANGES
    with pytest.raises(ConfigError, match="at most 64"):
        with_online_change(state, 2, position=99, step=99, weights=weights32([1, 1]))


def test_counters_of_a_quota_blend_inside_another_step_are_those_it_drew():
    # the blend's state sits at "blend_batches/0/blend": its counters come from its own
    # step name, not from the path that leads to it
    inner = chain(quota([500, 700, 300], weights=[1, 2, 3]), batch(50))
    other = chain(repeat(samples(40, dataset=0), 1), batch(10))
    p = Pipeline(blend_recipes([inner, other], seeds=[4, 5], mode="concat"), 0)
    assert "blend_batches/0/blend" in dict(p.parts)
    state, out = p.next(p.init(), 21)  # 1,050 refs of the blend: mid-block
    drawn = np.bincount(np.concatenate([r.refs.dataset for r in out]), minlength=3)
    counters = blend_counters(p, state)
    assert [v["taken"] for v in counters.values()] == drawn.tolist()
    assert [v["epoch"] for v in counters.values()] == (drawn // [500, 700, 300]).tolist()


def test_an_advance_passes_the_epochs_its_positions_reach():
    p = Pipeline(quota([50, 70, 30], weights=[1, 2, 3]), 2)
    start, _ = take(p, p.init(), 100)
    for want in (40, 500):
        _, refs = take(p, start, want)
        sought, passed = p.advance(start, want)
        assert passed.outputs == want and sought == take(p, start, want)[0]
        assert passed.epoch == refs.epoch.max() > 0


def test_weight_digests_are_a_snapshot_format():
    # Pinned values: a snapshot carries these bytes and a restore compares them, so a change
    # here makes every saved snapshot of such a blend unrestorable.
    sched = WeightSchedule(points=(0, 1000), weights=((1.0, 2.0, 0.0), (0.0, 1.0, 1.0)))
    assert weight_digests(sched, 3, draw="quota").hex() == "79fd"
    assert weight_digests(sched, 3).hex() == "c9694562a893"  # one per dataset
    assert weight_digests(sched, 3, "tokens").hex() == "b0d3fd7c6ad8"
    assert weight_digests(WeightSchedule.constant([3, 1]), 2, draw="quota").hex() == "8726"
    assert weight_digests(None, 3) == b""  # an epochized blend
