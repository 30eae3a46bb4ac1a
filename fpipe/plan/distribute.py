"""Distribution to data-parallel ranks.

Global mode: the plan is identical on every rank; each run of ``world_size * batch_size`` refs
is one global batch and rank r takes refs ``[r * batch_size, (r + 1) * batch_size)`` of it. At a
batch boundary every rank's state is the same value, so one snapshot restores any number of
ranks, as long as the global batch size is kept (rank and world size are declared
``compatible``).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.core.records import Config, Refs, Unit
from fpipe.core.stage import Stage

__all__ = ["DistributeConfig", "distribute"]


class DistributeConfig(Config, frozen=True):
    """Rank ``rank`` of ``world_size`` takes its slice of every global batch.

    All three fields are declared compatible: at a global-batch boundary the state is the same
    on every rank and points at the first ref not yet consumed, so a restore on another world
    size (or with another global batch size) continues the same global order from there.
    """

    compatible: ClassVar[frozenset[str]] = frozenset({"global_batch_size", "rank", "world_size"})

    global_batch_size: int
    rank: int = 0
    world_size: int = 1


def distribute(
    global_batch_size: int, *, rank: int = 0, world_size: int = 1, name: str = "distribute"
) -> Stage:
    """Global-mode distribution over blocks of ``global_batch_size`` refs.

    A short final global batch is split as evenly as possible over the ranks (a following
    ``batch(drop_last=True)`` drops every part of it on every rank alike).

    Example:
        >>> s = distribute(4, rank=1, world_size=2)
        >>> s.step(s.init(0), Refs.of(index=[0, 1, 2, 3]))[1].index.tolist()
        [2, 3]
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ConfigError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
    if global_batch_size < 1 or global_batch_size % world_size:
        raise ConfigError(
            f"global batch size {global_batch_size} must be a positive multiple of the world "
            f"size {world_size} (per-rank batch = global / world size)"
        )
    per_rank = global_batch_size // world_size
    unit = Unit()

    def step(state, chunk: Refs):
        n = len(chunk)
        if n == global_batch_size:
            return state, chunk[rank * per_rank : (rank + 1) * per_rank]
        bounds = np.linspace(0, n, world_size + 1).round().astype(np.int64)
        return state, chunk[int(bounds[rank]) : int(bounds[rank + 1])]

    return Stage(
        name=name,
        config=DistributeConfig(
            global_batch_size=global_batch_size, rank=rank, world_size=world_size
        ),
        init=lambda key: unit,
        step=step,
        state_type=Unit,
        block_size=global_batch_size,
    )
