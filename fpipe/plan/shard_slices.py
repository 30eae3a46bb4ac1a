"""Slices that follow the data's shards (Energon's sharder), shuffled as a view.

fpipe's :func:`fpipe.plan.slice_shuffle` cuts a split into slices of exactly
``max_samples_per_sequence`` positions, across shard boundaries (None: one sample each, a full
permutation). Energon cuts differently: a slice never crosses a shard, nor the part of one of
its workers, and ``max_samples_per_sequence=None`` means no limit: a shard is read whole, in
order, and only the order of the slices is shuffled. With a limit ``k``, a shard longer than
``1.5 * k`` is cut into ``round(len / k)`` slices of nearly equal length (a shorter shard stays
whole). :func:`shard_slice_starts` gives those slices' start positions and
:func:`ragged_slice_shuffle` visits them in a keyed order per epoch. With slices of equal length
the order is :func:`fpipe.plan.slice_shuffle`'s (the same key, the same permutation of slices).

The slices' layout in an epoch's order (:class:`RaggedSlices`) is O(number of slices) numbers,
recomputed from (key, epoch) when needed: nothing of it is state.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.core.graph import step_key
from fpipe.core.records import Config
from fpipe.core.rng import Key, fold_in, permutation
from fpipe.core.stage import View
from fpipe.plan.source import _digest

__all__ = ["RaggedSliceShuffleConfig", "RaggedSlices", "ragged_slice_shuffle", "shard_slice_starts"]


def shard_slice_starts(
    shard_ids: np.ndarray | None,
    size: int,
    max_samples_per_sequence: int | None,
    cuts: Sequence[int] = (),
) -> np.ndarray:
    """Start positions of Energon's slices of ``size`` positions (see the module doc).

    ``shard_ids``: the shard of each position (None: one shard, as a table's); ``cuts``: more
    positions where a slice must start (where a worker's part begins).

    Example:
        >>> shard_slice_starts(np.array([0, 0, 0, 1, 1]), 5, None).tolist()
        [0, 3]
        >>> shard_slice_starts(None, 10, 3).tolist()  # round(10 / 3) = 3 slices of 10 / 3
        [0, 3, 6]
        >>> shard_slice_starts(None, 4, 3).tolist()  # not longer than 1.5 * 3: whole
        [0]
    """
    k = max_samples_per_sequence
    if k is not None and k < 1:
        raise ConfigError(f"max_samples_per_sequence must be >= 1 or None, got {k}")
    if size == 0:
        return np.zeros(0, dtype=np.int64)
    bounds = {0, size, *(int(c) for c in cuts if 0 < c < size)}
    if shard_ids is not None:
        if len(shard_ids) != size:
            raise ConfigError(f"shard_ids has {len(shard_ids)} entries for {size} positions")
        bounds.update((np.flatnonzero(np.diff(shard_ids)) + 1).tolist())
    edges = sorted(bounds)
    starts = []
    for a, b in zip(edges, edges[1:]):
        n = b - a
        if k is None or n <= k * 1.5:
            starts.append(np.array([a], dtype=np.int64))
            continue
        count = max(round(n / k), 1)
        per_slice = n / count  # Energon's float steps: start i is a + int(i * n / count)
        starts.append(a + (np.arange(count, dtype=np.int64) * per_slice).astype(np.int64))
    return np.concatenate(starts)


class RaggedSliceShuffleConfig(Config, frozen=True):
    """Permute ``num_slices`` slices of consecutive positions, given by their starts
    (``starts``: a digest of them); a new order every epoch."""

    num_slices: int
    starts: str


class RaggedSlices:
    """The slices of ``size`` positions that start at ``starts`` (increasing, the first 0),
    in the keyed order of each epoch: what :func:`ragged_slice_shuffle` reads, and what an
    interleave of its output (:func:`fpipe.plan.slice_order.interleave`) needs to know of it.
    """

    def __init__(self, starts: np.ndarray, size: int, *, name: str = "slice_shuffle"):
        starts = np.asarray(starts, dtype=np.int64)
        if size and (len(starts) == 0 or starts[0] != 0 or np.any(np.diff(starts) <= 0)
                     or starts[-1] >= size):  # fmt: skip
            raise ConfigError(f"slice starts must increase from 0 below {size}")
        self.name, self.size, self.starts = name, size, starts
        self.lengths = np.diff(np.append(starts, size))
        self.config = RaggedSliceShuffleConfig(num_slices=len(starts), starts=_digest(starts))
        # Pure memo of the last epochs' layouts (a layout is O(slices) numbers).
        self.layout = functools.lru_cache(maxsize=4)(self._layout)

    def _layout(self, root: Key, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(input position minus output position in each slot, end position of each slot) in
        ``epoch``: slot ``s`` reads the slice that starts at ``shift[s] + ends[s - 1]``."""
        num = len(self.starts)
        order = permutation(fold_in(step_key(root, self.name), epoch), num) if num > 1 else (
            np.zeros(num, dtype=np.int64))  # fmt: skip
        lengths = self.lengths[order]
        ends = np.cumsum(lengths)
        shift = self.starts[order] - (ends - lengths)
        shift.flags.writeable = ends.flags.writeable = False
        return shift, ends

    def source_positions(self, root: Key, epoch: int, positions: np.ndarray) -> np.ndarray:
        """Where positions of the shuffled epoch read in the input view."""
        shift, ends = self.layout(root, epoch)
        p = np.asarray(positions, dtype=np.int64)
        return p + shift[np.searchsorted(ends, p, side="right")]


def ragged_slice_shuffle(view: View, slices: RaggedSlices) -> View:
    """A view whose epoch e visits ``slices`` of ``view`` in a keyed order of epoch e, each
    slice in order (random access; see the module doc).

    Example:
        >>> from fpipe.plan.source import samples
        >>> s = RaggedSlices(shard_slice_starts(np.array([0, 0, 0, 1, 1, 2]), 6, None), 6)
        >>> out = ragged_slice_shuffle(samples(6), s).gather(3, 0, np.arange(6)).index.tolist()
        >>> sorted(out) == list(range(6)), out.index(1) == out.index(0) + 1
        (True, True)
    """
    if slices.size != view.size:
        raise ConfigError(f"slices cover {slices.size} positions, the view has {view.size}")
    inner = view.gather

    def gather(root, epoch, positions):
        if len(slices.starts) <= 1:
            return inner(root, epoch, np.asarray(positions, dtype=np.int64))
        return inner(root, epoch, slices.source_positions(root, epoch, positions))

    return View(name=slices.name, config=slices.config, size=view.size, gather=gather,
                inputs=(view,))  # fmt: skip
