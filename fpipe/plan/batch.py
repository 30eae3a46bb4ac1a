"""Batching: blocks of ``batch_size`` refs become :class:`~fpipe.core.records.Recipe` records.

After a pack step the items are packs (groups of refs): a batch is ``batch_size`` packs, and
its recipe holds the packs' refs one after the other with a ``pack`` column (the pack's number
in the batch), so the materializer calls ``pack_selected_samples`` once per pack.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from fpipe.core.advance import BlockAdvance, Passed
from fpipe.core.errors import ConfigError
from fpipe.core.records import Config, Recipe, Refs, State
from fpipe.core.rng import Key
from fpipe.core.stage import Stage
from fpipe.plan.batch_schedule import BatchSchedule

__all__ = ["BatchConfig", "BatchState", "Remainder", "ScheduledBatchConfig", "batch"]


def _join_packs(packs: tuple) -> Refs:
    """The refs of ``packs`` one after the other, with a ``pack`` column (0, 0, 1, ...)."""
    if not packs:
        return Refs.empty().with_columns(pack=np.zeros(0, dtype=np.int64))
    sizes = [len(p) for p in packs]
    columns = [p.columns for p in packs]
    joined = {n: np.concatenate([c[n] for c in columns]) for n in columns[0]}
    joined["pack"] = np.repeat(np.arange(len(packs), dtype=np.int64), sizes)
    return Refs.wrap(joined)


class Remainder(str, enum.Enum):
    """What happens to a final batch shorter than ``batch_size``.

    DROP: drop it and count its refs in ``BatchState.dropped`` (the default, as in training).
    KEEP: emit it as a short batch.
    """

    DROP = "drop"
    KEEP = "keep"


class BatchConfig(Config, frozen=True):
    """Group ``batch_size`` consecutive refs into one recipe; short remainder per ``remainder``.

    ``batch_size`` is declared compatible: the state at a batch boundary points at the first ref
    not yet consumed, so a restore with another batch size continues from exactly there.
    """

    compatible: ClassVar[frozenset[str]] = frozenset({"batch_size"})

    batch_size: int
    remainder: Remainder = Remainder.DROP


class ScheduledBatchConfig(Config, frozen=True):
    """Group the next ``schedule.size_at(step)`` refs into recipe ``step``; short remainder per
    ``remainder``. ``schedule`` (per-rank sizes) is declared compatible, as ``batch_size`` is:
    the state counts the recipes emitted and points at the first ref not yet consumed."""

    compatible: ClassVar[frozenset[str]] = frozenset({"schedule"})

    schedule: BatchSchedule
    remainder: Remainder = Remainder.DROP


class BatchState(State, frozen=True, array_like=True):
    """``key``: per-sample key root; ``step``: recipes emitted; ``dropped``: refs dropped."""

    key: Key
    step: int = 0
    dropped: int = 0


def batch(batch_size: int | BatchSchedule, *, drop_last: bool = True, name: str = "batch") -> Stage:
    """Turn refs into batch recipes of ``batch_size`` (the last one dropped if short, by default).

    ``batch_size`` may be a :class:`~fpipe.plan.BatchSchedule`: recipe ``s`` then takes
    ``size_at(s)`` refs (per-rank sizes; see :meth:`BatchSchedule.per_rank`).

    Example:
        >>> s = batch(2)
        >>> st, out = s.step(s.init(0), Refs.of(index=[4, 5]))
        >>> out[0].step, out[0].refs.index.tolist()
        (0, [4, 5])
    """
    remainder = Remainder.DROP if drop_last else Remainder.KEEP
    config: Config
    block: int | Callable[[BatchState], int]
    if isinstance(batch_size, BatchSchedule):
        sizes = batch_size
        config = ScheduledBatchConfig(schedule=sizes, remainder=remainder)
        size_at: Callable[[int], int] = sizes.size_at
        block = lambda state: sizes.size_at(state.step)  # noqa: E731
    else:
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        fixed = batch_size
        config = BatchConfig(batch_size=fixed, remainder=remainder)
        size_at, block = (lambda step: fixed), fixed

    def step(state: BatchState, chunk: Refs | tuple):
        size = size_at(state.step)
        if isinstance(chunk, tuple):  # packs (groups of refs) from a pack step
            if len(chunk) < size and remainder is Remainder.DROP:
                dropped = sum(len(p) for p in chunk)
                return BatchState(state.key, state.step, state.dropped + dropped), ()
            chunk = _join_packs(chunk)
        elif len(chunk) < size and remainder is Remainder.DROP:
            return BatchState(state.key, state.step, state.dropped + len(chunk)), ()
        recipe = Recipe(step=state.step, refs=chunk, key=state.key)
        return BatchState(state.key, state.step + 1, state.dropped), (recipe,)

    def skip(state: BatchState, chunk: Refs | tuple):
        # step's state and recipe count, without joining the refs of a recipe passed over
        if len(chunk) < size_at(state.step) and remainder is Remainder.DROP:
            return step(state, chunk)[0], 0
        return BatchState(state.key, state.step + 1, state.dropped), 1

    def span(state: BatchState) -> int | None:
        # a schedule's steps from here with this size (BatchSchedule only)
        assert isinstance(batch_size, BatchSchedule)
        return batch_size.steps_left(state.step)

    def advance(state: BatchState, blocks: int, inputs: Passed):
        # whole blocks of one size: one recipe each, holding every input ref
        return BatchState(state.key, state.step + blocks, state.dropped), Passed(
            blocks, inputs.refs, inputs.epoch
        )

    return Stage(
        name=name,
        config=config,
        init=lambda key: BatchState(key, 0, 0),
        step=step,
        state_type=BatchState,
        block_size=block,
        stats=_batch_stats,
        step_count=_batch_step,
        skip=skip,
        advance=BlockAdvance(1, advance, span=None if isinstance(block, int) else span),
    )


def _batch_step(state: BatchState) -> int:
    # one recipe per block: between recipes the state is at a block start, its count exact
    return state.step


def _batch_stats(state: BatchState) -> dict[str, int]:
    return {"batch_remainder": state.dropped}
