"""A seek finds a rank's highest epoch by walking back over planned steps; the walk gives the
step-by-step seek's state, counters and epoch.

In global mode the counts say how far the global order went but not which refs one rank got,
so a seek plans its last steps and, where they hold an epoch below the global one before them,
plans steps further back, 4 times as many each time, until the global epoch before them bounds
every earlier step (``fpipe.loader.seek._rank_epoch``). These plans make that walk likely: a
tiny dataset runs through many epochs while a rank takes one ref of each global batch, so its
last steps often hold none of the newest epoch; the walk goes back several times (to step 0
too). Each seek is compared with ``seek_state(..., fast=False)``, every step planned.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from fpipe.core import Pipeline, chain
from fpipe.loader import seek
from fpipe.loader.mix_history import MixChange
from fpipe.loader.rank_epoch import _Lands, answers_rank_epoch, rank_epoch_on_counts
from fpipe.loader.steering import seek_state
from fpipe.plan import batch, blend, distribute, samples, window_shuffle
from fpipe.plan.blend_choice import WeightSchedule
from fpipe.plan.blend_quota import quota_segment
from fpipe.plan.skip import normalize_step_ranges
from fpipe.plan.slice_order import tile
from property_tests.strategies import mix_changes

FEW = settings(max_examples=max(6, settings.default.max_examples // 8), deadline=None)


def build(p: dict, rank: int) -> Pipeline:
    views = [samples(n, dataset=d) for d, n in enumerate(p["sizes"])]
    head = blend(views, weights=p["weights"], draw=p["draw"])
    window = [window_shuffle(p["window"])] if p["window"] else []
    world, per = p["world"], p.get("per", 1)
    tail = [distribute(world * per, rank=rank, world_size=world), batch(per)]
    return Pipeline(chain(head, *window, *tail), seed=p["seed"])


def check(p: dict, rank: int, target: int, ranges=(), changes=(), planned: int = 1) -> bool:
    """Seek both ways; True when the walk back ran."""
    fast = build(p, rank)
    with mock.patch.object(seek, "_rank_epoch", wraps=seek._rank_epoch) as walk:
        got = seek_state(fast, target, ranges, changes, planned=planned)
    plan = build(p, rank)
    ref = seek_state(plan, target, ranges, changes, fast=False)
    assert fast.snapshot(got[0]) == plan.snapshot(ref[0])
    assert got[1:] == ref[1:]
    return walk.called


def small_blend(data, draws: list, weights: list, windows: list) -> dict:
    """A plan's parameters: three datasets of 1-12 samples, weights from ``weights`` (None:
    the sizes), a draw from ``draws``, a window from ``windows`` (0: none), a seed."""
    sizes = tuple(data.draw(st.lists(st.integers(1, 12), min_size=3, max_size=3)))
    w = data.draw(st.sampled_from(weights))
    return {
        "sizes": sizes,
        "weights": sizes if w is None else w,
        "draw": data.draw(st.sampled_from(draws)),
        "window": data.draw(st.sampled_from(windows)),
        "seed": data.draw(st.integers(0, 5)),
    }


@FEW
@given(data=st.data())
def test_the_walk_back_for_a_rank_epoch_is_the_step_by_step_seek(data):
    # weights as the sizes (twice as likely): the datasets' epochs move together, a rank's lag
    # behind by one
    p = small_blend(data, ["hash", "quota"], [None, None, (1, 8, 3), (2, 3, 1)], [0, 0, 5, 13])
    p["world"] = data.draw(st.sampled_from([3, 4, 8]))
    rank = data.draw(st.integers(0, p["world"] - 1))
    target = data.draw(st.integers(1, 120))
    spans = st.tuples(st.integers(0, 100), st.integers(1, 12)).map(lambda t: (t[0], t[0] + t[1]))
    ranges = normalize_step_ranges(data.draw(st.lists(spans, max_size=2)))
    with_changes = data.draw(st.booleans())
    changes = data.draw(mix_changes(target, 2)) if with_changes else []
    planned = data.draw(st.sampled_from([1, 2, 5]))
    note(f"{p} rank={rank} target={target} skip={ranges} changes={changes} planned={planned}")
    walked = check(p, rank, target, ranges, changes, planned)
    note(f"walked back: {walked}")


def test_a_walk_back_to_step_0_and_part_way_are_the_step_by_step_seek():
    # a dataset of 1 sample: a new epoch every time it is drawn, on 8 ranks of one ref each;
    # the hash draw walks (the quota draw's epoch comes from counts, below)
    p = {"sizes": (1, 30, 9), "weights": (1, 30, 10), "window": 5, "world": 8, "seed": 1}
    walked = 0
    for rank, target in ((0, 7), (3, 40), (5, 97), (7, 150), (2, 300)):
        walked += check({**p, "draw": "hash"}, rank, target)
    assert walked  # some of these seeks walk back


@FEW
@given(data=st.data())
def test_a_rank_epoch_from_counts_is_the_step_by_step_seeks(data):
    # a quota blend (the shape rank_epoch_on_counts answers): its answer, from the state the
    # step-by-step seek reaches and no lower bound, is that seek's epoch; and a seek that
    # uses it gives the step-by-step seek's state and counters
    p = small_blend(data, ["quota"], [None, (1, 8, 3), (2, 3, 1), (1, 30, 10)], [0, 5, 13])
    p["world"] = data.draw(st.sampled_from([1, 3, 4, 8]))
    rank = data.draw(st.integers(0, p["world"] - 1))
    note(f"{p} rank={rank}")
    plan = build(p, rank)
    for target in sorted(set(data.draw(st.lists(st.integers(1, 150), min_size=1, max_size=3)))):
        state, *_, epoch = seek_state(plan, target, (), (), fast=False)
        assert rank_epoch_on_counts(plan, target, state, 0) == epoch, target
        assert rank_epoch_on_counts(plan, target, state, epoch) == epoch, target
        check(p, rank, target)


def test_a_rank_epoch_from_counts_answers_where_a_walk_would_go_back():
    p = {"sizes": (1, 30, 9), "weights": (1, 30, 10), "window": 5, "world": 8, "seed": 1}
    p["draw"] = "quota"
    for rank, target in ((0, 7), (3, 40), (5, 97), (7, 150), (2, 300)):
        with mock.patch.object(seek, "_rank_epoch") as walk:
            check(p, rank, target)
        assert not walk.called
    # any other shape (here a skipped step) walks back
    with mock.patch.object(seek, "_rank_epoch", wraps=seek._rank_epoch) as walk:
        check(p, 7, 150, ((3, 4),))
    assert walk.called


# -- positions over many quota blocks, per-rank batches above 1 ------------------------------
# Far plans: a rank's refs spread over many blocks of QUOTA_BLOCK positions, so the answer
# finds a ref's block from the counts, walks back block by block and maps slots of a per-rank
# batch above 1 to ranks.


# skewed weights; with 1 of 2004, a dataset gets about 2 refs a block: its epochs span blocks
SKEWED = [(1, 40, 600), (600, 1, 40), (3, 300, 5), (1, 2000, 3)]


def check_on_counts(p: dict, rank: int, targets) -> None:
    plan = build(p, rank)
    assert answers_rank_epoch(plan)
    for target in sorted(set(targets)):
        state, *_, epoch = seek_state(plan, target, (), (), fast=False)
        assert rank_epoch_on_counts(plan, target, state, 0) == epoch, target
        check(p, rank, target)


@settings(max_examples=max(4, settings.default.max_examples // 20), deadline=None)
@given(data=st.data())
def test_a_rank_epoch_from_counts_over_many_quota_blocks_is_the_step_by_step_seeks(data):
    small = data.draw(st.integers(1, 8))
    large = data.draw(st.integers(200, 3000))
    p = {
        # skewed: the small dataset runs many epochs, the large one spans blocks in one epoch
        "sizes": data.draw(st.permutations([small, data.draw(st.integers(20, 200)), large])),
        "weights": data.draw(st.sampled_from(SKEWED)),
        "draw": "quota",
        "window": data.draw(st.sampled_from([0, 0, 128, 300])),
        "world": data.draw(st.sampled_from([16, 32, 64])),
        "per": data.draw(st.integers(1, 4)),
        "seed": data.draw(st.integers(0, 5)),
    }
    rank = data.draw(st.integers(0, p["world"] - 1))
    targets = data.draw(st.lists(st.integers(200, 1000), min_size=1, max_size=2))
    note(f"{p} rank={rank} targets={targets}")
    check_on_counts(p, rank, targets)


@pytest.mark.parametrize(
    "p, rank, targets",
    [
        # a large dataset first: its newest epochs span blocks and are looked up before the
        # small one's; windows straddle blocks
        ({"sizes": (2500, 3, 90), "weights": (900, 1, 30), "window": 300}, 13, (700, 1500)),
        ({"sizes": (5, 1200, 60), "weights": (2, 600, 40), "window": 0}, 20, (400, 1100)),
        ({"sizes": (2, 100), "weights": (1, 20), "window": 200}, 5, (2000,)),
    ],
)
def test_far_seeks_of_per_rank_batches_above_one_answer_on_counts(p, rank, targets):
    check_on_counts({**p, "draw": "quota", "world": 32, "per": 3, "seed": 2}, rank, targets)


@pytest.mark.parametrize(
    "p, world, per, target",
    [
        ({"sizes": (10, 200000), "weights": (1, 4000), "window": 0}, 32, 2, 2000),
        ({"sizes": (6, 50000, 40), "weights": (1, 3000, 2), "window": 256}, 16, 4, 1500),
        ({"sizes": (3, 30000, 8), "weights": (1, 2000, 3), "window": 0}, 64, 1, 2000),
    ],
)
def test_an_epoch_whose_refs_span_many_blocks_is_looked_up_block_by_block(p, world, per, target):
    # a dataset of a tiny share: about one ref per block, so an epoch's refs lie in many
    # blocks and a rank that got none of the last ones walks back to earlier blocks
    p = {**p, "draw": "quota", "world": world, "per": per, "seed": 2}
    for rank in (0, 7, 11):
        check_on_counts(p, rank, (target,))


def test_a_state_after_an_online_weight_change_gets_no_answer():
    p = {"sizes": (3, 40, 7), "weights": (1, 5, 2), "draw": "quota", "window": 5}
    p.update(world=4, per=2, seed=3)
    changes = [MixChange(10, (3.0, 1.0, 1.0))]
    plan = build(p, 1)
    state, *rest = seek_state(plan, 40, (), changes, fast=False)
    assert rank_epoch_on_counts(plan, 40, state, 0) is None
    got = seek_state(build(p, 1), 40, (), changes)
    assert plan.snapshot(got[0]) == plan.snapshot(state)
    assert list(got[1:]) == rest


def test_the_block_of_a_ref_is_the_last_block_whose_counts_do_not_pass_it():
    # c_d(k) refs of dataset d lie in blocks 0..k-1: ref j is in the last k with c_d(k) <= j;
    # totals 7 and 13 (prime to QUOTA_BLOCK and the shares): within 14 blocks every block
    # start falls at each remainder, the ref that starts a block exactly included
    for shares, key in ((1, 2, 4), 0), ((1, 2, 4), 5), ((1, 2, 4, 6), 1):
        seg = quota_segment(key, 0, np.array(shares, dtype=np.int64).tobytes())
        lands = _Lands.__new__(_Lands)  # block_of_ref reads only the segment
        lands.seg = seg
        counts = np.array([seg.counts(k) for k in range(14)])
        for d in range(len(shares)):
            refs = range(int(counts[-1, d]))
            expected = np.searchsorted(counts[:, d], refs, side="right") - 1
            assert [lands.block_of_ref(d, j) for j in refs] == expected.tolist(), (shares, d)


def far(sizes=(3, 40, 7), weights=(1, 5, 2), **blend_args):
    """The views and blend arguments of a quota blend (each case changes one)."""
    views = [samples(n, dataset=d) for d, n in enumerate(sizes)]
    return views, {"weights": weights, "draw": "quota", **blend_args}


def other_shape(kind: str, rank: int) -> Pipeline:
    views, args = far()
    ws, tail = [window_shuffle(5)], [distribute(8, rank=rank, world_size=4), batch(2)]
    if kind == "hash":
        args["draw"] = "hash"
    elif kind == "num_epochs":
        args["num_epochs"] = 50
    elif kind == "schedule":  # two weight points: a second segment
        del args["weights"]
        args["schedule"] = WeightSchedule(points=(0, 300), weights=((1, 5, 2), (5, 1, 1)))
    elif kind == "tiled":
        views[0] = tile(views[0], 2)
    elif kind == "per_rank":  # half of the rank's refs a step
        tail[-1] = batch(1)
    elif kind == "window_name":
        ws = [window_shuffle(5, name="shuffle")]
    elif kind == "window_after":
        ws, tail = [], [tail[0], window_shuffle(4), tail[1]]
    return Pipeline(chain(blend(views, **args), *ws, *tail), seed=3)


# refused at construction, so not here: draw="quota" with unit="tokens" (it counts samples),
# a quota blend with neither weights nor schedule (repetitions, or uniform)
@pytest.mark.parametrize(
    "kind",
    ["hash", "num_epochs", "schedule", "tiled", "per_rank", "window_name", "window_after"],
)
def test_plans_of_other_shapes_get_no_answer_and_seek_step_by_step(kind):
    for rank, target in ((1, 40), (3, 90)):
        plan = other_shape(kind, rank)
        state, *_, epoch = seek_state(plan, target, (), (), fast=False)
        assert not answers_rank_epoch(plan)
        assert rank_epoch_on_counts(plan, target, state, 0) is None
        got = seek_state(other_shape(kind, rank), target, (), ())
        assert plan.snapshot(got[0]) == plan.snapshot(state)
        assert got[1:] == (target, target * (1 if kind == "per_rank" else 2), epoch)
