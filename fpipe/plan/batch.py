"""Batching: blocks of ``batch_size`` refs become :class:`~fpipe.core.records.Recipe` records.

After a pack step the items are packs (groups of refs): a batch is ``batch_size`` packs, and
its recipe holds the packs' refs one after the other with a ``pack`` column (the pack's number
in the batch), so the materializer calls ``pack_selected_samples`` once per pack.
"""

from __future__ import annotations

import enum
from typing import ClassVar

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.core.records import Config, Recipe, Refs, State
from fpipe.core.rng import Key
from fpipe.core.stage import Stage

__all__ = ["BatchConfig", "BatchState", "Remainder", "batch"]


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


class BatchState(State, frozen=True, array_like=True):
    """``key``: per-sample key root; ``step``: recipes emitted; ``dropped``: refs dropped."""

    key: Key
    step: int = 0
    dropped: int = 0


def batch(batch_size: int, *, drop_last: bool = True, name: str = "batch") -> Stage:
    """Turn refs into batch recipes of ``batch_size`` (the last one dropped if short, by default).

    Example:
        >>> s = batch(2)
        >>> st, out = s.step(s.init(0), Refs.of(index=[4, 5]))
        >>> out[0].step, out[0].refs.index.tolist()
        (0, [4, 5])
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    remainder = Remainder.DROP if drop_last else Remainder.KEEP

    def step(state: BatchState, chunk: Refs | tuple):
        if isinstance(chunk, tuple):  # packs (groups of refs) from a pack step
            if len(chunk) < batch_size and remainder is Remainder.DROP:
                dropped = sum(len(p) for p in chunk)
                return BatchState(state.key, state.step, state.dropped + dropped), ()
            chunk = _join_packs(chunk)
        elif len(chunk) < batch_size and remainder is Remainder.DROP:
            return BatchState(state.key, state.step, state.dropped + len(chunk)), ()
        recipe = Recipe(step=state.step, refs=chunk, key=state.key)
        return BatchState(state.key, state.step + 1, state.dropped), (recipe,)

    return Stage(
        name=name,
        config=BatchConfig(batch_size=batch_size, remainder=remainder),
        init=lambda key: BatchState(key, 0, 0),
        step=step,
        state_type=BatchState,
        block_size=batch_size,
        stats=_batch_stats,
    )


def _batch_stats(state: BatchState) -> dict[str, int]:
    return {"batch_remainder": state.dropped}
