"""``distribute`` and ``per_rank`` as documented (docs/distributed.md, docs/plan.md):

* global mode: rank r takes refs ``[r * b, (r + 1) * b)`` of each global batch (``b`` = global
  batch size / world size), of refs or of packs; a short last global batch is dropped on every
  rank alike and counted (``drop_last=True``) or split as evenly as possible over the ranks in
  rank order (``drop_last=False``); a schedule gives the global batch size of each step;
* the state is the same on every rank: refs taken, refs dropped, the highest epoch of any ref
  handed out to any rank (and the step, with a schedule); ``advance`` on counts reaches the
  state the steps reach;
* per-rank mode: rank r reads positions ``[r * n // world, (r + 1) * n // world)``;
* bad arguments are refused with a ConfigError that says what is needed.
"""

import numpy as np
import pytest

from fpipe.core import ConfigError, Pipeline, Refs, SnapshotMismatchError, chain
from fpipe.core.advance import Passed
from fpipe.core.testing import run
from fpipe.plan import (
    BatchSchedule,
    batch,
    distribute,
    in_memory,
    per_rank,
    repeat,
    samples,
    slice_shuffle,
)

SCHEDULE = BatchSchedule.of({0: 4, 2: 8})  # global batch 4 at steps 0 and 1, then 8


def refs(n, start=0, epoch=0):
    return Refs.of(index=np.arange(start, start + n), epoch=epoch)


def fixed(world, rank=0, gbs=None, drop_last=True):
    return distribute(gbs or 2 * world, rank=rank, world_size=world, drop_last=drop_last)


def scheduled(world, rank=0, drop_last=True):
    return distribute(SCHEDULE, rank=rank, world_size=world, drop_last=drop_last)


def step(stage, chunk, state=None):
    return stage.step(stage.init(0) if state is None else state, chunk)


# -- which refs a rank gets ------------------------------------------------------------------


@pytest.mark.parametrize("world", [1, 2, 3])
def test_each_rank_takes_its_slice_of_a_full_global_batch(world):
    chunk = refs(2 * world, start=10)
    parts = [step(fixed(world, r), chunk)[1].index.tolist() for r in range(world)]
    assert parts == [[10 + 2 * r, 11 + 2 * r] for r in range(world)]


@pytest.mark.parametrize("world", [1, 2])
def test_scheduled_ranks_take_their_slice_at_each_steps_size(world):
    """Steps 0 and 1 are global batches of 4, step 2 one of 8: a rank's slice follows."""
    for rank in range(world):
        stage, state, start = scheduled(world, rank), None, 0
        for size in (4, 4, 8):
            state, out = step(stage, refs(size, start), state)
            b = size // world
            assert out.index.tolist() == list(range(start + rank * b, start + (rank + 1) * b))
            start += size
        assert (state.step, state.taken, state.dropped) == (3, 16, 0)


def test_a_rank_takes_whole_packs():
    """After packing the items are groups of refs: a rank takes its packs, the state counts
    their refs and the highest epoch among all of them."""
    packs = (refs(3), refs(1, 3), refs(2, 4, epoch=1), refs(4, 6))
    for make in (lambda r: fixed(2, r, gbs=4), lambda r: scheduled(2, r)):
        outs = [step(make(r), packs) for r in range(2)]
        assert [[len(p) for p in out] for _, out in outs] == [[3, 1], [2, 4]]
        assert all((s.taken, s.epoch) == (10, 1) for s, _ in outs)


def test_empty_groups_and_empty_chunks_hand_out_nothing():
    """A group of no refs among the packs counts nothing; an empty chunk leaves the state."""
    packs = (refs(2, epoch=1), (), refs(3, 2, epoch=2), refs(1, 5))
    for stage in (fixed(1, gbs=4), scheduled(1)):
        state, out = step(stage, packs)
        assert out == packs and (state.taken, state.epoch) == (6, 2)
    for stage in (fixed(2, drop_last=False), scheduled(2, drop_last=False)):
        for empty in ((), refs(0)):
            state, out = step(stage, empty)
            assert len(out) == 0 and (state.taken, state.epoch, state.dropped) == (0, 0, 0)


