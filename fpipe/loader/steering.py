"""Steering from the loader: the steered plan, and the steering names in one place.

:func:`planned_recipes` and :class:`SteeredPlan` step through a plan with online weight
changes applied before their steps. The rest of steering lives in modules of their own, whose
names are re-exported here: the changes and their history as data
(:mod:`fpipe.loader.mix_history`), a change applied to the blend's state
(:mod:`fpipe.loader.blend_changes`) and seek (:mod:`fpipe.loader.seek`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fpipe.core.pipeline import Pipeline
from fpipe.loader.blend_changes import _apply_due, apply_change, blend_of, next_step, state_mix
from fpipe.loader.mix_history import MixChange, MixHistory, check_ranks_agree, resolve_weights
from fpipe.loader.seek import seek_state
from fpipe.plan.skip import StepRanges, skip_end

__all__ = [
    "MixChange",
    "MixHistory",
    "SteeredPlan",
    "apply_change",
    "blend_of",
    "check_ranks_agree",
    "next_step",
    "planned_recipes",
    "resolve_weights",
    "seek_state",
    "state_mix",
]


def planned_recipes(plan: Pipeline, state: Any, ranges: StepRanges, changes: Sequence[MixChange]):
    """``(state after, recipe)`` for every recipe no range skips, from ``state`` on, with each
    change applied before its step, then ``(end-of-stream state, None)``. Steps count by one
    per recipe (as a batch step's do)."""
    step, i = next_step(plan, state), 0
    while True:
        state, i = _apply_due(plan, state, step, changes, i)
        end = skip_end(step, ranges) if ranges else None
        if end is not None:  # skipped steps, up to the next change at most
            if i < len(changes):
                end = min(end, changes[i].step)
            state, passed = plan.skip(state, end - step)
            if passed < end - step:
                state, _ = plan.next(state, 1)
                yield state, None
                return
            step = end
            continue
        state, out = plan.next(state, 1)
        if not len(out):
            yield state, None
            return
        recipe = out[0]
        step = recipe.step + 1
        state, i = _apply_due(plan, state, step, changes, i)
        yield state, recipe


class SteeredPlan:
    """A plan whose ``init`` and ``next`` apply online weight ``changes`` before their steps
    (what ``fpipe plan --mix-history`` steps through); every other attribute is the plan's.
    Steps count by one per recipe."""

    def __init__(self, plan: Pipeline, changes: Sequence[MixChange]):
        self.plan, self.changes = plan, tuple(changes)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.plan, name)

    def _due(self, state: Any, step: int) -> Any:
        for change in self.changes:
            if change.step == step:
                state = apply_change(self.plan, state, change)
        return state

    def init(self) -> Any:
        """The plan's first state, with the changes of step 0."""
        return self._due(self.plan.init(), 0)

    def advance(self, state: Any, n: int) -> tuple[Any, Any]:
        """The state ``next`` reaches after ``n`` recipes, and what they held
        (:class:`fpipe.core.advance.Passed`): the plan's own advance over each run of steps
        between two changes, each change applied before its step. (Delegating ``advance`` to
        the plan, as every other attribute is, would pass over the changes.)"""
        from fpipe.core.advance import Passed

        step = next_step(self.plan, state)
        passed = Passed()
        if n <= 0:
            return state, passed
        target = step + n
        i = sum(c.step <= step for c in self.changes)  # applied with the state's own step
        while step < target:
            stop = target if i == len(self.changes) else min(target, self.changes[i].step)
            state, got = self.plan.advance(state, stop - step)
            passed = passed + got
            if got.steps < stop - step:
                break
            step = stop
            state, i = _apply_due(self.plan, state, step, self.changes, i)
        return state, passed

    def next(self, state: Any, n: int = 1) -> tuple[Any, tuple]:
        """Up to ``n`` recipes, one step at a time, each followed by the next step's changes."""
        out: list = []
        while len(out) < n:
            state, got = self.plan.next(state, 1)
            if not len(got):
                break
            out.append(got[0])
            state = self._due(state, got[0].step + 1)
        return state, tuple(out)
