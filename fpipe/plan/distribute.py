"""Distribution to data-parallel ranks.

Global mode (:func:`distribute`, the default): the plan is identical on every rank; each run of
``world_size * batch_size`` refs is one global batch and rank r takes refs
``[r * batch_size, (r + 1) * batch_size)`` of it. At a batch boundary every rank's state is the
same value, so one snapshot restores any number of ranks (rank, world size and global batch
size are declared ``compatible``).

Per-rank mode (:func:`per_rank`): each rank owns a contiguous part of the samples in index
order (its own shards, apart from the boundaries) and runs its own shuffle and batching over
it, reading sequentially. States differ between ranks, and a rank's state means nothing under
another partition, so rank and world size are fingerprinted: a restore on another world size is
refused.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from fpipe.core.advance import BlockAdvance, Passed
from fpipe.core.errors import ConfigError
from fpipe.core.records import Config, Refs, State
from fpipe.core.stage import Stage, View
from fpipe.plan.batch import Remainder
from fpipe.plan.batch_schedule import BatchSchedule

__all__ = [
    "DistributeConfig",
    "DistributeState",
    "PerRankConfig",
    "ScheduledDistributeConfig",
    "ScheduledDistributeState",
    "distribute",
    "per_rank",
]


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
    remainder: Remainder = Remainder.DROP


class DistributeState(State, frozen=True, array_like=True):
    """The same on every rank: ``dropped``: refs of short final global batches dropped;
    ``epoch``: the highest epoch of any ref handed out so far (to any rank); ``taken``: refs of
    the global order handed out so far (all ranks). ``(epoch, taken)`` is the global position
    that ``loader.stats()`` reports."""

    dropped: int = 0
    epoch: int = 0
    taken: int = 0


SCHEDULE_HINT = (
    "a global batch size schedule counts steps from the start of the run, a fixed size does "
    "not: a run started with one cannot continue with the other. Resume with the kind of batch "
    "size the run started with (a schedule may change; its state keeps the step)."
)


class ScheduledDistributeConfig(Config, frozen=True):
    """Rank ``rank`` of ``world_size`` takes its slice of every global batch, whose size at
    step ``s`` is ``schedule.size_at(s)``.

    All three fields are declared compatible: the state holds the step and the refs taken, the
    same on every rank at a global-batch boundary, so a restore on another world size (that
    divides every size) or with another schedule continues the global order from the first ref
    not yet consumed, with the new schedule's size for the restored step.
    """

    compatible: ClassVar[frozenset[str]] = frozenset({"schedule", "rank", "world_size"})
    mismatch_hint: ClassVar[str] = SCHEDULE_HINT

    schedule: BatchSchedule
    rank: int = 0
    world_size: int = 1
    remainder: Remainder = Remainder.DROP


class ScheduledDistributeState(DistributeState, frozen=True, array_like=True):
    """:class:`DistributeState` plus ``step``: global batches handed out so far."""

    step: int = 0


def distribute(
    global_batch_size: int | BatchSchedule,
    *,
    rank: int = 0,
    world_size: int = 1,
    drop_last: bool = True,
    name: str = "distribute",
) -> Stage:
    """Global-mode distribution over blocks of ``global_batch_size`` refs.

    A short final global batch is dropped on every rank alike (``drop_last=True``, counted in
    the state), or split as evenly as possible over the ranks (``drop_last=False``; ranks may
    then get batches of different sizes, some none, at the very end of the stream). Deciding
    this on the global batch keeps all ranks at the same step.

    ``global_batch_size`` may be a :class:`~fpipe.plan.BatchSchedule` (global sizes by step,
    each a multiple of ``world_size``): step ``s`` takes the next ``size_at(s)`` refs.

    Example:
        >>> s = distribute(4, rank=1, world_size=2)
        >>> s.step(s.init(0), Refs.of(index=[0, 1, 2, 3]))[1].index.tolist()
        [2, 3]
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ConfigError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
    if isinstance(global_batch_size, BatchSchedule):
        return _scheduled(global_batch_size, rank, world_size, drop_last, name)
    if global_batch_size < 1 or global_batch_size % world_size:
        raise ConfigError(
            f"global batch size {global_batch_size} must be a positive multiple of the world "
            f"size {world_size} (per-rank batch = global / world size)"
        )
    per_rank = global_batch_size // world_size
    remainder = Remainder.DROP if drop_last else Remainder.KEEP

    def step(state: DistributeState, chunk: Refs | tuple):
        n = len(chunk)
        refs, epoch = _refs_and_epoch(chunk)  # items are refs, or packs (groups of refs)
        if n < global_batch_size and remainder is Remainder.DROP:
            return DistributeState(state.dropped + refs, state.epoch, state.taken), chunk[:0]
        state = DistributeState(state.dropped, max(state.epoch, epoch), state.taken + refs)
        if n == global_batch_size:
            if world_size == 1:
                return state, chunk
            return state, chunk[rank * per_rank : (rank + 1) * per_rank]
        bounds = np.linspace(0, n, world_size + 1).round().astype(np.int64)
        return state, chunk[int(bounds[rank]) : int(bounds[rank + 1])]

    def advance(state: DistributeState, blocks: int, inputs: Passed):
        # whole global batches: every rank takes per_rank items of each. The highest epoch of
        # a rank's part depends on which refs it got: unknown on several ranks.
        if inputs.epoch is None or (world_size > 1 and inputs.refs != inputs.outputs):
            return None  # packs: a rank's refs depend on its packs' sizes
        taken = state.taken + inputs.refs
        new = DistributeState(state.dropped, max(state.epoch, inputs.epoch), taken)
        if world_size == 1:
            return new, inputs
        return new, Passed(blocks * per_rank, blocks * per_rank, None)

    return Stage(
        name=name,
        config=DistributeConfig(
            global_batch_size=global_batch_size,
            rank=rank,
            world_size=world_size,
            remainder=remainder,
        ),
        init=lambda key: DistributeState(0, 0, 0),
        step=step,
        state_type=DistributeState,
        block_size=global_batch_size,
        stats=_distribute_stats,
        position=_position,
        advance=BlockAdvance(per_rank, advance),
    )


