"""Shuffling: slices of consecutive samples (random access), then a window shuffle (blocks).

``slice_shuffle`` permutes slices of ``slice_size`` consecutive samples per epoch, keeping the
samples inside a slice in order, so reads stay sequential for ``slice_size`` samples (Energon's
``max_samples_per_sequence``). ``window_shuffle`` then permutes each block of
``window_size`` refs (Energon's ``shuffle_buffer_size``): its state is the upstream state at the
block start plus a cursor, never the buffered refs.
"""

from __future__ import annotations

import functools

import numpy as np

from fpipe.core.advance import BlockAdvance, Passed
from fpipe.core.errors import ConfigError
from fpipe.core.graph import step_key
from fpipe.core.records import Config, Refs, State
from fpipe.core.rng import Key, fold_in, inverse_permutation, permutation
from fpipe.core.stage import Stage, View

__all__ = [
    "SliceShuffleConfig",
    "WindowShuffleConfig",
    "WindowShuffleState",
    "slice_shuffle",
    "window_shuffle",
]


_SLOT_BLOCK = 1024  # slots permuted together when a stream reads a view in order
# A range over more than _LOOP_SLICES slices of at most _SHORT_SLICE samples is cut with array
# ops over its positions, others slice by slice (one step of that loop costs about what array
# ops over a dozen positions do).
_LOOP_SLICES = 16
_SHORT_SLICE = 16


class SliceShuffleConfig(Config, frozen=True):
    """Permute slices of ``slice_size`` consecutive positions; a new order every epoch."""

    slice_size: int


