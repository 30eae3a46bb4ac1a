"""Passes over a whole stream of batch recipes: repeat it, or take its first ``length``.

These wrap a finished plan (the source whose outputs are :class:`~fpipe.core.records.Recipe`
values), as Energon's ``RepeatDataset`` and ``LimitDataset`` wrap a dataset:

- :func:`repeat_passes` plays the stream ``repeats`` times (None: forever). Pass 0 is the stream
  itself; pass ``r > 0`` is the same plan under the root key folded with ``r``, so a shuffled
  stream is shuffled anew and per-sample random numbers differ, while an unshuffled one (a
  validation pass) keeps its order. A fractional ``repeats`` ends inside the last pass, after
  ``floor(length * fraction)`` recipes. With ``restart``, the stream ends after the last pass
  and its state moves back to the start, so the next iteration plays the passes again.
- :func:`limit_passes` ends each pass after ``length`` recipes (or earlier where the stream
  ends), and the next pass starts over from the stream's start (Energon 7.4 resets the inner
  dataset after every iteration of a ``LimitDataset``).

Recipes are renumbered (``step``) in the order they are emitted, so step numbers stay unique
through repetitions. The state is the wrapped stream's state plus a few counters: a restore at
any recipe continues exactly, and its size does not grow with the number of passes.
"""

from __future__ import annotations

import math
from typing import Any, Generic, TypeVar

import msgspec

from fpipe.core.errors import ConfigError, SnapshotError
from fpipe.core.records import Config, State
from fpipe.core.rng import Key, fold_in, name_id
from fpipe.core.stage import Source

__all__ = [
    "LimitPassesConfig",
    "PassState",
    "RepeatPassesConfig",
    "limit_passes",
    "repeat_passes",
]

S = TypeVar("S")

_PASS = name_id("repeat_passes")


class RepeatPassesConfig(Config, frozen=True):
    """Play the stream ``repeats`` times (None: forever; a fraction ends inside the last pass,
    whose length is ``pass_length``); ``restart``: after the last pass, start over."""

    repeats: float | None = None
    pass_length: int | None = None
    restart: bool = True


class LimitPassesConfig(Config, frozen=True):
    """End each pass after ``length`` recipes; the next pass starts from the stream's start."""

    length: int


class PassState(State, Generic[S], frozen=True, array_like=True):
    """``key``: the plan's root key; ``inner``: the wrapped stream's state; ``passes``: passes
    finished; ``index``: recipes taken in this pass; ``emitted``: recipes emitted in all."""

    key: Key
    inner: S
    passes: int = 0
    index: int = 0
    emitted: int = 0


def _parametrize(generic: Any, arg: Any) -> Any:
    return generic[arg]


def _take(inner: Source, state: PassState, limit: int) -> tuple[PassState, Any] | None:
    """Up to ``limit`` recipes of the current pass, renumbered, with the counters advanced;
    None when the inner stream has ended."""
    st, chunk = inner.next(state.inner, limit)
    if not len(chunk):
        return None
    out = _renumber(chunk, state.emitted)
    m = len(out)
    return PassState(state.key, st, state.passes, state.index + m, state.emitted + m), out


def _renumber(chunk: Any, first: int) -> tuple:
    return tuple(msgspec.structs.replace(r, step=first + i) for i, r in enumerate(chunk))


def _pass_key(root: Key, passes: int) -> Key:
    return root if passes == 0 else fold_in(root, _PASS, passes)


def repeat_passes(
    inner: Source,
    repeats: float | None = None,
    *,
    pass_length: int | None = None,
    restart: bool = True,
    name: str = "repeat_dataset",
) -> Source:
    """``inner`` (a stream of recipes) played ``repeats`` times; see the module docstring.

    ``pass_length`` (recipes in one pass) is needed only for a fractional ``repeats``.
    """
    if repeats is not None and (not math.isfinite(repeats) or repeats < 0):
        raise ConfigError(f"repeats must be >= 0 or None (forever), got {repeats!r}")
    fraction = 0.0 if repeats is None else repeats - math.floor(repeats)
    if fraction and pass_length is None:
        raise ConfigError(
            f"repeats={repeats} ends inside a pass, whose length is unknown here (the wrapped "
            "stream is endless or its batches are decided by plan stages or packing); give "
            "a whole number of repeats"
        )
    stop_last = math.floor((pass_length or 0) * fraction)
    whole = None if repeats is None else math.floor(repeats)
    config = RepeatPassesConfig(repeats=repeats, pass_length=pass_length, restart=restart)

    def init(root: Key) -> PassState:
        return PassState(root, inner.init(root), 0, 0, 0)

    def at_start(state: PassState) -> PassState:
        return PassState(state.key, inner.init(state.key), 0, 0, state.emitted)

    def finished(passes: int) -> bool:
        return whole is not None and (passes > whole or (passes == whole and not fraction))

    def next_(state: PassState, n: int):
        if finished(state.passes):
            return state, ()  # every pass played (without restart)
        while True:
            limit = n
            if whole is not None and state.passes == whole:  # the fractional last pass
                limit = min(n, stop_last - state.index)
            if limit > 0:
                taken = _take(inner, state, limit)
                if taken is not None:
                    return taken
                if state.index == 0 and repeats is None:
                    raise ConfigError(
                        f"{name}: the wrapped stream has no batches, so repeating it forever "
                        "never yields one"
                    )
            passes = state.passes + 1
            if finished(passes):
                end = PassState(state.key, state.inner, passes, 0, state.emitted)
                return (at_start(end) if restart else end), ()
            fresh = inner.init(_pass_key(state.key, passes))
            state = PassState(state.key, fresh, passes, 0, state.emitted)

    def check(state: PassState) -> None:
        if min(state.passes, state.index, state.emitted) < 0:
            raise SnapshotError(f"{name}: negative counters in {state}")

    return Source(
        name=name,
        config=config,
        init=init,
        next=next_,
        state_type=_parametrize(PassState, inner.state_type),
        inputs=(inner,),
        split=_split,
        check=check,
    )


def limit_passes(inner: Source, length: int, *, name: str = "limit_dataset") -> Source:
    """The first ``length`` recipes of ``inner`` in each pass; see the module docstring."""
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise ConfigError(f"length must be an int >= 0, got {length!r}")
    config = LimitPassesConfig(length=length)

    def init(root: Key) -> PassState:
        return PassState(root, inner.init(root), 0, 0, 0)

    def next_(state: PassState, n: int):
        take = min(n, length - state.index)
        if take > 0:
            taken = _take(inner, state, take)
            if taken is not None:
                return taken
        # The pass ends: the stream stops here, and the next iteration starts from its start.
        return PassState(state.key, inner.init(state.key), state.passes + 1, 0, state.emitted), ()

    def check(state: PassState) -> None:
        if not 0 <= state.index <= length or min(state.passes, state.emitted) < 0:
            raise SnapshotError(
                f"{name}: position {state.index} is outside a pass of {length} batches"
            )

    return Source(
        name=name,
        config=config,
        init=init,
        next=next_,
        state_type=_parametrize(PassState, inner.state_type),
        inputs=(inner,),
        split=_split,
        check=check,
    )


def _split(state: PassState) -> tuple[Any, tuple]:
    return PassState(state.key, None, state.passes, state.index, state.emitted), (state.inner,)
