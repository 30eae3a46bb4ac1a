"""Grouped batching in global mode: every step takes one group for all ranks.

The algorithm behind :func:`fpipe.plan.bucket_batches` and :func:`fpipe.plan.group_batches`,
as pure functions over one *window* (a block of consecutive positions of an epoch, the whole
epoch by default):

- the window's refs are gathered and split into groups by an assigner on their metadata;
  each group ``g`` has a per-rank batch size ``bs[g]``, so a global batch of it holds
  ``bs[g] * world_size`` refs, taken from the group's members in a keyed order of the window
  (as OpenSora shuffles each bucket every epoch), or in window order with ``shuffle=False``;
- at each step the group is drawn with weights equal to the number of *full* global batches
  it has left, by ``choice(fold_in(key, epoch, block, step_in_block), weights)``: a shuffled
  order of the window's batches, as OpenSora's sampler shuffles its per-bucket batches, so a
  bucket's share of steps converges to (samples kept in it / its batch size), normalized;
- rank ``r`` takes refs ``[r * bs[g], (r + 1) * bs[g])`` of the global batch: every rank has
  the same group, and so the same shapes, at every step, without communication;
- when no group has a full global batch left, the leftovers follow the remainder policy
  (dropped and counted, or one short global batch per group split over the ranks, for groups
  with at least one leftover per rank: a rank never gets an empty batch), and the next window
  starts.

The state is where the stream is (epoch, window, steps) plus the refs consumed per group of
the window: a few integers per group, counted in refs, not batches, so a restore on another
world size continues the same window with the new global batch sizes (elastic resume). A
restore recomputes one window of metadata.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.core.graph import step_key
from fpipe.core.records import Recipe, Refs, State
from fpipe.core.rng import Key, choice, fold_in, permutation
from fpipe.plan.buckets._count import make_advance

__all__ = ["GroupBatchState", "Window", "make_next"]

# fold_in tags: the step's group draw, per-sample keys, the in-group shuffle of a window
_CHOOSE, _SAMPLE, _SHUFFLE = 0xB0C7E7, 0x5A3F1E, 0x5B0F1E


class GroupBatchState(State, frozen=True, array_like=True):
    """Where a grouped batching stream is; the same value on every rank in global mode.

    ``key``: the plan's root key (the view folds its own name into it; this step's decisions
    use ``step_key(key, name)``); ``epoch``, ``block``: the current window; ``step``: recipes
    emitted (global steps); ``block_step``: steps taken in this window; ``entered``: whether
    the window's unfit and rejected refs are counted yet; ``consumed``: refs taken per group of
    the window (one entry per bucket; for groups of a criterion, per group of the window in
    order of first appearance, ``()`` before the window is entered); ``dropped``: refs of
    leftovers dropped at the end of windows; ``unfit``: refs that fit no group; ``rejected``:
    refs that fit but whose probability draws all said no (a new draw every epoch).
    """

    key: Key
    epoch: int = 0
    block: int = 0
    step: int = 0
    block_step: int = 0
    entered: bool = False
    consumed: tuple[int, ...] = ()
    dropped: int = 0
    unfit: int = 0
    rejected: int = 0


class Window(NamedTuple):
    """One window's refs split into groups (a pure function of key, epoch and block)."""

    groups: tuple  # per group: its refs (Refs), in the order batches take them
    sizes: tuple  # per group: number of refs
    batch_sizes: tuple  # per group: refs per rank and step (0: never batched)
    ids: tuple  # per group: the id a recipe carries in ``bucket``
    shapes: tuple  # per group: the shape a recipe carries in ``shape`` (``()``: none)
    unfit: int
    rejected: int


#: ``(refs, key) -> (group id per ref, batch size per group, recipe id per group, shape per
#: group)``; group id -1: fits no group, -2: rejected by probability.
Assigner = Callable[[Refs, Key], tuple[np.ndarray, np.ndarray, tuple, tuple]]


def make_window(refs: Refs, assign: Assigner, key: Key, shuffle_key: Key | None) -> Window:
    """Split ``refs`` into groups with the :data:`Assigner` ``assign``. Members keep the
    window's order, or are permuted per group by ``shuffle_key``."""
    gid, bs, ids, shapes = assign(refs, key)
    gid = np.asarray(gid, dtype=np.int64)
    # small ints: a stable radix sort, O(n)
    order = np.argsort(gid.astype(np.int16 if len(bs) < 2**15 - 2 else np.int64), kind="stable")
    bounds = np.searchsorted(gid[order], np.arange(len(bs) + 1))
    members = tuple(order[bounds[g] : bounds[g + 1]] for g in range(len(bs)))
    if shuffle_key is not None:
        members = tuple(
            m[permutation(fold_in(shuffle_key, g), len(m))] for g, m in enumerate(members)
        )
    return Window(
        groups=tuple(refs[m] for m in members),
        sizes=tuple(len(m) for m in members),
        batch_sizes=tuple(int(b) for b in bs),
        ids=tuple(int(i) for i in ids),
        shapes=tuple(tuple(int(x) for x in sh) for sh in shapes),
        unfit=int((gid == -1).sum()),
        rejected=int((gid == -2).sum()),
    )