def _scheduled(
    schedule: BatchSchedule, rank: int, world_size: int, drop_last: bool, name: str
) -> Stage:
    """:func:`distribute` over global batches of ``schedule.size_at(step)`` refs."""
    per_rank_schedule = schedule.per_rank(world_size)  # checks that world_size divides
    remainder = Remainder.DROP if drop_last else Remainder.KEEP

    def step(state: ScheduledDistributeState, chunk: Refs | tuple):
        n, size = len(chunk), schedule.size_at(state.step)
        refs, epoch = _refs_and_epoch(chunk)
        if n < size and remainder is Remainder.DROP:
            dropped = state.dropped + refs
            return ScheduledDistributeState(dropped, state.epoch, state.taken, state.step), chunk[
                :0
            ]
        epoch = max(state.epoch, epoch)
        state = ScheduledDistributeState(state.dropped, epoch, state.taken + refs, state.step + 1)
        if n == size:
            per = per_rank_schedule.size_at(state.step - 1)
            return state, chunk[rank * per : (rank + 1) * per]
        bounds = np.linspace(0, n, world_size + 1).round().astype(np.int64)
        return state, chunk[int(bounds[rank]) : int(bounds[rank + 1])]

    def advance(state: ScheduledDistributeState, blocks: int, inputs: Passed):
        # whole global batches of one size (see distribute's advance)
        if inputs.epoch is None or (world_size > 1 and inputs.refs != inputs.outputs):
            return None
        per = per_rank_schedule.size_at(state.step)
        new = ScheduledDistributeState(
            state.dropped,
            max(state.epoch, inputs.epoch),
            state.taken + inputs.refs,
            state.step + blocks,
        )
        if world_size == 1:
            return new, inputs
        return new, Passed(blocks * per, blocks * per, None)

    return Stage(
        name=name,
        config=ScheduledDistributeConfig(
            schedule=schedule, rank=rank, world_size=world_size, remainder=remainder
        ),
        init=lambda key: ScheduledDistributeState(0, 0, 0, 0),
        step=step,
        state_type=ScheduledDistributeState,
        block_size=lambda state: schedule.size_at(state.step),
        stats=_distribute_stats,
        position=_position,
        advance=BlockAdvance(
            lambda state: per_rank_schedule.size_at(state.step),
            advance,
            span=lambda state: schedule.steps_left(state.step),
        ),
    )


