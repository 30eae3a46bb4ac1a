"""``Pipeline.advance``: a blend -> window shuffle -> distribute -> batch plan passes many steps on
counts, without gathering their refs, and reaches the state ``next`` reaches."""

from __future__ import annotations

import numpy as np

from fpipe.core import Pipeline, chain
from fpipe.core.advance import Passed
from fpipe.core.stage import View
from fpipe.loader.steering import apply_change
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
    # 120,000 refs: past 2^16 refs, ~200 epochs of the 580 samples, 15 of the blend's blocks,
    # 1,200 windows (the steps one at a time below cost ~75 us each)
    steps = 15_000
    state, passed = p.advance(p.init(), steps)
    fast_gathered = seen[0]
    assert passed.outputs == steps and passed.refs == 8 * steps
    # every position chosen by counts: only the windows around the ends were gathered
    assert fast_gathered < 8 * steps // 10

    seen[0] = 0
    q = plan(seen)
    ref, epochs = q.init(), []
    for _ in range(steps):
        ref, out = q.next(ref, 1)
        epochs.append(out[0].refs.epoch)
    epoch = int(np.concatenate(epochs).max())
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


def test_a_rank_of_several_counts_its_steps_but_not_its_highest_epoch():
    # a rank's part of the global batches: the counts give its state, steps and refs, not the
    # highest epoch of the refs it got
    seen = [0]
    p = plan(seen, world=2)
    steps = 8_000  # 64,000 refs of global batches: ~110 epochs, 640 windows
    state, passed = p.advance(p.init(), steps)
    assert seen[0] < 2 * steps  # half of the rank's 4 * steps refs (the bound of 20,000 steps)
    assert passed == Passed(steps, 4 * steps, None)
    ref = p.init()
    for _ in range(steps):
        ref, _ = p.next(ref, 1)
    assert p.snapshot(state) == p.snapshot(ref)


def test_seek_finds_a_ranks_highest_epoch_further_back_when_the_last_steps_lack_it():
    # dataset 2 (110 samples, weight 6 of 7) goes through several epochs in the first 100
    # steps, then weighs 0; the large datasets stay in epoch 0. The last steps hold only
    # epoch 0, so the seek plans further back until it finds the rank's highest epoch
    from fpipe.loader.steering import MixChange, seek_state

    def ranked(rank):
        head = blend(counting_views((10_000, 10_000, 110), [0]), weights=[1, 0, 6])
        stages = (window_shuffle(100), distribute(8, rank=rank, world_size=2), batch(4))
        return Pipeline(chain(head, *stages), seed=4)

    changes = [MixChange(100, (1.0, 1.0, 0.0))]
    for rank in (0, 1):
        fast = seek_state(ranked(rank), 900, (), changes)
        slow = seek_state(ranked(rank), 900, (), changes, fast=False)
        assert ranked(rank).snapshot(fast[0]) == ranked(rank).snapshot(slow[0])
        assert fast[1:] == slow[1:] and slow[3] >= 4
        live, state, last = ranked(rank), None, []
        state = live.init()
        for step in range(900):
            state, out = live.next(state, 1)
            if step + 1 == 100:  # the change applies before step 100
                state = apply_change(live, state, changes[0])
            last.append(int(out[0].refs.epoch.max()))
        assert max(last[-200:]) == 0  # the last steps lack it


def test_a_batch_size_ramp_passes_each_run_of_one_size_on_counts():
    from fpipe.plan import BatchSchedule

    sizes = BatchSchedule.of({0: 2, 5: 4, 300: 8})
    seen = [0]

    def ramp(world=1, rank=0):
        head = blend(counting_views((300, 170, 110), seen), weights=[3, 1, 2])
        stages = (
            window_shuffle(100),
            distribute(sizes, rank=rank, world_size=world),
            batch(sizes.per_rank(world)),
        )
        return Pipeline(chain(head, *stages), seed=4)

    for world, rank in ((1, 0), (2, 1)):
        seen[0] = 0
        p = ramp(world, rank)
        state, passed = p.advance(p.init(), 20_000)
        assert seen[0] < 80_000  # of 160,000: the windows at each size change are read
        assert passed.outputs == 20_000 and passed.refs == sizes.refs_before(20_000) // world
        ref = p.init()
        for _ in range(20_000):
            ref, _ = p.next(ref, 1)
        assert p.snapshot(state) == p.snapshot(ref)


