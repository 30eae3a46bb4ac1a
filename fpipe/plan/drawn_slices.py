"""Slices drawn with replacement: Energon's ``shuffle_over_epochs_multiplier=-1``, as a view.

Energon reads, forever, a slice drawn uniformly at random from all slices after each slice it
finishes (with replacement: a slice may come twice before another comes once). fpipe cuts that
endless draw into epochs of the view's size: epoch ``e`` is the slices drawn at
``(key, e, 0)``, ``(key, e, 1)``, ... (each uniform over the slices, keyed by where it is
drawn) until they cover ``size`` positions; the last one drawn is cut at the epoch's end. Each
drawn slice's refs get their own epoch number, ``e * size + d`` for the ``d``-th draw, so a
sample drawn twice gets two random keys (two augmentations) and two restore keys.

The epoch's layout is O(draws) numbers, recomputed from (key, epoch) when needed: nothing of
it is state, so a restore is exact and recomputes one epoch's draws.
"""

from __future__ import annotations

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.core.graph import step_key
from fpipe.core.records import Refs
from fpipe.core.rng import Key, fold_in, fold_in_array
from fpipe.core.stage import View
from fpipe.plan.shard_slices import RaggedSlices, RaggedSliceShuffleConfig
from fpipe.plan.source import _digest

__all__ = ["DrawnSliceConfig", "DrawnSlices", "drawn_slices"]


class DrawnSliceConfig(RaggedSliceShuffleConfig, frozen=True):
    """Draw ``num_slices`` slices of consecutive positions (given by their starts: a digest)
    with replacement, until an epoch's positions are covered."""

    replacement: bool = True


class DrawnSlices(RaggedSlices):
    """The slices of :class:`~fpipe.plan.shard_slices.RaggedSlices`, drawn with replacement in
    each epoch (see the module doc); an interleave above reads its layout as it reads a
    shuffle's."""

    def __init__(self, starts: np.ndarray, size: int, *, name: str = "slice_draw"):
        super().__init__(starts, size, name=name)
        self.config = DrawnSliceConfig(num_slices=len(self.starts), starts=_digest(self.starts))

    def draws(self, root: Key, epoch: int) -> np.ndarray:
        """The slices drawn in ``epoch``, in order, until they cover the epoch's positions."""
        num, k = len(self.starts), fold_in(step_key(root, self.name), epoch)
        chunks: list[np.ndarray] = []
        covered, d = 0, 0
        while covered < self.size:
            n = max(num, 16)  # a chunk of draws; most epochs need about `num`
            bits = fold_in_array(k, np.arange(d, d + n, dtype=np.int64))
            drawn = ((bits >> np.uint64(11)).astype(np.float64) * (num / (1 << 53))).astype(
                np.int64
            )
            ends = covered + np.cumsum(self.lengths[drawn])
            stop = int(np.searchsorted(ends, self.size, side="left")) + 1
            chunks.append(drawn[:stop])
            covered = int(ends[min(stop, n) - 1])
            d += n
        return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)

    def _layout(self, root: Key, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        order = self.draws(root, epoch)
        lengths = self.lengths[order]
        ends = np.minimum(np.cumsum(lengths), self.size)  # the last draw is cut at the end
        shift = self.starts[order] - (np.cumsum(lengths) - lengths)
        shift.flags.writeable = ends.flags.writeable = False
        return shift, ends


def drawn_slices(view: View, slices: DrawnSlices) -> View:
    """A view whose epoch e reads the slices of ``view`` that ``slices`` draws in epoch e,
    each slice in order; each draw's refs carry their own epoch ``e * size + draw``.

    Example:
        >>> from fpipe.plan.source import samples
        >>> s = DrawnSlices(np.array([0, 2, 4]), 6)
        >>> out = drawn_slices(samples(6), s).gather(3, 0, np.arange(6))
        >>> len(out), all(i % 2 == 0 for i in out.index.tolist()[::2])
        (6, True)
    """
    if slices.size != view.size:
        raise ConfigError(f"slices cover {slices.size} positions, the view has {view.size}")
    inner, size = view.gather, view.size

    def gather(root, epoch, positions):
        p = np.asarray(positions, dtype=np.int64)
        shift, ends = slices.layout(root, epoch)
        draw = np.searchsorted(ends, p, side="right")
        refs = inner(root, epoch, p + shift[draw])
        columns = dict(refs.columns)
        columns["epoch"] = np.int64(epoch) * size + draw
        return Refs.wrap(columns)

    return View(name=slices.name, config=slices.config, size=size, gather=gather,
                inputs=(view,))  # fmt: skip
