"""Epochs: turn a random-access :class:`~fpipe.plan.source.View` into a stream of ref chunks.

The state is ``(root, epoch, position)``: where the stream is, not what it has produced, so a
restore is O(1) at any step, and so is passing any number of refs (``advance``: the arithmetic
of the epoch walk, what a seek runs). A chunk never crosses an epoch boundary.
"""

from __future__ import annotations

from fpipe.core.advance import Passed, check_state_int
from fpipe.core.errors import ConfigError, SnapshotError
from fpipe.core.records import Config, Refs, State
from fpipe.core.rng import Key
from fpipe.core.stage import Source, View
from fpipe.plan.slice_order import highest_epoch

__all__ = ["RepeatConfig", "RepeatState", "repeat"]


class RepeatConfig(Config, frozen=True):
    """Iterate ``num_epochs`` epochs of a view (None: forever), from epoch 0; where a run
    stands (epoch, position) is state, not configuration."""

    num_epochs: int | None = None


class RepeatState(State, frozen=True, array_like=True):
    """``key``: the plan's root key (views fold their names into it); ``epoch``: current
    epoch; ``position``: next position in it."""

    key: Key
    epoch: int = 0
    position: int = 0


def repeat(view: View, num_epochs: int | None = None, *, name: str = "repeat") -> Source:
    """A stream over epochs of ``view``; each epoch ``e`` is ``view.gather(key, e, 0..size-1)``.

    Example:
        >>> from fpipe.plan.source import samples
        >>> src = repeat(samples(3), num_epochs=2)
        >>> state, chunk = src.next(src.init(0), 10)
        >>> chunk.index.tolist(), chunk.epoch.tolist()
        ([0, 1, 2], [0, 0, 0])
    """
    if num_epochs is not None and num_epochs < 0:
        raise ConfigError(f"num_epochs must be >= 0 or None, got {num_epochs}")
    size = view.size
    if size == 0 and num_epochs is None:
        raise ConfigError(f"view {view.name!r} is empty: repeating it forever yields nothing")
    config = RepeatConfig(num_epochs=num_epochs)
    take_range = view.take_range
    empty = Refs.empty()

    def init(root):
        return RepeatState(root, 0, 0)

    def next_(state: RepeatState, n: int):
        epoch, pos = state.epoch, state.position
        if (num_epochs is not None and epoch >= num_epochs) or size == 0 or n <= 0:
            return state, empty
        take = min(n, size - pos)
        chunk = take_range(state.key, epoch, pos, pos + take)
        pos += take
        if pos == size:
            epoch, pos = epoch + 1, 0
        return RepeatState(state.key, epoch, pos), chunk

    def advance(state: RepeatState, n: int) -> tuple[RepeatState, Passed]:
        # next_'s walk in one step: the refs are numbered epoch * size + position
        if (num_epochs is not None and state.epoch >= num_epochs) or size == 0 or n <= 0:
            return state, Passed()
        start = state.epoch * size + state.position
        stop = start + n if num_epochs is None else min(start + n, num_epochs * size)
        epoch, position = divmod(stop, size)
        check_state_int(stop, f"{name}: the refs taken")
        top = highest_epoch(view, state.key, start, stop)
        return RepeatState(state.key, epoch, position), Passed(stop - start, stop - start, top)

    def check(state: RepeatState) -> None:
        if num_epochs is not None and state.epoch >= num_epochs:  # ended
            if state.epoch > num_epochs or state.position != 0:
                raise SnapshotError(
                    f"epoch {state.epoch} position {state.position} is past the end of "
                    f"{num_epochs} epochs"
                )
        elif not 0 <= state.position < max(size, 1):
            raise SnapshotError(f"position {state.position} is outside an epoch of {size} samples")

    return Source(
        name=name,
        config=config,
        init=init,
        next=next_,
        state_type=RepeatState,
        inputs=(view,),
        split=_split,
        check=check,
        advance=advance,
    )


def _split(state: RepeatState):
    return state, (None,)
