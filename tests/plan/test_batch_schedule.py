"""Global batch size schedules: Megatron's ramp-up step for step, the table, distribute and
batch over changing sizes (coverage, exact and elastic resume), and what a restore refuses."""

from __future__ import annotations

import random

import numpy as np
import pytest

from fpipe.core import Pipeline, chain
from fpipe.core.errors import ConfigError, SnapshotMismatchError
from fpipe.core.testing import assert_exact_resume, run
from fpipe.plan import (
    BatchSchedule,
    batch,
    distribute,
    pack,
    repeat,
    samples,
    slice_shuffle,
    window_shuffle,
)


def megatron_sizes(start, increment, ramp_samples, final, steps):
    """The global batch size of each step, as Megatron-LM's RampupBatchsizeNumMicroBatches
    computes it before each step from the samples consumed so far."""
    per = ramp_samples / ((final - start) // increment)
    consumed, out = 0, []
    for _ in range(steps):
        size = final if consumed > ramp_samples else start + int(consumed / per) * increment
        out.append(size)
        consumed += size
    return out


def test_rampup_is_megatrons_step_for_step():
    r = random.Random(0)
    # (1, 1, 232, 8): the samples consumed reach 232 exactly, where Megatron's float division
    # gives 7, not the final 8
    cases = [(32, 32, 10_000, 256), (16, 16, 5_859_375, 1536), (1, 1, 100, 7), (1, 1, 232, 8)]
    for _ in range(200):
        start, inc = r.randint(1, 64), r.randint(1, 64)
        cases.append((start, inc, r.randint(1, 50_000), start + inc * r.randint(1, 20)))
    for start, inc, ramp, final in cases:
        s = BatchSchedule.rampup(start, inc, ramp, final=final)
        ref = megatron_sizes(start, inc, ramp, final, s.steps[-1] + 5)
        assert [s.size_at(i) for i in range(len(ref))] == ref
        assert s.refs_before(len(ref)) == sum(ref)
        assert s.sizes[-1] == final and len(s.sizes) <= (final - start) // inc + 1


def test_rampup_beyond_float_precision_changes_size_where_megatron_does():
    # Ramp-up sample counts above 2**53, where Megatron's float division rounds neighbouring
    # counts alike: too many steps to replay, so check each change of size: the step before it
    # still has the old size and the step itself the new one, by Megatron's formula.
    cases = [(1, 1, 53_674_917_024_482_883, 2), (1, 3, 1_089_668_028_955_637_996, 13)]
    for start, inc, ramp, final in cases:
        per = ramp / ((final - start) // inc)

        def megatron(consumed, ramp=ramp, per=per, start=start, inc=inc, final=final):
            return final if consumed > ramp else start + int(consumed / per) * inc

        s = BatchSchedule.rampup(start, inc, ramp, final=final)
        assert s.sizes == tuple(range(start, final + 1, inc))
        for j in range(1, len(s.steps)):
            assert megatron(s.refs_before(s.steps[j] - 1)) == s.sizes[j - 1]
            assert megatron(s.refs_before(s.steps[j])) == s.sizes[j]


def test_table_and_errors():
    s = BatchSchedule.of({0: 8, 10: 16, 20: 16, 30: 32})
    assert s.steps == (0, 10, 30) and s.sizes == (8, 16, 32)
    assert BatchSchedule.of([(0, 4), (2, 8)]).refs_before(3) == 16
    assert s.per_rank(4).sizes == (2, 4, 8)
    with pytest.raises(ConfigError, match="from step 10 of the schedule"):
        BatchSchedule.of({0: 8, 10: 12}).per_rank(8)
    with pytest.raises(ConfigError, match="from step 0"):
        BatchSchedule.of({5: 8})
    with pytest.raises(ConfigError, match="whole number of increments"):
        BatchSchedule.rampup(32, 30, 1000, final=256)
    assert BatchSchedule.rampup(64, 32, 1000, final=64).sizes == (64,)
    assert BatchSchedule.rampup(8, 8, 0, final=32).sizes == (32,)  # no samples: no ramp


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: BatchSchedule(steps=(0, 5, 5), sizes=(1, 2, 3)), r"must increase: \(0, 5, 5\)"),
        (lambda: BatchSchedule(steps=(0, 3, 2), sizes=(1, 2, 3)), r"must increase: \(0, 3, 2\)"),
        (lambda: BatchSchedule(steps=(0, 5), sizes=(4, 0)), r"integers >= 1; step 5: 0"),
        (lambda: BatchSchedule(steps=(0,), sizes=(2.5,)), r"integers >= 1; step 0: 2.5"),
        (lambda: BatchSchedule.of({0: True}), r"at step 0 must be an integer, got True"),
        (lambda: BatchSchedule.of(5), r"\{step: size\} or \[\(step, size\), ...\], got 5"),
        (lambda: BatchSchedule.of({0: 8}).per_rank(3), r"must divide by every world size"),
        (lambda: BatchSchedule.rampup(0, 8, 100, final=16), r"start must be .* >= 1, got 0"),
        (lambda: BatchSchedule.rampup(8, 0, 100, final=16), r"increment must be .* >= 1, got 0"),
        (lambda: BatchSchedule.rampup(8, 8, 100, final=0), r"final must be .* >= 1, got 0"),
        (lambda: BatchSchedule.rampup(8, 8, -1, final=16), r"samples must be .* >= 0: -1"),
    ],
)
def test_bad_schedules_are_refused_saying_what_is_wrong(make, match):
    with pytest.raises(ConfigError, match=match):
        make()


