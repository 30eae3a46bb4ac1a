"""Steering from the loader: blend weights changed online, their history, and seek.

A change ``(step, weights)`` is applied to the plan state *before* global step ``step`` (the
state after step ``step - 1``): :func:`apply_change` finds the blend's frontier there (see
:mod:`fpipe.plan.online_mix`) and records the change in the blend's state. The live loader,
a replay of the history and :func:`seek_state` all apply a change at the same state, so they
reach the same states, byte for byte.

The history is plain data (:class:`MixHistory`, saved beside a checkpoint as JSON): the
dataset names and every change in order. The state keeps only its digest, so the history is
what a seek from step 0 needs when weights were changed online.

Example:
    >>> h = MixHistory(datasets=("a", "b"), changes=(MixChange(10, (1.0, 3.0)),))
    >>> MixHistory.of(h.to_dict()) == h, len(h.digest())
    (True, 8)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec
import numpy as np

from fpipe.core.advance import advance_by_next
from fpipe.core.errors import ConfigError
from fpipe.core.pipeline import Pipeline
from fpipe.plan.blend import BlendConfig, online_mix, with_online_change
from fpipe.plan.online_mix import (
    EMPTY_DIGEST,
    chain_digest,
    drawn_state,
    entry_weights,
    replace_step_state,
    weights32,
)
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

HISTORY_FORMAT = "fpipe-mix-history"


class MixChange(msgspec.Struct, frozen=True, array_like=True):
    """Weights (one per dataset, float32 values) in force from global step ``step`` on."""

    step: int
    weights: tuple[float, ...]

    @property
    def raw(self) -> bytes:
        """The float32 bytes the blend stores."""
        return weights32(self.weights)


class MixHistory(msgspec.Struct, frozen=True):
    """Every online change of a run, in order: what :meth:`fpipe.loader.Loader.mix_history`
    returns as a dict (``to_dict``) and ``Loader.load_mix_history`` / ``seek`` read back."""

    datasets: tuple[str, ...]
    changes: tuple[MixChange, ...] = ()

    def digest(self, count: int | None = None) -> bytes:
        """The 8-byte digest of the first ``count`` changes (all by default), as the blend's
        state records it."""
        d = EMPTY_DIGEST
        for c in self.changes[:count]:
            d = chain_digest(d, c.step, c.raw)
        return d

    def to_dict(self) -> dict:
        """Plain data (JSON-ready): format, dataset names, changes with weights by name."""
        return {
            "format": HISTORY_FORMAT,
            "version": 1,
            "datasets": list(self.datasets),
            "changes": [
                {"step": c.step, "weights": dict(zip(self.datasets, _shortest(c.weights)))}
                for c in self.changes
            ],
            "digest": self.digest().hex(),
        }

    @classmethod
    def of(cls, data: Any, datasets: Sequence[str] | None = None) -> MixHistory:
        """A history from :meth:`to_dict`'s plain data (or a MixHistory); ``datasets``: the
        loader's names, which must be the history's. A ConfigError names what is wrong."""
        if isinstance(data, MixHistory):
            hist = data
        else:
            if not isinstance(data, Mapping) or data.get("format") != HISTORY_FORMAT:
                raise ConfigError(
                    "a mix history is the dict loader.mix_history() returns (format "
                    f"{HISTORY_FORMAT!r}), got {type(data).__name__}"
                )
            names = tuple(data.get("datasets") or ())
            changes = []
            for i, c in enumerate(data.get("changes") or ()):
                try:
                    step, w = int(c["step"]), c["weights"]
                except (KeyError, TypeError, ValueError):
                    raise ConfigError(f"mix history change {i} lacks 'step' or 'weights'") from None
                changes.append(MixChange(step, _floats(resolve_weights(w, names))))
            hist = cls(names, tuple(changes))
            if "digest" in data and data["digest"] != hist.digest().hex():
                raise ConfigError(
                    "mix history: its digest does not match its changes (the file was edited "
                    "or truncated)"
                )
        if datasets is not None and tuple(datasets) != hist.datasets:
            raise ConfigError(
                f"mix history is for datasets {list(hist.datasets)}, this loader blends "
                f"{list(datasets)}"
            )
        steps = [c.step for c in hist.changes]
        if any(s < 0 for s in steps) or any(b < a for a, b in zip(steps, steps[1:])):
            raise ConfigError(f"mix history: change steps must be >= 0 and in order: {steps}")
        return hist


def _shortest(weights: tuple[float, ...]) -> list[float]:
    # The shortest decimal that rounds to the same float32 (0.3, not 0.30000001192092896): the
    # history file reads as the user wrote it and parses back to the same bytes and digest.
    return [float(str(np.float32(w))) for w in weights]


def _floats(raw: bytes) -> tuple[float, ...]:
    return entry_weights(raw)


def resolve_weights(weights: Any, names: Sequence[str]) -> bytes:
    """Float32 weight bytes from ``{name or index: weight}`` (datasets left out weigh 0) or a
    sequence of one weight per dataset. Both forms are checked the same way: a ConfigError
    names an unknown or repeated dataset, a wrong count, or a weight that is not a finite
    number >= 0."""
    n = len(names)
    if isinstance(weights, Mapping):
        row: list[Any] = [0.0] * n
        index = {nm: i for i, nm in enumerate(names)}
        given: set[int] = set()
        for k, w in weights.items():
            i = index.get(k) if isinstance(k, str) else k
            if not isinstance(i, (int, np.integer)) or isinstance(i, bool) or not 0 <= i < n:
                raise ConfigError(f"set_weights: unknown dataset {k!r}; blended: {list(names)}")
            if int(i) in given:
                raise ConfigError(f"set_weights: dataset {names[i]!r} is given twice ({k!r})")
            given.add(int(i))
            row[int(i)] = w
    elif isinstance(weights, (str, bytes)) or not isinstance(weights, Iterable):
        raise ConfigError(
            f"set_weights takes {{dataset name: weight}} or one weight per dataset, got {weights!r}"
        )
    else:
        row = list(weights)
        if len(row) != n:
            raise ConfigError(f"set_weights: {len(row)} weights for {n} datasets {list(names)}")
    return weights32([_weight(w, name) for w, name in zip(row, names)])


def _weight(value: Any, name: str) -> float:
    """One dataset's weight as a float; a ConfigError naming the dataset unless it is a
    finite number >= 0."""
    try:
        w = float(value)
    except (TypeError, ValueError, OverflowError):
        w = math.nan
    if not math.isfinite(w) or w < 0:
        raise ConfigError(
            f"set_weights: the weight of {name!r} must be a finite number >= 0, got {value!r}"
        )
    return w


def _chain_blend(plan: Pipeline) -> Any:
    """The blend source at the head of the plan's main chain (None if there is none)."""
    source = plan.source
    while not isinstance(source.config, BlendConfig):
        if len(source.inputs) != 1 or not hasattr(source.inputs[0], "next"):
            return None
        source = source.inputs[0]
    return source


