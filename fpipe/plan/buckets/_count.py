"""Passing many steps of grouped batching on counts (what a seek runs).

A window's steps (see :mod:`fpipe.plan.buckets.group_batch`) follow from its groups' sizes
alone: every step takes a full global batch of some group while one is left, then (keeping
remainders) one short batch of each group with a ref for every rank, in group order. So a
whole window is passed from its sizes, without drawing its steps' groups one by one; only the
window a run stops in draws them (integers only, no recipe built). Each window's groups come
from its refs' metadata (a keyed keep-or-not draw per sample and epoch), so a window is read
for each one passed; where the groups are the same in every epoch (``same_every_epoch``: the
window is the whole epoch and nothing is drawn), one epoch is read and the whole epochs after
it are passed by arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fpipe.core.advance import Passed, check_one_by_one, check_state_int
from fpipe.core.errors import ConfigError
from fpipe.core.rng import choice

__all__ = ["make_advance"]


def make_advance(
    *,
    get_window: Callable,
    state_type: type,
    num_blocks: int,
    window: int,
    num_epochs: int | None,
    rank: int,
    world_size: int,
    keep_remainder: bool,
    zeros: tuple,
    same_every_epoch: bool,
    retags_epochs: bool,
    name: str,
) -> Callable:
    """The ``advance(state, n) -> (state, Passed)`` of a grouped batching source: the state
    ``next`` reaches after ``n`` steps (fewer at the end), and this rank's refs in them."""
    S = state_type

    def ended(state) -> bool:
        return (num_epochs is not None and state.epoch >= num_epochs) or num_blocks == 0

    def plan(w, per_step, consumed):
        """The rest of a window from ``consumed``: full batches left per group, the groups
        of the short batches, and what each group has left after its full batches."""
        full = [(n - c) // p if p else 0 for n, c, p in zip(w.sizes, consumed, per_step)]
        left = [n - c - f * p for n, c, f, p in zip(w.sizes, consumed, full, per_step)]
        rest = [g for g, x in enumerate(left) if x >= world_size] if keep_remainder else []
        return full, left, rest

    def rank_part(w, per_step, consumed, taken, rest) -> tuple[int, int]:
        """This rank's refs, and their highest epoch (-1: none), in ``taken[g]`` full batches
        of each group from ``consumed`` and the short batches of the groups ``rest``."""
        refs, top = 0, -1
        for g, f in enumerate(taken):
            if not f:
                continue
            bs, p, c = w.batch_sizes[g], per_step[g], consumed[g]
            refs += f * bs
            if retags_epochs:
                epochs = w.groups[g].epoch[c : c + f * p].reshape(f, p)
                top = max(top, int(epochs[:, rank * bs : (rank + 1) * bs].max()))
        for g in rest:
            lo = consumed[g] + taken[g] * per_step[g]
            cut = np.linspace(0, w.sizes[g] - lo, world_size + 1).round().astype(np.int64)
            part = w.groups[g].epoch[lo + int(cut[rank]) : lo + int(cut[rank + 1])]
            refs += len(part)
            if len(part) and retags_epochs:
                top = max(top, int(part.max()))
        return refs, top

    def draw(w, per_step, choose_key, state, k, full):
        """Full batches of each group taken by the next ``k`` steps (``k <= sum(full)``):
        ``one``'s draws, on the counts alone."""
        full, taken = list(full), [0] * len(full)
        for i in range(k):
            g = choice(choose_key, full, state.block_step + i)
            full[g] -= 1
            taken[g] += 1
        return taken

    def advance(state, n: int):
        done = refs = empty = 0
        top = -1
        while done < n and not ended(state):
            key, epoch, block = state.key, state.epoch, state.block
            w, per_step, choose_key, _ = get_window(key, epoch, block)
            fresh = not state.entered
            if fresh:  # as one() enters a window
                state = S(key, epoch, block, state.step, 0, True, (0,) * len(w.batch_sizes),
                          state.dropped, state.unfit + w.unfit,
                          state.rejected + w.rejected)  # fmt: skip
            full, left, rest = plan(w, per_step, state.consumed)
            steps = sum(full) + len(rest)
            k = min(n - done, steps)
            if k < sum(full):  # the run stops among the full batches: draw their groups
                taken, rest = draw(w, per_step, choose_key, state, k, full), []
            else:
                taken, rest = full, rest[: k - sum(full)]
            got, high = rank_part(w, per_step, state.consumed, taken, rest)
            refs, done = refs + got, done + k
            if got:
                top = max(top, high if retags_epochs else epoch)
            consumed = [c + f * p for c, f, p in zip(state.consumed, taken, per_step)]
            for g in rest:
                consumed[g] = w.sizes[g]
            state = S(key, epoch, block, state.step + k, state.block_step + k, True,
                      tuple(consumed), state.dropped, state.unfit, state.rejected)  # fmt: skip
            if done == n:
                break
            # the window is used up: one() goes on to the next
            drop = sum(x for g, x in enumerate(left) if g not in rest)
            epoch, block = (epoch, block + 1) if block + 1 < num_blocks else (epoch + 1, 0)
            state = S(key, epoch, block, state.step, 0, False, zeros, state.dropped + drop,
                      state.unfit, state.rejected)  # fmt: skip
            empty = empty + 1 if not steps else 1  # one() counts the used-up window too
            if num_epochs is None and empty > num_blocks:
                raise ConfigError(
                    f"{name}: a whole epoch gave no batch: no group has {world_size} x its "
                    f"batch size of samples (check the metadata columns and the groups' batch "
                    f"sizes; unfit so far: {state.unfit}, rejected: {state.rejected})"
                )
            if not steps:
                continue
            if same_every_epoch and fresh:
                # every epoch as the one just passed: whole ones by arithmetic, leaving the
                # last steps (at least one, and the last epoch) to a window that is read
                whole = (n - done - 1) // steps
                if num_epochs is not None:
                    whole = min(whole, num_epochs - epoch - 1)
                if whole > 0:
                    state = S(key, epoch + whole, 0, state.step + whole * steps, 0, False,
                              zeros, state.dropped + whole * drop,
                              state.unfit + whole * w.unfit,
                              state.rejected + whole * w.rejected)  # fmt: skip
                    top_count = max(state.step, state.dropped, state.unfit, state.rejected)
                    check_state_int(top_count, f"{name}: the steps and refs counted")
                    refs, done = refs + whole * got, done + whole * steps
            else:  # each window read: refuse what would take longer than any run
                windows = (n - done) // steps
                what = f"refs of {name}'s windows (each one's groups drawn from its samples)"
                check_one_by_one(windows * window, what)
        return state, Passed(done, refs, max(top, 0))

    return advance
