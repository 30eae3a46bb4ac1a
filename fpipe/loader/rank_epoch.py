"""A rank's highest epoch in global mode, from counts: which refs of the newest epochs it got.

In global mode the counts say how far the global order went, not which refs one rank got, so a
seek plans its last steps and, where those hold an epoch below the global one, walks back over
more planned steps (:func:`fpipe.loader.seek._rank_epoch`). Far into a blend of many datasets
that walk can reach step 0: a rank taking 32 of 131,072 positions a step may not draw a small
dataset that runs ahead for hundreds of thousands of steps.

For a blend with the quota draw (:mod:`fpipe.plan.blend_quota`), an optional window shuffle,
global distribution and one batch per global batch, the answer follows from the plan's state
and metadata instead. Each dataset's ``j``-th ref (stream order) has epoch ``j // size`` and
sits at a blend position that the quota formula gives from ``j`` (its block by inverting the
block counts, its offset from the inverse of the block's keyed order); the window shuffle
sends that position to an output position (the inverse of its block's permutation), which is
step ``o // global_batch`` and rank ``(o % global_batch) // per_rank``. So for each epoch
``E`` above the known lower bound, highest first, the refs of epoch ``E`` of the datasets that
reached it are looked up until one lands on this rank before the target step: the first ``E``
that has one is the answer. A ref lands on a given rank with probability ``per_rank /
global_batch``, so an epoch that a rank did get is found after a few thousand refs.

Plans of other shapes (another draw, a weight schedule, online weight changes, skipped steps,
packing, a schedule of batch sizes, a tile view whose refs' epochs are passes) get None: the
seek plans its last steps and walks back. :func:`fpipe.loader.seek.seek_state` passes every
step of a plan this answers on counts and plans none.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpipe.core.graph import step_parts
from fpipe.core.pipeline import Pipeline
from fpipe.core.rng import fold_in, inverse_permutation
from fpipe.plan import WindowShuffleConfig
from fpipe.plan.batch import BatchConfig
from fpipe.plan.blend import choice_key
from fpipe.plan.blend_quota import QUOTA_BLOCK, QuotaPlan, QuotaSegment, quota_segment
from fpipe.plan.blend_state import BlendConfig, online_mix
from fpipe.plan.distribute import DistributeConfig
from fpipe.plan.slice_order import TileConfig

__all__ = ["answers_rank_epoch", "rank_epoch_on_counts"]


def answers_rank_epoch(plan: Pipeline) -> bool:
    """Whether :func:`rank_epoch_on_counts` answers for ``plan`` at every step reached with no
    weight change nor skipped step (a plan of the shape the module's docstring names)."""
    shape = _shape(plan)
    schedule = None if shape is None else shape[1].schedule
    return schedule is not None and len(schedule.points) == 1


def rank_epoch_on_counts(plan: Pipeline, target: int, state: Any, low: int) -> int | None:
    """The highest epoch of the refs this rank took in steps ``0..target-1``, at least
    ``low`` (a bound the caller knows: the epoch of its last steps), from ``state``, the plan's
    state before step ``target`` reached with no weight change nor skipped step (its keys and
    the blend's changes are read); None where the plan is not of the shape this answers (see
    the module's docstring)."""
    shape = _shape(plan)
    if shape is None:
        return None
    blend_name, config, window, dist = shape
    own = plan.get(state, blend_name)
    n = len(config.sizes)
    if online_mix(own, n) is not None:
        return None
    assert config.schedule is not None  # a quota blend is weighted
    starts, shares = QuotaPlan(config.schedule.points, config.schedule.weights, n).segments(())
    if len(starts) != 1:
        return None
    seg = quota_segment(choice_key(own.key, blend_name), 0, shares[0])
    # every ref delivered before the target is among the blend's first `end` positions (the
    # whole window blocks they fill; the blend state itself is held at its window's start)
    end = target * dist.global_batch_size
    if window is not None:
        end = -(-end // window) * window
    taken = seg.counts_at(end)
    sizes = np.asarray(config.sizes, dtype=np.int64)
    top = np.where(taken > 0, (taken - 1) // sizes, -1)
    wkey = None if window is None else plan.get(state, "window_shuffle").key
    lands = _Lands(seg, window, wkey, dist, target)
    for epoch in range(int(top.max(initial=-1)), low, -1):
        for d in np.flatnonzero(top >= epoch).tolist():
            lo = epoch * int(sizes[d])
            hi = min(lo + int(sizes[d]), int(taken[d]))
            if lands.any_of(d, lo, hi):
                return epoch
    return low


def _shape(plan: Pipeline) -> tuple[str, BlendConfig, int | None, DistributeConfig] | None:
    """``(blend name, its config, window size or None, distribution)`` of a plan ``blend
    (quota draw, forever, views without tiles) -> [window_shuffle] -> distribute -> batch``
    of one batch per global batch; None for any other plan."""
    steps = step_parts(plan.source)
    top = [(path, c) for path, c in steps if "/" not in path]
    configs = [c for _, c in top]
    kinds = [type(c) for c in configs]
    with_window = [BlendConfig, WindowShuffleConfig, DistributeConfig, BatchConfig]
    if kinds not in (with_window, [BlendConfig, DistributeConfig, BatchConfig]):
        return None
    blend_path = top[0][0]
    config, dist, batch, window_config = configs[0], configs[-2], configs[-1], configs[1]
    assert isinstance(config, BlendConfig) and isinstance(dist, DistributeConfig)
    assert isinstance(batch, BatchConfig)  # the kinds above
    # a tile's refs carry their pass as epoch, not their stream epoch
    tiled = any(isinstance(c, TileConfig) for path, c in steps if path.startswith(blend_path + "/"))
    if (
        config.mode != "weighted"
        or config.draw != "quota"
        or config.unit is not None
        or config.num_epochs is not None
        or config.schedule is None
        or tiled
        or batch.batch_size != dist.global_batch_size // dist.world_size
        or (len(top) == 4 and top[1][0] != "window_shuffle")
    ):
        return None
    window = window_config.window_size if isinstance(window_config, WindowShuffleConfig) else None
    return blend_path, config, window, dist


class _Lands:
    """Whether refs of a dataset's stream land on this rank before the target step."""

    def __init__(
        self,
        seg: QuotaSegment,
        window: int | None,
        wkey: Any,
        dist: DistributeConfig,
        target: int,
    ):
        self.seg, self.window, self.wkey, self.target = seg, window, wkey, target
        self.batch = dist.global_batch_size
        self.per = dist.global_batch_size // dist.world_size
        self.rank = dist.rank

    def block_of_ref(self, d: int, j: int) -> int:
        """The quota block holding dataset ``d``'s ``j``-th ref: the last ``k`` with
        ``c_d(k) <= j``, i.e. ``k * B * q + phi < (j + 1) * W`` (Python integers: exact)."""
        q, phi, w = int(self.seg.shares[d]), int(self.seg.phase[d]), self.seg.total
        return ((j + 1) * w - phi - 1) // (QUOTA_BLOCK * q)

    def any_of(self, d: int, lo: int, hi: int) -> bool:
        """Whether any of refs ``lo..hi-1`` of dataset ``d`` lands on this rank before the
        target step (the blocks that hold them, last first, each found from the ref before)."""
        if hi <= lo:
            return False
        k = self.block_of_ref(d, hi - 1)
        while True:
            before, after = self.seg.counts(k), self.seg.counts(k + 1)
            first, last = int(before[d]), int(after[d])  # d's refs first..last-1 in block k
            m = after - before
            slots = int(m[:d].sum()) + np.arange(int(m[d]), dtype=np.int64)
            size = int(m.sum())
            offsets = np.sort(inverse_permutation(fold_in(self.seg.order_key, k), size, slots))
            take = offsets[max(lo, first) - first : min(hi, last) - first]
            if len(take) and self.on_rank(int(before.sum()) + take):
                return True
            if first <= lo:
                return False
            k = self.block_of_ref(d, first - 1)  # the block of d's previous ref

    def on_rank(self, positions: np.ndarray) -> bool:
        """Whether any of these blend positions is output to this rank before the target."""
        out = positions
        if self.window is not None:
            blocks = positions // self.window
            out = np.empty_like(positions)
            for b in np.unique(blocks).tolist():
                sel = blocks == b
                inner = inverse_permutation(
                    fold_in(self.wkey, b), self.window, positions[sel] - b * self.window
                )
                out[sel] = b * self.window + inner
        step, slot = out // self.batch, out % self.batch
        mine = (step < self.target) & (slot // self.per == self.rank)
        return bool(mine.any())
