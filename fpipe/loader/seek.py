"""Seek: the plan state before a global step, with the loader's counters, from the plan alone.

:func:`seek_state` passes over the steps on metadata (on counts where the plan's steps can,
planned one by one where they cannot, nothing read) and applies each online weight change
before its step, as the live loader did (:mod:`fpipe.loader.blend_changes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fpipe.core.advance import advance_by_next
from fpipe.core.errors import ConfigError
from fpipe.core.pipeline import Pipeline
from fpipe.loader.blend_changes import _apply_due
from fpipe.loader.mix_history import MixChange
from fpipe.loader.rank_epoch import answers_rank_epoch, rank_epoch_on_counts
from fpipe.plan.skip import StepRanges, skip_end

__all__ = ["seek_state"]


def seek_state(
    plan: Pipeline,
    target: int,
    ranges: StepRanges,
    changes: Sequence[MixChange],
    *,
    fast: bool = True,
    planned: int | None = None,
) -> tuple[Any, int, int, int]:
    """``(plan state before step target, batches, samples, epoch)``: what a loader that took
    every step before ``target`` holds, from the plan alone. Steps are passed over on metadata
    (:meth:`fpipe.core.Pipeline.advance`: on counts where the plan's steps can, a whole
    range of steps at once; else planned, their refs counted, nothing read); each change is
    applied before its step. ``fast=False`` plans every step (the reference the fast path is
    tested against). ``planned``: how many of the last steps are planned one by one (None:
    enough to hold about 64 of this rank's refs, at least one); any number gives the same
    result, only the time differs."""
    if not fast:
        return _seek_by_next(plan, target, ranges, changes)
    if not ranges and not changes and answers_rank_epoch(plan):
        # every step on counts, which also say which refs this rank got (a quota blend):
        # nothing planned
        state, batches, samples, known = _seek_on_counts(plan, target, ranges, changes)
        if known is None:
            known = rank_epoch_on_counts(plan, target, state, 0)
        assert known is not None  # answers_rank_epoch: it answers
        return state, batches, samples, known
    # on counts up to the last steps, which are planned: they give this rank's highest epoch
    # when the counts cannot (a rank's part of global batches)
    start = max(0, target - (_planned_steps(plan) if planned is None else max(1, planned)))
    state, batches, samples, epoch = _seek_on_counts(plan, start, ranges, changes, target)
    before = plan.position(state) if start else (0, 0)
    i = sum(c.step <= start for c in changes)  # those _seek_on_counts applied
    state, more, more_samples, recent = _seek_by_next(
        plan, target, ranges, changes, state, start, i
    )
    if epoch is not None:
        epoch = max(epoch, recent)
    elif before is not None and recent >= before[0]:
        epoch = recent  # the global highest epoch before the last steps bounds this rank's
    else:
        epoch = _rank_epoch(plan, target, ranges, changes, start, recent)
    return state, batches + more, samples + more_samples, epoch


def _planned_steps(plan: Pipeline) -> int:
    """Steps a seek plans at its end (the rest it passes on counts where the plan can): enough
    to hold about 64 refs of this rank, at least one. They only have to show this rank's
    highest epoch, and each costs a whole global batch (every rank plans all of it: 131,072
    refs at 32 per rank on 4,096 ranks), so few: past an epoch's edge a rank's refs are of
    the new epoch within a window, and where they are not yet, :func:`_rank_epoch` plans
    further back (a plan whose counts say it plans none:
    :func:`~fpipe.loader.rank_epoch.rank_epoch_on_counts`)."""
    _, out = plan.next(plan.init(), 1)
    first = len(out[0].refs) if len(out) and hasattr(out[0], "refs") else 0
    return max(1, -(-64 // max(1, first)))


def _rank_epoch(
    plan: Pipeline,
    target: int,
    ranges: StepRanges,
    changes: Sequence[MixChange],
    planned: int,
    recent: int,
) -> int:
    """The highest epoch of this rank's steps before ``target`` when the counts could not say
    (a rank's part of global batches), given ``recent``, that of steps ``planned..target-1``:
    the steps before ``planned`` are planned, back to ``target - 4 * (target - planned)``,
    then 4 times as far each time, until the steps planned hold an epoch at least the global
    one before them (the distribution's ``epoch``, the highest of any ref handed to any rank),
    which bounds every earlier step. The states where each walk back starts come from one
    pass on counts, and no step is planned twice."""
    starts: list[int] = []
    span = 4 * (target - planned)
    while not starts or starts[-1]:
        starts.append(max(0, target - span))
        span *= 4
    states = _on_counts(plan, starts[::-1], ranges, changes, target)[::-1]
    for start, (state, *_) in zip(starts, states):
        before = plan.position(state) if start else (0, 0)
        if before is None:  # no global position to bound the earlier steps: plan them all
            return _seek_by_next(plan, target, ranges, changes)[3]
        i = sum(c.step <= start for c in changes)  # those _on_counts applied
        older = _seek_by_next(plan, planned, ranges, changes, state, start, i)[3]
        recent, planned = max(recent, older), start
        if recent >= before[0] or start == 0:
            return recent
    raise AssertionError("the walk back ends at step 0")  # starts ends with 0


def _seek_on_counts(
    plan: Pipeline,
    target: int,
    ranges: StepRanges,
    changes: Sequence[MixChange],
    asked: int | None = None,
) -> tuple[Any, int, int, int | None]:
    """:func:`seek_state` with :meth:`fpipe.core.Pipeline.advance`; the epoch is None when
    the counts cannot say it. ``asked``: the step the caller seeks (for the error message)."""
    return _on_counts(plan, (target,), ranges, changes, asked)[0]


def _on_counts(
    plan: Pipeline,
    targets: Sequence[int],
    ranges: StepRanges,
    changes: Sequence[MixChange],
    asked: int | None = None,
) -> list[tuple[Any, int, int, int | None]]:
    """:func:`_seek_on_counts` to each of ``targets`` (ascending), in one pass."""
    state = plan.init()
    step, i = 0, 0
    batches = samples = 0
    epoch: int | None = 0
    out = []
    for target in targets:
        while step < target:
            state, i = _apply_due(plan, state, step, changes, i)
            stop, skipped = _run_end(step, target, ranges, changes, i)
            state, got = plan.advance(state, stop - step)
            if got.steps < stop - step:
                raise ConfigError(
                    f"step {asked or target} is past the end of the stream ({step + got.steps})"
                )
            if not skipped:  # delivered steps: the loader counts them
                batches += got.outputs
                samples += got.refs
                epoch = None if epoch is None or got.epoch is None else max(epoch, got.epoch)
            step = stop
        state, i = _apply_due(plan, state, step, changes, i)
        out.append((state, batches, samples, epoch))
    return out


def _run_end(
    step: int, target: int, ranges: StepRanges, changes: Sequence[MixChange], i: int
) -> tuple[int, bool]:
    """Where the run of steps from ``step`` that a seek passes at once ends (before
    ``target``, the next change ``changes[i]`` and the next skip range's edge), and whether
    its steps are skipped ones."""
    stop = target if i == len(changes) else min(target, changes[i].step)
    end = skip_end(step, ranges) if ranges else None
    if end is not None:
        return min(stop, end), True
    for a, _ in ranges:
        if a > step:
            return min(stop, a), False
    return stop, False


def _seek_by_next(
    plan: Pipeline,
    target: int,
    ranges: StepRanges,
    changes: Sequence[MixChange],
    state: Any = None,
    step: int = 0,
    i: int = 0,
) -> tuple[Any, int, int, int]:
    """:func:`seek_state` planning every delivered step (from ``state`` before ``step``, with
    the first ``i`` changes applied; the counters then count from there). Steps are counted
    as :func:`~fpipe.core.advance.advance_by_next` counts them, a step that holds nothing for
    this rank included, so the seek stops at the same step on every rank."""
    state = plan.init() if state is None else state
    batches = samples = epoch = 0
    while step < target:
        state, i = _apply_due(plan, state, step, changes, i)
        stop, skipped = _run_end(step, target, ranges, changes, i)
        if skipped:
            state, passed = plan.skip(state, stop - step)
        else:
            state, got = advance_by_next(plan.source, state, stop - step, bounded=True)
            batches += got.outputs
            samples += got.refs
            epoch = max(epoch, got.epoch or 0)
            passed = got.steps
        if passed < stop - step:
            raise ConfigError(f"step {target} is past the end of the stream ({step + passed})")
        step = stop
    state, i = _apply_due(plan, state, step, changes, i)
    return state, batches, samples, epoch