# -- the short last global batch ----------------------------------------------------------------


@pytest.mark.parametrize("make", [fixed, scheduled])
def test_short_last_batch_is_dropped_on_every_rank_and_counted(make):
    for rank in range(2):
        stage = make(2, rank)
        state, out = step(stage, refs(4))  # a full batch is not dropped
        assert len(out) == 2 and state.dropped == 0
        state, out = step(stage, refs(3, 4, epoch=5), state)
        assert len(out) == 0
        assert (state.dropped, state.taken, state.epoch) == (3, 4, 0)  # dropped: not handed out
        assert getattr(state, "step", 1) == 1  # the dropped batch is no step
        assert stage.stats(state) == {"global_remainder": 3}


@pytest.mark.parametrize("make", [fixed, scheduled])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_short_last_batch_is_split_as_evenly_as_possible(make, world):
    """drop_last=False: the ranks' parts, in rank order, are the short batch; their sizes differ
    by at most one (some ranks get none when it is shorter than the world size)."""
    full = 2 * world if make is fixed else 4
    for n in range(full if make is fixed else 4):
        if make is scheduled and 4 % world:
            continue
        chunk = refs(n, 100)
        parts, states = [], []
        for rank in range(world):
            state, out = step(make(world, rank, drop_last=False), chunk)
            parts.append(out.index.tolist())
            states.append(state)
        assert sum(parts, []) == list(range(100, 100 + n)), (n, parts)
        sizes = [len(p) for p in parts]
        assert max(sizes) - min(sizes) <= 1, (n, sizes)
        assert all((s.taken, s.dropped) == (n, 0) for s in states)
        if make is scheduled:
            assert all(s.step == 1 for s in states)  # a short batch kept is a step


# -- the highest epoch, the same on every rank -------------------------------------------------


@pytest.mark.parametrize("make", [fixed, scheduled])
def test_epoch_is_the_highest_handed_out_to_any_rank_and_never_goes_back(make):
    for rank in range(2):
        stage = make(2, rank)
        state, out = step(stage, Refs.of(index=np.arange(4), epoch=[1, 1, 2, 1]))
        assert state.epoch == 2  # rank 0's refs are of epoch 1 only
        state, _ = step(stage, refs(4, 4, epoch=1), state)
        assert state.epoch == 2 and state.taken == 8
        assert stage.position(state) == (2, 8)


# -- pipelines: stats, position, describe, snapshots ---------------------------------------------


def plan(stage, n=23, epochs=1):
    return Pipeline(chain(repeat(in_memory(refs(n)), epochs), stage), 0)


def test_pipeline_reports_position_and_dropped_under_the_step_name():
    p = plan(distribute(6, rank=1, world_size=3, name="dist"), n=23, epochs=2)
    state, out = run(p)
    assert len(out) == 2 * 7  # 46 refs: 7 global batches of 6 (2 each), 4 dropped
    assert p.stats(state)["dist"] == {"global_remainder": 4}
    assert p.position(state) == (1, 42)
    p = plan(distribute(SCHEDULE, world_size=2, name="ramp"), n=23)  # 4 + 4 + 8, 7 dropped
    state, out = run(p)
    assert len(out) == 2 + 2 + 4
    assert p.stats(state)["ramp"] == {"global_remainder": 7}
    assert p.position(state) == (0, 16) and p.position(p.init()) == (0, 0)


def test_describe_names_what_each_rank_takes():
    p = plan(distribute(6, rank=1, world_size=3, drop_last=False))
    d = p.describe()[-1]
    assert (d["type"], d["global_batch_size"], d["rank"], d["world_size"]) == (
        "DistributeConfig",
        6,
        1,
        3,
    )
    assert d["remainder"] == "keep"
    p = plan(distribute(SCHEDULE, rank=1, world_size=2))
    d = p.describe()[-1]
    assert (d["type"], d["rank"], d["world_size"], d["remainder"]) == (
        "ScheduledDistributeConfig",
        1,
        2,
        "drop",
    )
    assert d["name"] == "distribute"
    assert d["schedule"] == ["BatchSchedule", {"steps": [0, 2], "sizes": [4, 8]}]
    d = Pipeline(chain(repeat(per_rank(samples(20), rank=1, world_size=3)), batch(2)), 0)
    names = [(s["name"], s.get("rank"), s.get("world_size")) for s in d.describe()]
    assert names[1:3] == [("samples", None, None), ("per_rank", 1, 3)]