def _blend_state(plan: Pipeline, state: Any) -> Any:
    """The state of the blend at the head of the main chain, within ``state``."""
    source = plan.source
    while not isinstance(source.config, BlendConfig):
        source, state = source.inputs[0], state.up
    return state


def blend_of(plan: Pipeline) -> tuple[str, BlendConfig]:
    """``(path, config)`` of the plan's weighted blend; a ConfigError when it has none."""
    head = _chain_blend(plan)
    found = [(head.name, head.config)] if head is not None else plan.parts
    for path, config in found:
        if isinstance(config, BlendConfig):
            if config.mode != "weighted":
                raise ConfigError(
                    "set_weights needs a weighted blend ('blend:' in the metadataset); an "
                    "epochized blend ('blend_epochized:') takes fixed passes of each dataset"
                )
            return path, config
    raise ConfigError(
        "set_weights needs a blend of several datasets (a metadataset with 'blend:'); this "
        "plan reads one dataset"
    )


def state_mix(plan: Pipeline, state: Any):
    """The :class:`~fpipe.plan.online_mix.OnlineMix` in a plan state (None: no change yet)."""
    _, config = blend_of(plan)
    return online_mix(_blend_state(plan, state), len(config.datasets))


def apply_change(plan: Pipeline, state: Any, change: MixChange) -> Any:
    """The plan state before step ``change.step`` (``state``) with the change applied from the
    blend's frontier there."""
    path, config = blend_of(plan)
    if _chain_blend(plan) is None:
        raise ConfigError("online blend weights need the blend at the head of the plan")
    frontier = _blend_state(plan, drawn_state(plan.source, state)).position
    own = _blend_state(plan, state)
    new = with_online_change(
        own, len(config.datasets), position=frontier, step=change.step, weights=change.raw
    )
    return replace_step_state(plan.source, state, path, new)


