"""Energon's two other knobs of the slice order, as random-access views.

* :func:`tile` is ``shuffle_over_epochs_multiplier=m``: ``m`` passes over a view form one epoch
  of ``m * size`` positions, so a slice shuffle above it draws slices without replacement over
  ``m`` passes (each sample ``m`` times, in a keyed order). Each ref keeps the number of its
  pass as its epoch (``epoch * m + pass``), so per-sample random keys differ between passes.
* :func:`interleave` is ``parallel_shard_iters=n``: each block of ``n`` consecutive slices of
  ``slice_size`` positions is read as ``n`` parallel sequences, the next sample drawn from a
  keyed random one of them (a keyed permutation of the block's slice labels). Each slice is
  still read in order, and every position of the epoch once.

Both are pure functions of (key, epoch, position): restores recompute nothing.
"""

from __future__ import annotations

import functools

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.core.graph import step_key
from fpipe.core.records import Config, Refs
from fpipe.core.rng import fold_in, permutation
from fpipe.core.stage import View

__all__ = ["InterleaveConfig", "TileConfig", "interleave", "tile"]


class TileConfig(Config, frozen=True):
    """``times`` passes over the input view make one epoch."""

    times: int


def tile(view: View, times: int, *, name: str = "tile") -> View:
    """A view of ``times`` passes over ``view``; position ``p`` of epoch ``e`` is position
    ``p % size`` of the input's epoch ``e * times + p // size``.

    Example:
        >>> from fpipe.plan.source import samples
        >>> v = tile(samples(3), 2)
        >>> r = v.gather(0, 1, np.arange(6))
        >>> r.index.tolist(), r.epoch.tolist()
        ([0, 1, 2, 0, 1, 2], [2, 2, 2, 3, 3, 3])
    """
    if times < 1:
        raise ConfigError(f"tile: times (shuffle_over_epochs_multiplier) must be >= 1, got {times}")
    n = view.size
    inner = view.gather

    def gather(root, epoch, positions):
        p = np.asarray(positions, dtype=np.int64)
        if n == 0 or len(p) == 0:
            return inner(root, epoch * times, p)
        passes = p // n
        if passes.min() == passes.max():  # the usual case: one pass
            return inner(root, epoch * times + int(passes[0]), p - passes[0] * n)
        chunks = []
        for k in np.unique(passes):
            sel = np.flatnonzero(passes == k)
            chunks.append((sel, inner(root, epoch * times + int(k), p[sel] - k * n)))
        return _scatter(len(p), chunks)

    return View(name=name, config=TileConfig(times=times), size=n * times, gather=gather,
                inputs=(view,))  # fmt: skip


def _scatter(length: int, chunks: list[tuple[np.ndarray, Refs]]) -> Refs:
    """The refs of ``chunks`` (positions, refs) put back at their positions."""
    merged = Refs.concat([refs for _, refs in chunks])
    where = np.concatenate([sel for sel, _ in chunks])
    back = np.empty(length, dtype=np.int64)
    back[where] = np.arange(length, dtype=np.int64)
    return merged[back]


class InterleaveConfig(Config, frozen=True):
    """Read ``parallel`` slices of ``slice_size`` positions at a time, interleaved."""

    parallel: int
    slice_size: int


def interleave(view: View, parallel: int, slice_size: int, *, name: str = "interleave") -> View:
    """``view`` with each block of ``parallel * slice_size`` positions interleaved: the block's
    slices (``slice_size`` positions each, the last one of the epoch may be short) are read in
    parallel, the next position taken from a keyed random slice (a keyed permutation of the
    block's slice labels), each slice in order.

    Example:
        >>> from fpipe.plan.source import samples
        >>> v = interleave(samples(8), 2, 4)
        >>> out = v.gather(0, 0, np.arange(8)).index.tolist()
        >>> sorted(out) == list(range(8)), [i for i in out if i < 4] == [0, 1, 2, 3]
        (True, True)
    """
    if parallel < 1 or slice_size < 1:
        raise ConfigError(
            f"interleave: parallel (parallel_shard_iters) and slice_size must be >= 1, "
            f"got {parallel} and {slice_size}"
        )
    n, block = view.size, parallel * slice_size
    inner = view.gather

    @functools.lru_cache(maxsize=16)
    def block_sources(root, epoch, b):
        # Positions of the input, in the order block b of this epoch reads them.
        start = b * block
        length = min(block, n - start)
        labels = np.arange(length, dtype=np.int64) // slice_size
        k = fold_in(step_key(root, name), epoch, b)
        drawn = labels[permutation(k, length)]
        # The j-th time a slice's label is drawn, that slice's j-th position is read: sorting
        # the draws by label (stably) lists the output slots in input order.
        src = np.empty(length, dtype=np.int64)
        src[np.argsort(drawn, kind="stable")] = np.arange(length, dtype=np.int64)
        src.flags.writeable = False
        return src

    def gather(root, epoch, positions):
        p = np.asarray(positions, dtype=np.int64)
        if parallel == 1 or len(p) == 0:
            return inner(root, epoch, p)
        blocks = p // block
        out = np.empty(len(p), dtype=np.int64)
        for b in np.unique(blocks):
            sel = blocks == b
            out[sel] = int(b) * block + block_sources(root, epoch, int(b))[p[sel] - int(b) * block]
        return inner(root, epoch, out)

    config = InterleaveConfig(parallel=parallel, slice_size=slice_size)
    return View(name=name, config=config, size=n, gather=gather, inputs=(view,))
