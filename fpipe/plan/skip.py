"""Skip ranges: global steps ``[a, b)`` of a run whose batches are not delivered.

The recipe for a loss spike (PaLM and others): restart from a checkpoint before the spike and
leave out the batches that came next. A step is a recipe of the plan: its ``step`` number, the
same on every rank in global mode (``fpipe plan --step N`` and ``enumerate(loader)`` on a fresh
loader count the same way). Skipping runs the plan over the skipped recipes (metadata only:
they are never handed to a worker, so nothing is read or decoded for them) and goes on from the
state after them, so every later step is the step the run without the skip would have made.
The batch step only counts the recipes it passes over (:meth:`fpipe.core.Pipeline.skip`): the
steps before it (blend, shuffle, packing) still run, since they decide where the next step
starts.

Ranges are kept as a sorted tuple of disjoint ``(start, stop)`` pairs, merged when they touch,
at most :data:`MAX_SKIP_RANGES` of them: the loader state holds them (a restore keeps the skip),
and they never grow with the step.

Example:
    >>> normalize_step_ranges([range(10, 20), (15, 30), "40:50"])
    ((10, 30), (40, 50))
    >>> skip_end(12, ((10, 30),)), skip_end(30, ((10, 30),))
    (30, None)
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

from fpipe.core.errors import ConfigError
from fpipe.core.pipeline import Pipeline

__all__ = [
    "MAX_SKIP_RANGES",
    "StepRanges",
    "next_recipe",
    "normalize_step_ranges",
    "parse_step_range",
    "skip_end",
]

#: Disjoint skip ranges a loader state may hold (the state stays small and bounded).
MAX_SKIP_RANGES = 32

#: Sorted, disjoint, non-touching ``(start, stop)`` pairs with ``0 <= start < stop``.
StepRanges = tuple[tuple[int, int], ...]


def parse_step_range(text: str) -> tuple[int, int]:
    """``"A:B"`` -> ``(A, B)`` (steps ``A`` to ``B - 1``); ``"A"`` -> ``(A, A + 1)``."""
    a, sep, b = str(text).partition(":")
    try:
        start = int(a)
        stop = int(b) if sep else start + 1
    except ValueError:
        raise ConfigError(f"a step range is A:B (steps A to B-1), got {text!r}") from None
    return start, stop


def _is_bool(x: Any) -> bool:
    return isinstance(x, bool)


def _pair(item: Any) -> tuple[int, int]:
    if isinstance(item, range):
        if item.step != 1:
            raise ConfigError(f"a skip range must have step 1, got {item!r}")
        return item.start, item.stop
    if isinstance(item, str):
        return parse_step_range(item)
    if isinstance(item, (tuple, list)) and len(item) == 2 and not any(map(_is_bool, item)):
        try:
            return operator.index(item[0]), operator.index(item[1])
        except TypeError:
            pass
    raise ConfigError(
        f"a skip range is range(a, b), (a, b) or 'a:b' (global steps a to b-1), got {item!r}"
    )


def normalize_step_ranges(ranges: Any) -> StepRanges:
    """The skip ranges in ``ranges`` (one range, or an iterable of ``range(a, b)``, ``(a, b)``
    or ``"a:b"``) as sorted, merged ``(a, b)`` pairs.

    Raises ConfigError for a range with ``a < 0`` or ``b <= a``, or more than
    :data:`MAX_SKIP_RANGES` ranges after merging.
    """
    if ranges is None:
        return ()
    if isinstance(ranges, (range, str)) or (
        isinstance(ranges, (tuple, list))
        and len(ranges) == 2
        and all(isinstance(x, int) for x in ranges)
    ):
        ranges = [ranges]
    if not isinstance(ranges, Iterable):
        raise ConfigError(f"skip ranges must be a list of (a, b) pairs, got {ranges!r}")
    pairs = sorted(_pair(r) for r in ranges)
    out: list[tuple[int, int]] = []
    for a, b in pairs:
        if a < 0 or b <= a:
            raise ConfigError(f"a skip range [{a}, {b}) needs 0 <= a < b (global steps a to b-1)")
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    if len(out) > MAX_SKIP_RANGES:
        raise ConfigError(
            f"{len(out)} skip ranges after merging; a run keeps at most {MAX_SKIP_RANGES} (merge "
            "nearby ones into one range)"
        )
    return tuple(out)


def skip_end(step: int, ranges: StepRanges) -> int | None:
    """The end of the skip range holding ``step``, or None if ``step`` is delivered."""
    for a, b in ranges:
        if a <= step < b:
            return b
        if step < a:
            return None
    return None


def _pull(plan: Pipeline, state: Any) -> tuple[Any, Any]:
    state, out = plan.next(state, 1)
    return state, out[0] if len(out) else None


def next_recipe(plan: Pipeline, state: Any, ranges: StepRanges) -> tuple[Any, Any, int]:
    """The next recipe of ``plan`` from ``state`` that no range skips: ``(state after it,
    recipe or None at the end of the stream, recipes skipped before it)``.

    Skipped recipes are planned (metadata only) and dropped; no payload is read for them.
    Where the plan's last step can count its recipes without building them (a batch step;
    ``Source.skip``), the rest of a range after its first recipe is passed over with
    :meth:`~fpipe.core.Pipeline.skip`. That takes steps to count up by one, as a batch step's
    do; the recipe after them confirms it (its step is the first after the range), and where
    it does not, or the stream ends inside the range, the recipes are pulled one at a time.
    """
    skipped, shortcut = 0, plan.source.skip is not None
    state, recipe = _pull(plan, state)
    while recipe is not None:
        end = skip_end(recipe.step, ranges) if ranges else None
        if end is None:
            return state, recipe, skipped
        skipped += 1
        rest = end - recipe.step - 1
        if rest > 0 and shortcut:
            after, passed = plan.skip(state, rest)
            after, following = _pull(plan, after)
            if following is not None and following.step == recipe.step + passed + 1:
                state, recipe, skipped = after, following, skipped + passed
                continue
            shortcut = False  # not confirmed: one recipe at a time from here
        state, recipe = _pull(plan, state)
    return state, None, skipped