def next_step(plan: Pipeline, state: Any) -> int:
    """The global step of the next recipe from ``state``, from the state's step count
    (:meth:`fpipe.core.Pipeline.next_step`), not from planning that recipe: a change due at
    that step must come before it is planned, since under the weights before the change a
    finite stream may have no such step while under the change's it has one."""
    step = plan.next_step(state)
    if step is None:
        raise ConfigError("online blend weights need a plan that makes batch recipes")
    return step


def _apply_due(plan, state, step, changes, i):
    while i < len(changes) and changes[i].step <= step:
        state = apply_change(plan, state, changes[i])
        i += 1
    return state, i


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
        epoch = _rank_epoch(plan, target, ranges, changes, 4 * (target - start))
    return state, batches + more, samples + more_samples, epoch


def _planned_steps(plan: Pipeline) -> int:
    """Steps a seek plans at its end (the rest it passes on counts where the plan can): enough
    to hold about 64 refs of this rank, at least one. They only have to show this rank's
    highest epoch, and each costs a whole global batch (every rank plans all of it: 131,072
    refs at 32 per rank on 4,096 ranks), so few: past an epoch's edge a rank's refs are of
    the new epoch within a window, and where they are not yet, :func:`_rank_epoch` plans
    further back."""
    _, out = plan.next(plan.init(), 1)
    first = len(out[0].refs) if len(out) and hasattr(out[0], "refs") else 0
    return max(1, -(-64 // max(1, first)))


def _rank_epoch(
    plan: Pipeline, target: int, ranges: StepRanges, changes: Sequence[MixChange], span: int
) -> int:
    """The highest epoch of this rank's steps before ``target`` when the counts could not say
    (a rank's part of global batches): the last ``span`` steps are planned, further back each
    time, until they hold an epoch at least the global one before them (the distribution's
    ``epoch``, the highest of any ref handed to any rank), which bounds every earlier step."""
    while True:
        start = max(0, target - span)
        state, *_ = _seek_on_counts(plan, start, ranges, changes, target)
        before = plan.position(state) if start else (0, 0)
        if before is None:  # no global position to bound the earlier steps: plan them all
            return _seek_by_next(plan, target, ranges, changes)[3]
        i = sum(c.step <= start for c in changes)  # those _seek_on_counts applied
        recent = _seek_by_next(plan, target, ranges, changes, state, start, i)[3]
        if recent >= before[0] or start == 0:
            return recent
        span *= 4


def _seek_on_counts(
    plan: Pipeline,
    target: int,
    ranges: StepRanges,
    changes: Sequence[MixChange],
    asked: int | None = None,
) -> tuple[Any, int, int, int | None]:
    """:func:`seek_state` with :meth:`fpipe.core.Pipeline.advance`; the epoch is None when
    the counts cannot say it. ``asked``: the step the caller seeks (for the error message)."""
    state = plan.init()
    step, i = 0, 0
    batches = samples = 0
    epoch: int | None = 0
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
    return state, batches, samples, epoch


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


def check_ranks_agree(change: MixChange, group: Any = None) -> None:
    """With torch.distributed initialized on several ranks, refuse (ConsistencyError) a change
    that is not the same on every rank: a collective, so every rank must call set_weights."""
    from fpipe.loader.consistency import (
        ConsistencyError,
        _digest_words,
        _gather_rows,
        consistency_enabled,
    )

    if not consistency_enabled(None, group=group):
        return
    digest = chain_digest(EMPTY_DIGEST, change.step, change.raw)
    rows = _gather_rows(np.array([change.step, *_digest_words(digest)], dtype=np.int64), group)
    seen: dict[bytes, list[int]] = {}
    for r, row in enumerate(rows):
        seen.setdefault(row.tobytes(), []).append(r)
    if len(seen) > 1:
        groups = "; ".join(
            f"ranks {ranks} step {int(np.frombuffer(k, dtype=np.int64)[0])}"
            for k, ranks in seen.items()
        )
        raise ConsistencyError(
            f"set_weights: the ranks asked for different weight changes ({groups}); every rank "
            "must call set_weights with the same weights and step (compute them on one rank "
            "and broadcast them, or from values all-reduced over the ranks). Nothing changed."
        )