def _refs_and_epoch(chunk) -> tuple[int, int]:
    """Refs in a chunk of refs (or of groups of refs) and their highest epoch (0 if none).

    A chunk of packs is read as one flat array of epochs: one numpy call per chunk, not one
    per pack (a step of a packed plan holds many small packs).
    """
    if isinstance(chunk, Refs):
        epochs = chunk.columns["epoch"]
    elif chunk and all(isinstance(item, Refs) for item in chunk):
        epochs = np.concatenate([item.columns["epoch"] for item in chunk])
    else:
        return sum(len(item) for item in chunk), _max_epoch(chunk)
    return len(epochs), int(epochs.max()) if len(epochs) else 0


def _max_epoch(chunk) -> int:
    """Highest epoch in a chunk of refs (or of groups of refs)."""
    if isinstance(chunk, Refs):
        return int(chunk.columns["epoch"].max())  # never empty here
    return max((_max_epoch(item) for item in chunk), default=0)


def _position(state: DistributeState) -> tuple[int, int]:
    return state.epoch, state.taken


def _distribute_stats(state: DistributeState) -> dict[str, int]:
    return {"global_remainder": state.dropped}


PER_RANK_HINT = (
    "per-rank mode: each rank reads its own part of the data and keeps its own state, so a "
    "snapshot only continues on the same world size and rank. To change the number of ranks, "
    "finish the epoch on the old world size, or train with distribution='global' (the default), "
    "whose snapshots restore on any world size."
)


class PerRankConfig(Config, frozen=True):
    """Rank ``rank`` of ``world_size`` reads only its own contiguous part of the samples.

    Nothing is declared compatible: each rank's part, and so its state, depends on both values.
    """

    mismatch_hint: ClassVar[str] = PER_RANK_HINT

    rank: int
    world_size: int


def per_rank(view: View, *, rank: int, world_size: int, name: str = "per_rank") -> View:
    """The part of ``view`` that rank ``rank`` of ``world_size`` reads in per-rank mode.

    Positions ``[rank * n // world_size, (rank + 1) * n // world_size)`` of the view (its index
    order, so a rank touches only its own shards); part sizes differ by at most one. Build the
    rest of the rank's plan (slice shuffle, repeat, window shuffle, batch) on top of it.

    Example:
        >>> from fpipe.plan.source import samples
        >>> v = per_rank(samples(10), rank=1, world_size=3)
        >>> v.size, v.gather(0, 0, np.arange(v.size)).index.tolist()
        (3, [3, 4, 5])
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ConfigError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
    n = view.size
    if n < world_size:
        raise ConfigError(
            f"per-rank mode needs at least one sample per rank: {n} samples, {world_size} ranks"
        )
    lo, hi = rank * n // world_size, (rank + 1) * n // world_size
    inner = view.gather
    config = PerRankConfig(rank=rank, world_size=world_size)

    def gather(root, epoch, positions):
        return inner(root, epoch, np.asarray(positions, dtype=np.int64) + lo)

    return View(name=name, config=config, size=hi - lo, gather=gather, inputs=(view,))