@pytest.mark.parametrize("gbs", [6, SCHEDULE])
def test_snapshot_restores_the_state_and_continues_on_another_world_size(gbs):
    """The state after some steps round-trips; at a global batch boundary it restores on
    another world size (and rank), continuing from the first ref not yet consumed."""
    world2 = 3 if gbs == 6 else 4
    p = plan(distribute(gbs, rank=1, world_size=2), n=30, epochs=2)
    state, out = run(p, limit=9 if gbs == 6 else 8)  # 3 steps: a global batch boundary
    assert p.restore(p.snapshot(state)) == state
    q = plan(distribute(gbs, rank=2, world_size=world2), n=30, epochs=2)
    restored = q.restore(p.snapshot(state))
    assert q.position(restored) == p.position(state)
    taken = p.position(state)[1]
    b = (gbs if gbs == 6 else SCHEDULE.size_at(state.st.step)) // world2
    _, rest = run(q, restored, limit=b)
    assert [int(r.index[0]) for r in rest] == [(taken + 2 * b + i) % 30 for i in range(b)]


def test_a_snapshot_does_not_restore_under_the_other_remainder_rule():
    keep = plan(distribute(6, world_size=2, drop_last=False))
    drop = plan(distribute(6, world_size=2))
    with pytest.raises(SnapshotMismatchError, match="remainder"):
        drop.restore(keep.snapshot(keep.init()))


# -- advance on counts --------------------------------------------------------------------------


def by_steps(stage, state, blocks, epoch=0):
    """The state ``blocks`` whole global batches reach by ``step``, and what they emit."""
    emitted = Passed()
    for _ in range(blocks):
        size = stage.block_size(state) if callable(stage.block_size) else stage.block_size
        state, out = stage.step(state, refs(size, epoch=epoch))
        emitted = emitted + Passed(len(out), len(out), epoch)
    return state, emitted


@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("make", [fixed, scheduled])
def test_advance_on_counts_reaches_the_state_of_the_steps(make, world):
    stage = make(world, world - 1)
    adv = stage.advance
    state, _ = by_steps(stage, stage.init(0), 1, epoch=3)  # a state past the start
    blocks = 1 if make is scheduled else 3  # the schedule keeps size 4 for 1 more step
    if make is scheduled:
        assert adv.span(state) == 1 and adv.span(by_steps(stage, state, 1)[0]) is None
    per = adv.outputs(state) if callable(adv.outputs) else adv.outputs
    size = stage.block_size(state) if callable(stage.block_size) else stage.block_size
    assert per == size // world
    got = adv.run(state, blocks, Passed(blocks * size, blocks * size, 1))
    want_state, want = by_steps(stage, state, blocks, epoch=1)
    assert got[0] == want_state and got[0].epoch == 3  # the epoch never goes back
    # one rank's part: its highest epoch is unknown from counts
    assert got[1] == (want if world == 1 else Passed(want.outputs, want.refs, None))


@pytest.mark.parametrize("make", [fixed, scheduled])
def test_advance_leaves_what_counts_cannot_say_to_the_steps(make):
    for world in (1, 2):
        state = make(world).init(0)
        assert make(world).advance.run(state, 1, Passed(4, 4, None)) is None
    # packs: a rank's refs depend on its packs' sizes, one rank takes them all
    assert make(2).advance.run(state, 1, Passed(4, 9, 0)) is None
    one = make(1) if make is scheduled else make(1, gbs=4)
    new, passed = one.advance.run(state, 1, Passed(4, 9, 2))
    assert passed == Passed(4, 9, 2) and (new.taken, new.epoch) == (9, 2)