SCHEDULE = BatchSchedule.of({0: 8, 3: 16, 7: 32})


def plan(rank, world, *, n=300, schedule=SCHEDULE, drop_last=False, epochs=1, packs=False):
    """The plan of rank ``rank`` of ``world``; ``schedule`` an int: one global batch size."""
    view = slice_shuffle(samples(n, columns={"tokens": 1 + np.arange(n) % 5}), 5)
    stages = [window_shuffle(16)]
    if packs:
        stages.append(pack({"tokens": 6}, strategy="ffd", packing_buffer_size=24))
    per_rank = schedule // world if isinstance(schedule, int) else schedule.per_rank(world)
    stages += [
        distribute(schedule, rank=rank, world_size=world, drop_last=drop_last),
        batch(per_rank, drop_last=drop_last),
    ]
    return Pipeline(chain(repeat(view, epochs), *stages), seed=3)


def indices(recipes):
    return [i for r in recipes for i in r.refs.index.tolist()]


@pytest.mark.parametrize("world", [1, 2, 4])
def test_every_sample_once_and_sizes_follow_the_schedule(world):
    outs = [run(plan(r, world))[1] for r in range(world)]
    assert sorted(i for o in outs for i in indices(o)) == list(range(300))
    full = [sum(len(o[s].refs) for o in outs) for s in range(len(outs[0]) - 1)]
    assert full == [SCHEDULE.size_at(s) for s in range(len(full))]
    assert all(r.step == s for o in outs for s, r in enumerate(o))


def test_exact_resume_at_every_step_with_packs():
    assert_exact_resume(lambda: plan(1, 2, epochs=2), list(range(0, 30, 3)))
    assert_exact_resume(lambda: plan(0, 2, packs=True), [0, 2, 5, 9])


def test_restore_on_another_world_size_keeps_coverage():
    seen = []
    for r in range(4):
        p = plan(r, 4)
        state, out = run(p, limit=5)
        seen += indices(out)
    snap = p.snapshot(state)
    for r in range(2):
        p = plan(r, 2)
        _, out = run(p, p.restore(snap))
        seen += indices(out)
        assert [len(x.refs) for x in out[:4]] == [8, 8, 16, 16]  # steps 5, 6, then 32 / 2
    assert sorted(seen) == list(range(300))


def test_fixed_and_scheduled_runs_do_not_restore_into_each_other():
    fixed = plan(0, 1, schedule=8)
    state, _ = run(fixed, limit=2)
    with pytest.raises(SnapshotMismatchError, match="kind of batch size the run started with"):
        plan(0, 1).restore(fixed.snapshot(state))
    other = BatchSchedule.of({0: 8, 4: 64})  # a schedule may change: it is compatible
    p = plan(0, 1)
    state, _ = run(p, limit=2)
    q = plan(0, 1, schedule=other)
    _, out = run(q, q.restore(p.snapshot(state)), limit=3)
    assert [len(r.refs) for r in out] == [8, 8, 64]
