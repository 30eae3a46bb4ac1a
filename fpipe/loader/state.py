"""The loader's state: the plan state after the last batch the consumer took, plus counters.

It is one small value, the same for any ``num_workers`` and prefetch setting, encoded with the
snapshot envelope of :mod:`fpipe.core.snapshot` (fixed width: its size never grows).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Generic, TypeVar

from fpipe.core.errors import ConfigError, SnapshotError
from fpipe.core.pipeline import Pipeline
from fpipe.core.records import Config, State
from fpipe.core.snapshot import decode_state, encode_state
from fpipe.core.state_check import check_state, check_values
from fpipe.plan.skip import MAX_SKIP_RANGES, normalize_step_ranges

__all__ = [
    "GroupChunkConfig",
    "GroupRefs",
    "GroupsState",
    "LoaderConfig",
    "LoaderState",
    "LoaderStats",
    "PackBufferConfig",
    "SampleRef",
    "decode_loader_state",
    "encode_loader_state",
    "loader_parts",
    "snapshot_bytes",
    "state_epoch",
]

P = TypeVar("P")


class LoaderConfig(Config, frozen=True):
    """Marks a loader snapshot (so a bare plan snapshot is not mistaken for one)."""

    kind: str = "loader"


class SampleRef(State, frozen=True, array_like=True):
    """One encoded sample of the stream, by reference: output ``output`` of the task encoder for
    the sample at ``position`` of recipe ``step``, which is ``(dataset, index, epoch)``. It is
    materialized again from these numbers (:mod:`fpipe.loader._group_batches`)."""

    step: int
    position: int
    output: int
    dataset: int
    index: int
    epoch: int


class GroupRefs(State, frozen=True, array_like=True):
    """A group of grouped batching (Energon's ``batch_group_criterion``): its batch size, the
    samples waiting in it, oldest first, and, when none waits, ``witness``: the last sample
    that went into it, which names the group (its key is computed again from it)."""

    batch_size: int
    waiting: tuple[SampleRef, ...] = ()
    witness: SampleRef | None = None


class GroupsState(State, frozen=True, array_like=True):
    """Grouped batching's place: ``key``, the plan key the samples' keys are folded from, and
    every group seen, in the order it was first seen."""

    key: int
    groups: tuple[GroupRefs, ...] = ()


class LoaderState(State, Generic[P], frozen=True, array_like=True):
    """``plan``: plan state after the last delivered batch; ``batches`` / ``samples``: delivered
    so far; ``skipped``: samples the error policy skipped; ``epoch``: in global mode the
    global epoch of ``plan`` (:meth:`fpipe.core.Pipeline.position`: the highest epoch of any
    sample handed to any rank), so the state is the same bytes on every rank; in per-rank mode
    the highest epoch of this rank's batches so far (see :func:`state_epoch`).

    With a packing buffer (Energon's packing hooks), ``plan`` is the state at the start of the
    buffer holding the next pack and ``packs_taken`` counts that buffer's packs already
    delivered; ``pack_remainder`` counts samples of a dropped short final batch of packs.
    Snapshots written before these two fields existed decode with both at 0. With an
    ``encode_batch`` written as a generator (several batches from one recipe), ``plan`` is the
    state before the recipe whose batches are being delivered and ``packs_taken`` counts those
    already delivered (:mod:`fpipe.loader._recipe_batches`). With grouped batching
    (``batch_group_criterion``), ``plan`` is the state at the start of the recipe holding the
    next encoded sample, ``packs_taken`` counts that recipe's encoded samples already grouped,
    and ``groups`` holds the groups' waiting samples by reference
    (:mod:`fpipe.loader._group_batches`); None otherwise and in older snapshots;
    ``pack_remainder`` then counts the samples of the partly filled groups dropped at the end
    (``drop_last``).

    ``skip``: the global steps ``[a, b)`` this run leaves out (``loader.skip``, or the dataset's
    ``skip_steps``; see :mod:`fpipe.plan.skip`), kept so that a restore skips them too; at most
    :data:`~fpipe.plan.skip.MAX_SKIP_RANGES` pairs. Older snapshots decode with none.

    ``finished``: a ``for`` loop reached the end of the stream (or ``limit``), so the next loop
    is a new pass from the beginning. It is state, not a flag of the loader object, so a loader
    restored from a snapshot taken after a full pass (a validation loader's) plays the pass
    again, as the loader that saved it does. Older snapshots decode with False."""

    plan: P
    batches: int = 0
    samples: int = 0
    skipped: int = 0
    epoch: int = 0
    packs_taken: int = 0
    pack_remainder: int = 0
    skip: tuple[tuple[int, int], ...] = ()
    finished: bool = False
    groups: GroupsState | None = None


def state_epoch(plan: Pipeline, plan_state: Any, own: int) -> int:
    """``LoaderState.epoch`` for the plan state ``plan_state``: its global epoch where the plan
    has a global position (global mode: one value on every rank, where each rank's own highest
    epoch differs near an epoch boundary), else ``own``, this rank's highest epoch."""
    at = plan.position(plan_state)
    return own if at is None else at[0]


PACK_BUFFER_HINT = (
    "Energon's packing hooks (packing_buffer_size) pack each rank's own buffers, and a loader "
    "snapshot holds this rank's place among its buffer's packs: it continues only on the same "
    "rank, world size and packing_buffer_size. Save every rank's state (state_dict() on every "
    "rank, or save_state_global) and restore each on its own rank; to change the number of "
    "ranks, select packs in the plan tier instead (plan_stages=[fpipe.plan.pack(...)]), whose "
    "snapshots restore on any world size"
)


class PackBufferConfig(Config, frozen=True):
    """Recorded in the loader snapshots of a dataset with Energon's packing hooks: the rank, the
    world size and the buffer size its buffers were cut for. Nothing is declared compatible:
    ``packs_taken`` counts packs of this rank's buffer, which another partition cuts
    differently, so a restore with another value is refused."""

    mismatch_hint: ClassVar[str] = PACK_BUFFER_HINT

    rank: int
    world_size: int
    packing_buffer_size: int


GROUP_HINT = (
    "grouped batching (batch_group_criterion) groups each rank's own stream of samples, and a "
    "loader snapshot holds this rank's waiting samples and its place in a chunk of that "
    "stream: it continues only on the same rank, world size and batch size. Save every rank's "
    "state and restore each on its own rank"
)


class GroupChunkConfig(Config, frozen=True):
    """Recorded in the loader snapshots of a dataset with grouped batching: the rank, the world
    size and the samples per recipe (``chunk``) of the stream it groups. ``packs_taken`` counts
    encoded samples of this rank's chunk, so a restore with another value is refused."""

    mismatch_hint: ClassVar[str] = GROUP_HINT

    rank: int
    world_size: int
    chunk: int


def loader_parts(dataset: Any) -> tuple:
    """The config parts a loader snapshot of ``dataset`` records besides its plan's: with
    Energon's packing hooks, a :class:`PackBufferConfig`; with grouped batching, a
    :class:`GroupChunkConfig` (empty otherwise)."""
    topo = getattr(dataset, "topology", None)
    if getattr(dataset, "group_batches", False):
        chunk = int(dataset.materializer.recipe_size)
        return (("group_chunks", GroupChunkConfig(int(topo.rank), int(topo.world_size), chunk)),)
    size = getattr(dataset, "packing_buffer_size", None)
    if not size:
        return ()
    return (("pack_buffers", PackBufferConfig(int(topo.rank), int(topo.world_size), size)),)


def _parts(plan: Pipeline, extra: tuple) -> tuple:
    return plan.parts + tuple(extra) + (("loader", LoaderConfig()),)


def encode_loader_state(plan: Pipeline, state: LoaderState, extra: tuple = ()) -> bytes:
    """Snapshot bytes of a loader state; ``extra``: the dataset's :func:`loader_parts`."""
    return encode_state(_parts(plan, extra), state)


def decode_loader_state(plan: Pipeline, data: bytes, extra: tuple = ()) -> Any:
    """Check and decode loader snapshot bytes (see :func:`fpipe.core.snapshot.decode_state`),
    then the values of the restored state and each plan step's own check of its state (see
    :mod:`fpipe.core.state_check`). ``extra``: the dataset's :func:`loader_parts`."""
    state = decode_state(_parts(plan, extra), LoaderState[plan.source.state_type], data)
    check_values(state, LoaderState(plan.init()))
    _check_skip(state.skip)
    check_state(plan.source, state.plan, plan.init())
    return state


def _check_skip(skip: tuple) -> None:
    """A restored skip list is what :func:`normalize_step_ranges` makes (sorted, disjoint,
    bounded), or a SnapshotError."""
    try:
        ok = normalize_step_ranges(skip) == skip
    except ConfigError:
        ok = False
    if not ok:
        raise SnapshotError(
            f"snapshot state.skip {list(skip)[:4]}... is not a sorted list of at most "
            f"{MAX_SKIP_RANGES} disjoint [a, b) step ranges: the snapshot was edited or corrupted"
        )


def snapshot_bytes(value: Any) -> bytes:
    """The snapshot bytes in ``value``: ``bytes``, ``bytearray``, ``memoryview``, or a 1-D uint8
    numpy array or tensor (what some checkpoint round trips turn bytes into).

    Anything else raises :class:`SnapshotError` naming its type: an int would otherwise make
    ``bytes(2**40)`` allocate a terabyte.
    """
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if hasattr(value, "numpy") and hasattr(value, "dtype"):  # a tensor, without importing torch
        value = value.detach().cpu().numpy() if hasattr(value, "detach") else value.numpy()
    dtype = getattr(value, "dtype", None)
    if type(value).__module__ == "numpy" and dtype == "uint8" and value.ndim == 1:
        return value.tobytes()
    detail = f" with dtype {dtype} and shape {tuple(value.shape)}" if dtype is not None else ""
    raise SnapshotError(
        "snapshot must be bytes (or a 1-D uint8 array/tensor of them), got "
        f"{type(value).__name__}{detail}"
    )


@dataclasses.dataclass(frozen=True)
class LoaderStats:
    """Where the consumer is, and what it has been given.

    Global position (the same on every rank in global mode, also after a restore on another
    world size): ``epoch``, the highest epoch of any sample handed to any rank up to the last
    batch taken (it never goes back; with a shuffle window spanning an epoch boundary a step
    can still hold samples of the previous epoch), and ``position``, the number of refs of the
    global order handed out (all ranks; None in per-rank mode, where ``epoch`` is this rank's).

    Per rank: ``batches``, ``samples`` delivered, ``skipped`` by the error policy. Plan
    counters: ``dropped`` by cause (see fpipe.plan.drop_counters) and every step's own counters
    by step name (``steps["filter"]["filtered"]``). For a blend, ``datasets``: per dataset
    name, refs the blend took from it and its epoch (see fpipe.plan.blend.blend_counters).

    This loader object's worker faults recovered (``get_loader(recover_workers=True)``):
    ``recoveries``, and ``recovered`` by reason (``"died"``, ``"timed out"``,
    ``"out of memory"``). They are not part of the state: a recovered run's snapshots are those
    of an uninterrupted one.

    ``skip_steps``: the global step ranges ``[a, b)`` the run leaves out (``loader.skip``).

    ``io``: the reads this loader's workers made, summed over them (not part of the state):
    ``requests`` (ranged GETs on object storage), ``bytes_read``, ``hedges`` and
    ``hedge_wins`` (see docs/remote.md), ``slow_reads`` (reads of 0.5 s or more);
    read-ahead's ``read_ahead_ranges`` and ``read_ahead_bytes`` started, ``read_ahead_ready``
    (taken after their read had ended: a read the batch did not wait for),
    ``read_ahead_late`` (taken while in flight), ``slow_reads_hidden`` (slow reads that were
    ready), ``read_ahead_dropped``, ``read_ahead_failed`` (read again directly), and
    ``read_ahead_peak_bytes`` (the most bytes one worker held or had in flight).
    """

    batches: int
    samples: int
    skipped: int
    epoch: int
    dropped: dict
    steps: dict = dataclasses.field(default_factory=dict)
    position: int | None = None
    datasets: dict = dataclasses.field(default_factory=dict)
    recoveries: int = 0
    recovered: dict = dataclasses.field(default_factory=dict)
    skip_steps: tuple[tuple[int, int], ...] = ()
    io: dict = dataclasses.field(default_factory=dict, compare=False)  # a measure, not state