def make_next(
    *,
    size: int,
    window: int | None,
    num_epochs: int | None,
    take: Callable[[Key, int, np.ndarray], Refs],
    assign: Assigner,
    rank: int,
    world_size: int,
    keep_remainder: bool,
    num_groups: int | None,
    shuffle: bool,
    name: str,
    drawn: bool = True,
    retags_epochs: bool = False,
):
    """The ``next`` and ``advance`` functions of a grouped batching source over an epoch of
    ``size`` refs (``advance``: see :mod:`fpipe.plan.buckets._count`).

    ``take(key, epoch, positions)`` gathers positions of an epoch; windows are
    ``[b * window, (b + 1) * window)`` (``window=None``: the whole epoch). ``drawn``: the
    assigner draws (a keep-or-not per sample and epoch), so the groups of each epoch differ;
    ``retags_epochs``: the view's refs carry epochs other than the view's (a tile's passes).
    """
    win = window or size
    num_blocks = -(-size // win) if size else 0
    zeros = (0,) * (num_groups or 0)

    @functools.lru_cache(maxsize=4)
    def get_window(root: Key, epoch: int, block: int) -> tuple[Window, tuple, Key, Key]:
        # A memo of a pure function: the window's refs and groups, the key the window's group
        # draws fold their step into, and the per-sample key root of its recipes. The view
        # gets the plan's root (it folds its own name in); this step's key is step_key(root,
        # name).
        key = step_key(root, name)
        lo = block * win
        positions = np.arange(lo, min(lo + win, size), dtype=np.int64)
        shuffle_key = fold_in(key, _SHUFFLE, epoch, block) if shuffle else None
        w = make_window(take(root, epoch, positions), assign, key, shuffle_key)
        per_step = tuple(b * world_size for b in w.batch_sizes)  # refs of a global batch
        return w, per_step, fold_in(key, _CHOOSE, epoch, block), fold_in(key, _SAMPLE)

    def one(state: GroupBatchState) -> tuple[GroupBatchState, Recipe | None]:
        empty_blocks = 0
        while True:
            key, epoch, block = state.key, state.epoch, state.block
            if (num_epochs is not None and epoch >= num_epochs) or num_blocks == 0:
                return state, None
            w, per_step, choose_key, sample_key = get_window(key, epoch, block)
            if not state.entered:  # entering the window: count what it leaves out
                state = GroupBatchState(
                    key, epoch, block, state.step, 0, True, (0,) * len(w.batch_sizes),
                    state.dropped, state.unfit + w.unfit, state.rejected + w.rejected,
                )  # fmt: skip
            consumed = state.consumed
            full = [(n - c) // p if p else 0 for n, c, p in zip(w.sizes, consumed, per_step)]
            if any(full):
                g = choice(choose_key, full, state.block_step)
                bs = w.batch_sizes[g]
                lo = consumed[g] + rank * bs
                recipe = Recipe(
                    step=state.step,
                    refs=w.groups[g][lo : lo + bs],
                    key=sample_key,
                    bucket=w.ids[g],
                    shape=w.shapes[g],
                )
                return _advance(state, g, per_step[g]), recipe
            left = [n - c for n, c in zip(w.sizes, consumed)]
            # a short global batch needs a ref for every rank, or a rank would get an empty
            # batch and fall a step behind the others; fewer leftovers are dropped (counted)
            rest_g = next((g for g, x in enumerate(left) if x >= world_size), None)
            if keep_remainder and rest_g is not None:
                lo = state.consumed[rest_g]
                cut = np.linspace(0, left[rest_g], world_size + 1).round().astype(np.int64)
                refs = w.groups[rest_g][lo + int(cut[rank]) : lo + int(cut[rank + 1])]
                recipe = Recipe(
                    step=state.step,
                    refs=refs,
                    key=sample_key,
                    bucket=w.ids[rest_g],
                    shape=w.shapes[rest_g],
                )
                return _advance(state, rest_g, left[rest_g]), recipe
            dropped = state.dropped + sum(left)
            epoch, block = (epoch, block + 1) if block + 1 < num_blocks else (epoch + 1, 0)
            state = GroupBatchState(
                key, epoch, block, state.step, 0, False, zeros, dropped, state.unfit,
                state.rejected,
            )  # fmt: skip
            empty_blocks += 1
            if num_epochs is None and empty_blocks > num_blocks:
                raise ConfigError(
                    f"{name}: a whole epoch gave no batch: no group has {world_size} x its "
                    f"batch size of samples (check the metadata columns and the groups' batch "
                    f"sizes; unfit so far: {state.unfit}, rejected: {state.rejected})"
                )

    def _advance(state: GroupBatchState, g: int, n: int) -> GroupBatchState:
        consumed = list(state.consumed)
        consumed[g] += n
        return GroupBatchState(
            state.key, state.epoch, state.block, state.step + 1, state.block_step + 1, True,
            tuple(consumed), state.dropped, state.unfit, state.rejected,
        )  # fmt: skip

    def next_(state: GroupBatchState, n: int):
        out: list[Recipe] = []
        while len(out) < n:
            state, recipe = one(state)
            if recipe is None:
                break
            out.append(recipe)
        return state, tuple(out)

    advance = make_advance(
        get_window=get_window,
        state_type=GroupBatchState,
        num_blocks=num_blocks,
        window=win,
        num_epochs=num_epochs,
        rank=rank,
        world_size=world_size,
        keep_remainder=keep_remainder,
        zeros=zeros,
        same_every_epoch=num_blocks == 1 and not drawn,
        retags_epochs=retags_epochs,
        name=name,
    )
    return next_, advance