def slice_shuffle(view: View, slice_size: int, *, name: str = "slice_shuffle") -> View:
    """A view whose epoch e visits the slices of ``view`` in a keyed order of epoch e.

    The last slice may be short; it lands wherever the permutation puts it. Random access:
    position -> (slice slot, offset) -> source position, O(1) memory.

    Example:
        >>> from fpipe.plan.source import samples
        >>> v = slice_shuffle(samples(10), 3)
        >>> sorted(v.gather(1, 0, np.arange(10)).index.tolist()) == list(range(10))
        True
    """
    if slice_size < 1:
        raise ConfigError(f"slice_size (max_samples_per_sequence) must be >= 1, got {slice_size}")
    n, k = view.size, slice_size
    num_slices = -(-n // k)
    short = n - (num_slices - 1) * k if n else 0  # length of the last slice
    inner = view.gather
    config = SliceShuffleConfig(slice_size=slice_size)

    @functools.lru_cache(maxsize=8)
    def epoch_params(root, epoch):
        # Pure memo: the epoch's key and the slot where the short last slice lands.
        ek = fold_in(step_key(root, name), epoch)
        return ek, int(inverse_permutation(ek, num_slices, num_slices - 1))

    @functools.lru_cache(maxsize=8)
    def slot_block(ek, b) -> list[int]:
        # Pure memo: where slots b * _SLOT_BLOCK ... go, permuted at once (a stream reads the
        # slots of an epoch in order: one numpy call per block instead of one per slice).
        lo = b * _SLOT_BLOCK
        slots = np.arange(lo, min(lo + _SLOT_BLOCK, num_slices), dtype=np.int64)
        return permutation(ek, num_slices, slots).tolist()

    @functools.lru_cache(maxsize=8)
    def slot_array(ek, b) -> np.ndarray:
        # Pure memo: slot_block(ek, b) as an array, for ranges cut with array ops.
        return np.array(slot_block(ek, b), dtype=np.int64)

    def slots(q, p):
        # (slot, offset in it) of positions p, the short last slice being in slot q
        before = p < q * k
        in_short = (~before) & (p < q * k + short)
        r = p - short  # after the short slice: as if it were not there, one slot later
        slot = np.where(before, p // k, np.where(in_short, q, r // k + 1))
        offset = np.where(before, p % k, np.where(in_short, p - q * k, r % k))
        return slot, offset

    def gather(root, epoch, positions):
        if num_slices <= 1:
            return inner(root, epoch, positions)
        ek, q = epoch_params(root, epoch)
        slot, offset = slots(q, np.asarray(positions, dtype=np.int64))
        lo, hi = (int(slot.min()), int(slot.max())) if len(slot) else (0, -1)
        if hi - lo < len(slot):
            # Consecutive positions share slots: permute each distinct slot once.
            sl = permutation(ek, num_slices, np.arange(lo, hi + 1))[slot - lo]
        else:
            sl = permutation(ek, num_slices, slot)
        return inner(root, epoch, sl * k + offset)

    def gather_range(root, epoch, start, stop):
        # positions start..stop-1 in order (what repeat asks for): walk the few slices they
        # cover with integer arithmetic instead of array ops over every position; many short
        # slices (max_samples_per_sequence=1 is one per sample) with array ops.
        if num_slices <= 1:
            return inner(root, epoch, np.arange(start, stop, dtype=np.int64))
        ek, q = epoch_params(root, epoch)
        if k <= _SHORT_SLICE and stop - start > _LOOP_SLICES * k:
            slot, offset = slots(q, np.arange(start, stop, dtype=np.int64))
            b0, b1 = int(slot[0]) // _SLOT_BLOCK, int(slot[-1]) // _SLOT_BLOCK
            blocks = [slot_array(ek, b) for b in range(b0, b1 + 1)]
            order = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
            return inner(root, epoch, order[slot - b0 * _SLOT_BLOCK] * k + offset)
        pieces, pos = [], start
        while pos < stop:
            if pos < q * k:
                slot, offset, length = pos // k, pos % k, k
            elif pos < q * k + short:
                slot, offset, length = q, pos - q * k, short
            else:
                r = pos - short
                slot, offset, length = r // k + 1, r % k, k
            take = min(stop - pos, length - offset)
            first = slot_block(ek, slot // _SLOT_BLOCK)[slot % _SLOT_BLOCK] * k + offset
            pieces.append(np.arange(first, first + take, dtype=np.int64))
            pos += take
        if len(pieces) == 1:
            return inner(root, epoch, pieces[0])
        return inner(root, epoch, np.concatenate(pieces) if pieces else np.zeros(0, np.int64))

    return View(
        name=name,
        config=config,
        size=n,
        gather=gather,
        gather_range=gather_range,
        inputs=(view,),
    )


class WindowShuffleConfig(Config, frozen=True):
    """Permute each block of ``window_size`` consecutive refs of the stream."""

    window_size: int


class WindowShuffleState(State, frozen=True, array_like=True):
    """``key``: the stage key; ``block``: index of the next block to shuffle."""

    key: Key
    block: int = 0


def window_shuffle(window_size: int, *, name: str = "window_shuffle") -> Stage:
    """Shuffle within blocks of ``window_size`` refs (a keyed permutation per block).

    A restore recomputes one block of refs (metadata only). Blocks follow the stream, so a
    block may hold the end of one epoch and the start of the next, as a shuffle buffer does.
    """
    if window_size < 1:
        raise ConfigError(f"window_size (shuffle_buffer_size) must be >= 1, got {window_size}")

    def step(state: WindowShuffleState, chunk: Refs):
        perm = permutation(fold_in(state.key, state.block), len(chunk))
        return WindowShuffleState(state.key, state.block + 1), chunk[perm]

    def advance(state: WindowShuffleState, blocks: int, inputs: Passed):
        # a whole block emits its refs, permuted: the same refs, the same highest epoch
        return WindowShuffleState(state.key, state.block + blocks), inputs

    return Stage(
        name=name,
        config=WindowShuffleConfig(window_size=window_size),
        init=lambda key: WindowShuffleState(key, 0),
        step=step,
        state_type=WindowShuffleState,
        block_size=window_size,
        advance=BlockAdvance(window_size, advance),
    )
