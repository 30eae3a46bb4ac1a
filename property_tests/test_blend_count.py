"""A weighted blend's draws counted in bulk (:mod:`fpipe.plan.blend_count`) are the draws
counted one by one: for random weights (zeros included), schedules in steps or linear, online
entries, ranges of positions and bucket counts (few buckets: many mixed ones), the count
equals ``bincount(choose_online(...))``; and a blend's advance that counts every run in bulk
reaches the state its ``next`` reaches."""

from __future__ import annotations

import functools
from unittest import mock

import numpy as np
from hypothesis import given, note, settings
from hypothesis import strategies as st

from fpipe.core.rng import key
from fpipe.plan import blend, samples
from fpipe.plan import blend_count as bc
from fpipe.plan.blend_choice import WeightSchedule
from fpipe.plan.online_mix import OnlineEntry, choose_online, weights32

FEW = settings(max_examples=max(5, settings.default.max_examples // 4), deadline=None)
WEIGHT = st.sampled_from([0.0, 0.0, 1.0, 2.0, 3.5, 1e-6, 1e6])


def rows(n: int):
    return st.lists(WEIGHT, min_size=n, max_size=n).map(
        lambda r: tuple(r[:-1]) + ((r[-1] or 1.0),)  # never all 0
    )


@FEW
@given(data=st.data())
def test_counting_draws_in_bulk_is_counting_each_draw(data):
    n = data.draw(st.integers(1, 5))
    points = sorted(set(data.draw(st.lists(st.integers(1, 3000), max_size=2))))
    sched = WeightSchedule(
        points=(0, *points),
        weights=tuple(data.draw(rows(n)) for _ in range(len(points) + 1)),
        linear=data.draw(st.booleans()),
    )
    at = sorted(set(data.draw(st.lists(st.integers(0, 4000), max_size=3))))
    entries = tuple(OnlineEntry(p, weights32(data.draw(rows(n)))) for p in at)
    lo = data.draw(st.integers(0, 3000))
    hi = lo + data.draw(st.integers(0, 3000))
    bits = data.draw(st.sampled_from([1, 4, 9, 18]))
    # every run in bulk, runs shorter than a few hundred drawn one by one, or all drawn
    direct_below = data.draw(st.sampled_from([0, 0, 300, 1 << 40]))
    block = data.draw(st.sampled_from([64, 1 << 20]))  # positions per numpy pass
    k = key(data.draw(st.integers(0, 3)))
    note(f"{sched} entries={entries} lo={lo} hi={hi} bits={bits} direct_below={direct_below}")

    def choose(p):
        return choose_online(k, sched, entries, p)

    want = np.bincount(choose(np.arange(lo, hi, dtype=np.int64)), minlength=n)
    with mock.patch.object(bc, "_BLOCK", block):
        got = bc.count_draws(
            k, sched, entries, lo, hi, n, choose, bits=bits, direct_below=direct_below
        )
    assert got.dtype == np.int64 and got.tolist() == want.tolist()


def test_linear_segments_and_short_runs_are_drawn_one_by_one():
    # a linear segment's weights move with the position: its positions are drawn (no table);
    # so are runs shorter than direct_below, a block of positions at a time
    sched = WeightSchedule(points=(0, 500, 900), weights=((1, 0, 3), (0, 2, 1), (5, 1, 0)))
    for linear in (False, True):
        s = WeightSchedule(points=sched.points, weights=sched.weights, linear=linear)
        entries = (OnlineEntry(1500, weights32([1, 1, 1])),)
        k = key(2)

        def choose(p, s=s, entries=entries, k=k):
            return choose_online(k, s, entries, p)

        want = np.bincount(choose(np.arange(100, 2000, dtype=np.int64)), minlength=3)
        for direct_below, block in ((0, 1 << 20), (400, 128), (1 << 40, 77)):
            with mock.patch.object(bc, "_BLOCK", block):
                got = bc.count_draws(
                    k, s, entries, 100, 2000, 3, choose, bits=4, direct_below=direct_below
                )
            assert got.tolist() == want.tolist(), (linear, direct_below, block)
        runs = bc.row_runs(s, entries, 100, 2000)
        assert [(a, b) for a, b, _ in runs] == [(100, 500), (500, 900), (900, 1500), (1500, 2000)]
        # in a linear schedule, every segment but the last moves: no row
        assert [row is None for _, _, row in runs] == [linear, linear, False, False]
        # an entry before the schedule's last point: the schedule holds until the entry only
        early = (OnlineEntry(700, weights32([0, 1, 1])),)
        runs = bc.row_runs(s, early, 100, 2000)
        assert [(a, b) for a, b, _ in runs] == [(100, 500), (500, 700), (700, 2000)]
        want = np.bincount(choose_online(k, s, early, np.arange(100, 2000)), minlength=3)
        draw = functools.partial(choose_online, k, s, early)
        got = bc.count_draws(k, s, early, 100, 2000, 3, draw, bits=4, direct_below=0)
        assert got.tolist() == want.tolist()


@FEW
@given(seed=st.integers(0, 5), m=st.integers(1, 5000), w=rows(4))
def test_a_blend_advance_counting_in_bulk_is_its_next(seed, m, w):
    views = [samples(s, dataset=d) for d, s in enumerate((7, 30, 3, 11))]
    src = blend(views, weights=w)
    with mock.patch.object(bc, "_DIRECT_BELOW", 0), mock.patch.object(bc, "BITS", 6):
        fast, _ = src.advance(src.init(key(seed)), m)
    slow, _ = src.next(src.init(key(seed)), m)
    assert fast == slow