# -- per-rank mode ------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "world"), [(10, 3), (3, 3), (7, 1), (9, 4)])
def test_per_rank_parts_are_contiguous_and_differ_by_at_most_one(n, world):
    parts = []
    for rank in range(world):
        v = per_rank(samples(n), rank=rank, world_size=world)
        parts.append(v.gather(0, 0, np.arange(v.size)).index.tolist())
        assert parts[-1] == list(range(rank * n // world, (rank + 1) * n // world))
    assert sum(parts, []) == list(range(n))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_per_rank_reaches_past_2_31_whatever_integer_type_the_positions_have():
    v = per_rank(samples(5 * 2**30), rank=1, world_size=2)
    for positions in ([0, 1], np.array([0, 1], dtype=np.int32), np.array([0, 1], np.uint8)):
        assert v.gather(0, 0, positions).index.tolist() == [5 * 2**29, 5 * 2**29 + 1]


def test_per_rank_reads_the_wrapped_view_at_its_own_positions():
    """Over any view (here a shuffled one, whose order depends on the key): the part is the
    view's positions from ``rank * n // world_size`` on, under the same key and epoch."""
    view = slice_shuffle(samples(20), 3)
    part = per_rank(view, rank=1, world_size=2)
    for root, epoch in ((1, 0), (2, 0), (1, 1)):
        got = part.gather(root, epoch, np.arange(10)).index.tolist()
        assert got == view.gather(root, epoch, np.arange(10, 20)).index.tolist()
    orders = {tuple(part.gather(root, 0, np.arange(10)).index.tolist()) for root in (1, 2)}
    assert len(orders) == 2  # the key reaches the wrapped view


def test_per_rank_snapshot_belongs_to_its_rank():
    def make(rank):
        return Pipeline(chain(repeat(per_rank(samples(20), rank=rank, world_size=2)), batch(2)), 1)

    with pytest.raises(SnapshotMismatchError, match="rank"):
        make(1).restore(make(0).snapshot(make(0).init()))


# -- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: distribute(4, rank=2, world_size=2), "rank=2, world_size=2"),
        (lambda: distribute(4, rank=-1, world_size=2), "rank=-1, world_size=2"),
        (lambda: distribute(4, rank=0, world_size=0), "rank=0, world_size=0"),
        (lambda: distribute(SCHEDULE, rank=3, world_size=2), "rank=3, world_size=2"),
        (lambda: per_rank(samples(8), rank=2, world_size=2), "rank=2, world_size=2"),
        (lambda: per_rank(samples(8), rank=-1, world_size=2), "rank=-1, world_size=2"),
        (lambda: per_rank(samples(8), rank=0, world_size=0), "rank=0, world_size=0"),
    ],
)
def test_a_rank_outside_the_world_is_refused(make, message):
    with pytest.raises(ConfigError) as e:
        make()
    assert str(e.value) == f"need 0 <= rank < world_size, got {message}"


@pytest.mark.parametrize(("gbs", "world"), [(10, 3), (0, 2), (-4, 2)])
def test_a_global_batch_size_the_ranks_cannot_share_is_refused(gbs, world):
    with pytest.raises(ConfigError) as e:
        distribute(gbs, world_size=world)
    assert str(e.value) == (
        f"global batch size {gbs} must be a positive multiple of the world size {world} "
        "(per-rank batch = global / world size)"
    )


def test_smallest_arguments_are_accepted():
    assert step(distribute(1), refs(1))[1].index.tolist() == [0]
    assert step(distribute(3, rank=2, world_size=3), refs(3))[1].index.tolist() == [2]
    assert per_rank(samples(2), rank=1, world_size=2).size == 1


def test_a_schedule_size_the_ranks_cannot_share_is_refused():
    with pytest.raises(ConfigError, match=r"size 6 \(from step 2 of the schedule\).*world size 4"):
        distribute(BatchSchedule.of({0: 4, 2: 6}), world_size=4)


def test_per_rank_needs_a_sample_per_rank():
    with pytest.raises(ConfigError) as e:
        per_rank(samples(2), rank=0, world_size=3)
    assert str(e.value) == ("per-rank mode needs at least one sample per rank: 2 samples, 3 ranks")
