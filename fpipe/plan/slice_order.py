"""Energon's two other knobs of the slice order, as random-access views.

* :func:`tile` is ``shuffle_over_epochs_multiplier=m``: ``m`` passes over a view form one epoch
  of ``m * size`` positions, so a slice shuffle above it draws slices without replacement over
  ``m`` passes (each sample ``m`` times, in a keyed order). Each ref keeps the number of its
  pass as its epoch (``epoch * m + pass``), so per-sample random keys differ between passes.
* :func:`interleave` is ``parallel_shard_iters=n``: each block of ``n`` consecutive slices of
  ``slice_size`` positions (or of the slices of a ragged slice shuffle below it, in that
  epoch's order: :mod:`fpipe.plan.shard_slices`) is read as ``n`` parallel sequences, the next
  sample drawn from a keyed random one of them (a keyed permutation of the block's slice
  labels). Each slice is still read in order, and every position of the epoch once.

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
from fpipe.plan.shard_slices import RaggedSlices

__all__ = ["InterleaveConfig", "TileConfig", "highest_epoch", "interleave", "tile", "tiles"]


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


def tiles(view: View) -> bool:
    """Whether ``view`` or a view it wraps is a :func:`tile` (its refs' epochs are passes)."""
    return isinstance(view.config, TileConfig) or any(tiles(v) for v in view.inputs)


def highest_epoch(view: View, root, start: int, stop: int) -> int:
    """The highest ``epoch`` of refs ``start..stop-1`` (``start < stop``) of the stream of
    ``view``'s epochs one after the other (ref ``i`` is position ``i % size`` of epoch
    ``i // size``), from the numbers alone: the last epoch's. Over a :func:`tile` a ref's epoch
    is its pass, which a slice shuffle above puts anywhere in the epoch, so the refs of the
    last epoch are read (every pass of an earlier epoch is below them)."""
    size = view.size
    last = (stop - 1) // size
    if not tiles(view):
        return last
    lo = max(start - last * size, 0)
    return int(view.take_range(root, last, lo, stop - last * size).epoch.max())


def _scatter(length: int, chunks: list[tuple[np.ndarray, Refs]]) -> Refs:
    """The refs of ``chunks`` (positions, refs) put back at their positions."""
    merged = Refs.concat([refs for _, refs in chunks])
    where = np.concatenate([sel for sel, _ in chunks])
    back = np.empty(length, dtype=np.int64)
    back[where] = np.arange(length, dtype=np.int64)
    return merged[back]


class InterleaveConfig(Config, frozen=True):
    """Read ``parallel`` slices of ``slice_size`` positions at a time, interleaved
    (``slice_size`` 0: the ragged slices of the shuffle below, see :func:`interleave`)."""

    parallel: int
    slice_size: int


def interleave(
    view: View,
    parallel: int,
    slice_size: int,
    *,
    slices: RaggedSlices | None = None,
    name: str = "interleave",
) -> View:
    """``view`` with each block of ``parallel * slice_size`` positions interleaved: the block's
    slices (``slice_size`` positions each, the last one of the epoch may be short) are read in
    parallel, the next position taken from a keyed random slice (a keyed permutation of the
    block's slice labels), each slice in order. ``slices``: ``view`` is the
    :func:`~fpipe.plan.shard_slices.ragged_slice_shuffle` of these slices, and each block is
    ``parallel`` of them in the epoch's order (``slice_size`` is then ignored).

    Example:
        >>> from fpipe.plan.source import samples
        >>> v = interleave(samples(8), 2, 4)
        >>> out = v.gather(0, 0, np.arange(8)).index.tolist()
        >>> sorted(out) == list(range(8)), [i for i in out if i < 4] == [0, 1, 2, 3]
        (True, True)
    """
    if parallel < 1 or (slice_size < 1 and slices is None):
        raise ConfigError(
            f"interleave: parallel (parallel_shard_iters) and slice_size must be >= 1, "
            f"got {parallel} and {slice_size}"
        )
    if slices is not None:
        return _interleave_ragged(view, parallel, slices, name)
    n, block = view.size, parallel * slice_size
    inner = view.gather

    @functools.lru_cache(maxsize=16)
    def block_sources(root, epoch, b):
        # Positions of the input, in the order block b of this epoch reads them.
        start = b * block
        length = min(block, n - start)
        labels = np.arange(length, dtype=np.int64) // slice_size
        return _interleaved(labels, fold_in(step_key(root, name), epoch, b))

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


def _interleaved(labels: np.ndarray, k) -> np.ndarray:
    """Offsets into a block whose positions belong to the slices ``labels`` (each slice's
    positions consecutive, in order), in the order the block is read: the next position from
    a keyed random slice (``k``: the block's key), each slice in order."""
    length = len(labels)
    drawn = labels[permutation(k, length)]
    # The j-th time a slice's label is drawn, that slice's j-th position is read: sorting the
    # draws by label (stably) lists the output slots in input order.
    src = np.empty(length, dtype=np.int64)
    src[np.argsort(drawn, kind="stable")] = np.arange(length, dtype=np.int64)
    src.flags.writeable = False
    return src


def _interleave_ragged(view: View, parallel: int, slices: RaggedSlices, name: str) -> View:
    """:func:`interleave` over the ragged slices of ``view`` (their order is the epoch's)."""
    inner = view.gather

    @functools.lru_cache(maxsize=4)
    def block_ends(root, epoch) -> np.ndarray:
        ends = slices.layout(root, epoch)[1]
        last = ends[parallel - 1 :: parallel]
        return last if len(ends) % parallel == 0 else np.append(last, ends[-1])

    @functools.lru_cache(maxsize=16)
    def block_sources(root, epoch, b):
        ends = slices.layout(root, epoch)[1]
        first, stop = b * parallel, min((b + 1) * parallel, len(ends))
        lengths = np.diff(ends[first:stop], prepend=ends[first - 1] if first else 0)
        labels = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
        return _interleaved(labels, fold_in(step_key(root, name), epoch, b))

    def gather(root, epoch, positions):
        p = np.asarray(positions, dtype=np.int64)
        if parallel == 1 or len(p) == 0:
            return inner(root, epoch, p)
        ends = block_ends(root, epoch)
        blocks = np.searchsorted(ends, p, side="right")
        out = np.empty(len(p), dtype=np.int64)
        for b in np.unique(blocks):
            sel = blocks == b
            start = int(ends[b - 1]) if b else 0
            out[sel] = start + block_sources(root, epoch, int(b))[p[sel] - start]
        return inner(root, epoch, out)

    config = InterleaveConfig(parallel=parallel, slice_size=0)
    return View(name=name, config=config, size=view.size, gather=gather, inputs=(view,))