def test_over_a_tile_the_highest_epoch_is_the_highest_pass_read():
    # shuffle_over_epochs_multiplier: an epoch of the view is 3 passes, and each ref carries
    # its pass as epoch (epoch * 3 + pass), in the slice shuffle's order: the counts give
    # the refs, the last epoch's refs give the highest pass
    from fpipe.loader.steering import seek_state
    from fpipe.plan import repeat
    from fpipe.plan.slice_order import tile

    def tiled(d):
        return slice_shuffle(tile(samples(10, dataset=d), 3), 2)

    heads = {
        "one dataset": lambda: repeat(tiled(0)),
        "blend": lambda: blend([tiled(0), tiled(1)], weights=[1, 2]),
    }
    for name, head in heads.items():
        for target in (5, 22, 64, 150):
            plans = [Pipeline(chain(head(), window_shuffle(4), distribute(2), batch(2)), 1)
                     for _ in range(2)]  # fmt: skip
            fast = seek_state(plans[0], target, (), (), planned=1)
            slow = seek_state(plans[1], target, (), (), fast=False)
            assert fast[1:] == slow[1:], (name, target)


def test_passed_of_counts_outputs_refs_and_the_highest_epoch():
    # a chunk of refs: each ref is an output; recipes: one output each, holding their refs;
    # recipes of packs: one output each, holding every pack's refs; nothing: all 0
    from fpipe.core.advance import passed_of
    from fpipe.core.records import Recipe, Refs

    assert passed_of(Refs.of(index=[4, 5, 6], epoch=[0, 3, 1])) == Passed(3, 3, 3)
    assert passed_of(Refs.empty()) == Passed(0, 0, 0)
    assert passed_of(()) == Passed(0, 0, 0)

    def recipe(*refs):
        return Recipe(step=0, refs=refs[0] if len(refs) == 1 else refs, key=None)

    recipes = (recipe(Refs.of(index=[1, 2], epoch=1)), recipe(Refs.of(index=[3, 4, 5], epoch=2)))
    assert passed_of(recipes) == Passed(2, 5, 2)
    assert passed_of((recipe(Refs.empty()),)) == Passed(1, 0, 0)
    packs = (recipe(Refs.of(index=[1], epoch=4), Refs.of(index=[2, 3], epoch=0)),)
    assert passed_of(packs) == Passed(1, 3, 4)


def test_a_step_that_cannot_count_is_advanced_by_building_its_outputs():
    # a filter has no advance: next builds the outputs (5 of each epoch of 10 pass), to the
    # state next and skip reach; a finite stream gives fewer; more than 2**36 outputs one at a
    # time are refused at once, naming the step
    import pytest

    from fpipe.core.errors import ConfigError
    from fpipe.plan import filter_refs, repeat

    def filtered(num_epochs=None):
        return Pipeline(chain(repeat(samples(10), num_epochs), filter_refs("index", "<", 5)), 0)

    p = filtered()
    assert p.source.advance is None
    for n in (0, 7, 1500):
        state, passed = p.advance(p.init(), n)
        assert passed == Passed(n, n, max(0, n - 1) // 5)
        assert state == p.skip(p.init(), n)[0]
    f = filtered(num_epochs=2)
    state, passed = f.advance(f.init(), 2**36)  # not past the limit: to the stream's end
    assert passed == Passed(10, 10, 1) and not len(f.next(state, 1)[1])
    with pytest.raises(ConfigError) as e:
        f.advance(f.init(), 2**36 + 1)
    assert str(e.value) == (
        "passing 68,719,476,737 outputs of plan step 'filter' (it cannot count them, nor its "
        "end) one at a time is refused (at most 2**36, 68,719,476,736: hours of CPU already); a "
        "run that far is resumed from its saved state (loader.load_state_dict), not recomputed "
        "from the start"
    )


def test_a_count_past_64_bits_is_refused():
    import pytest

    from fpipe.core.advance import check_state_int
    from fpipe.core.errors import ConfigError

    check_state_int(2**63 - 1, "the position")  # the largest a state holds
    with pytest.raises(ConfigError) as e:
        check_state_int(2**63, "the position")
    assert str(e.value) == (
        "the position would reach 9,223,372,036,854,775,808, past the 2**63 a plan state "
        "holds: no run of this plan gets there"
    )
