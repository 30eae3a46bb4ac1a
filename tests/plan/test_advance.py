"""``Pipeline.advance``: a blend -> window shuffle -> distribute -> batch plan passes many steps on
counts, without gathering their refs, and reaches the state ``next`` reaches."""

from __future__ import annotations

from fpipe.core import Pipeline, chain
from fpipe.core.advance import Passed
from fpipe.core.stage import View
from fpipe.plan import batch, blend, distribute, samples, slice_shuffle, window_shuffle


def counting_views(sizes, seen: list) -> list[View]:
    """Views that add the number of refs they gather to ``seen[0]``."""
    out = []
    for d, n in enumerate(sizes):
        view = slice_shuffle(samples(n, dataset=d), 10)

        def gather(root, epoch, positions, _inner=view.gather):
            seen[0] += len(positions)
            return _inner(root, epoch, positions)

        out.append(View(name=view.name, config=view.config, size=n, gather=gather))
    return out


def plan(seen: list, world: int = 1) -> Pipeline:
    head = blend(counting_views((300, 170, 110), seen), weights=[3, 1, 2])
    stages = (window_shuffle(100), distribute(8, world_size=world), batch(8 // world))
    return Pipeline(chain(head, *stages), seed=4)


def test_advance_passes_steps_on_counts_and_reaches_the_state_next_reaches():
    seen = [0]
    p = plan(seen)
    steps = 50_000  # 400,000 refs
    state, passed = p.advance(p.init(), steps)
    fast_gathered = seen[0]
    assert passed.outputs == steps and passed.refs == 8 * steps
    # every position chosen by counts: only the windows around the ends were gathered
    assert fast_gathered < 40_000

    seen[0] = 0
    q = plan(seen)
    ref, epoch = q.init(), 0
    for _ in range(steps):
        ref, out = q.next(ref, 1)
        epoch = max(epoch, int(out[0].refs.epoch.max()))
    assert seen[0] >= 8 * steps  # the ordinary way gathers every ref
    assert p.snapshot(state) == q.snapshot(ref)
    assert passed.epoch == epoch > 0


def test_advance_from_part_way_through_a_window_and_to_part_way():
    p = plan([0])
    start = p.init()
    for _ in range(7):  # inside the first window (12.5 steps each)
        start, _ = p.next(start, 1)
    assert start.up.up.cur == 56
    state, passed = p.advance(start, 1003)
    ref = start
    for _ in range(1003):
        ref, _ = p.next(ref, 1)
    assert passed == Passed(1003, 8 * 1003, passed.epoch)
    assert p.snapshot(state) == p.snapshot(ref)
    assert state.up.up.cur == 80  # it ended part way through a window


def test_a_distribution_over_several_ranks_builds_its_steps():
    # a rank's highest epoch depends on which refs it got: no advance on counts, same state
    seen = [0]
    p = plan(seen, world=2)
    assert p.source.advance is not None  # the batch counts, over an input that builds
    state, passed = p.advance(p.init(), 2_000)
    assert seen[0] >= 8 * 2_000
    ref = p.init()
    for _ in range(2_000):
        ref, _ = p.next(ref, 1)
    assert p.snapshot(state) == p.snapshot(ref)
    assert passed.outputs == 2_000 and passed.refs == 4 * 2_000
