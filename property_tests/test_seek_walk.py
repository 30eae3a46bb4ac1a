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

from hypothesis import given, note, settings
from hypothesis import strategies as st

from fpipe.core import Pipeline, chain
from fpipe.loader import seek
from fpipe.loader.rank_epoch import rank_epoch_on_counts
from fpipe.loader.steering import seek_state
from fpipe.plan import batch, blend, distribute, samples, window_shuffle
from fpipe.plan.skip import normalize_step_ranges
from property_tests.strategies import mix_changes

FEW = settings(max_examples=max(6, settings.default.max_examples // 8), deadline=None)


def build(p: dict, rank: int) -> Pipeline:
    views = [samples(n, dataset=d) for d, n in enumerate(p["sizes"])]
    head = blend(views, weights=p["weights"], draw=p["draw"])
    window = [window_shuffle(p["window"])] if p["window"] else []
    world = p["world"]
    tail = [distribute(world, rank=rank, world_size=world), batch(1)]
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


@FEW
@given(data=st.data())
def test_the_walk_back_for_a_rank_epoch_is_the_step_by_step_seek(data):
    sizes = tuple(data.draw(st.lists(st.integers(1, 12), min_size=3, max_size=3)))
    p = {
        "sizes": sizes,
        # weights as the sizes: the datasets' epochs move together, a rank's lag behind by one
        "weights": data.draw(st.sampled_from([sizes, sizes, (1, 8, 3), (2, 3, 1)])),
        "draw": data.draw(st.sampled_from(["hash", "quota"])),
        "window": data.draw(st.sampled_from([0, 0, 5, 13])),
        "world": data.draw(st.sampled_from([3, 4, 8])),
        "seed": data.draw(st.integers(0, 5)),
    }
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
    sizes = tuple(data.draw(st.lists(st.integers(1, 12), min_size=3, max_size=3)))
    p = {
        "sizes": sizes,
        "weights": data.draw(st.sampled_from([sizes, (1, 8, 3), (2, 3, 1), (1, 30, 10)])),
        "draw": "quota",
        "window": data.draw(st.sampled_from([0, 5, 13])),
        "world": data.draw(st.sampled_from([1, 3, 4, 8])),
        "seed": data.draw(st.integers(0, 5)),
    }
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
