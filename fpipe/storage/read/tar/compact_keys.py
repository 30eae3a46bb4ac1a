"""The keys of a compact tar index (format 4, :mod:`fpipe.storage.read.tar.compact`), one
sample or a batch at once.

A shard's keys are either consecutive zero-padded decimal numbers (its first number and
width: ``b"%0*d" % (width, first + position)``) or rows of ``keys.npy`` (``keys_at`` + the
sample's position in its shard, cut by ``keys.offsets.npy``, as the flat layout's keys). A
batch is made with numpy, not a Python call per key: its numbers' digits and its stored keys'
bytes are written into one buffer, which is then cut into the keys.
"""

from __future__ import annotations

import numpy as np

__all__ = ["key_of", "keys_of"]

#: widths whose numbers numpy writes (10**18 fits an int64); others are formatted one by one
_MAX_WIDTH = 18


def key_of(at: int, pos: int, first: int, width: int, off, blob) -> bytes | None:
    """The key of the sample at position ``pos`` of a shard whose ``keys_at`` / ``key_first``
    / ``key_width`` are ``at`` / ``first`` / ``width`` (``off``, ``blob``: ``keys.offsets.npy``
    and ``keys.npy``); None where the entry cannot be right."""
    if at < 0:
        return b"%0*d" % (width, first + pos) if width > 0 else None
    r = at + pos
    if not 0 <= r < len(off) - 1:
        return None
    x, y = int(off[r]), int(off[r + 1])
    return blob[x:y].tobytes() if 0 <= x <= y <= len(blob) else None


def _ranges(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Positions ``starts[j] .. starts[j] + sizes[j]`` of every ``j``, concatenated."""
    end = np.cumsum(sizes)
    return np.repeat(starts - (end - sizes), sizes) + np.arange(int(end[-1]) if len(end) else 0)


def keys_of(
    at: np.ndarray, pos: np.ndarray, first: np.ndarray, width: np.ndarray, off, blob
) -> tuple[list[bytes], np.ndarray]:
    """:func:`key_of` of a batch (arrays, one entry per sample): (keys, bool: each key's entry
    is sound; b"" where not)."""
    at, pos = np.asarray(at, np.int64), np.asarray(pos, np.int64)
    first, width = np.asarray(first, np.int64), np.asarray(width, np.int64)
    n = len(at)
    numeric = at < 0
    fast = np.zeros(n, bool)  # numbers numpy writes
    if numeric.any():
        value = first + pos  # wraps only where first is absurd: negative, formatted below
        fast = numeric & (width >= 1) & (width <= _MAX_WIDTH) & (value >= 0)
        fast[fast] &= value[fast] < 10 ** width[fast]
        if fast.all() and width.min() == width.max():  # numbers of one width: no cuts
            w = int(width[0])
            return _digits(value, w).view(f"S{w}").ravel().tolist(), np.ones(n, bool)
    x = y = np.zeros(n, np.int64)
    stored = np.zeros(n, bool)
    if len(off) > 1 and not numeric.all():
        r = at + pos
        stored = ~numeric & (r >= 0) & (r < len(off) - 1)
        r = np.where(stored, r, 0)
        x, y = off[r].astype(np.int64), off[r + 1].astype(np.int64)
        stored &= (x >= 0) & (x <= y) & (y <= len(blob))
    size = np.where(fast, width, np.where(stored, y - x, 0))
    end = np.cumsum(size)
    start = end - size
    if not fast.any():  # stored keys only: the batch's bytes gathered at once, then cut
        buf = np.asarray(blob)[_ranges(x, size)]
    else:
        buf = np.empty(int(end[-1]), np.uint8)
        s = np.flatnonzero(stored)
        if len(s):
            buf[_ranges(start[s], size[s])] = np.asarray(blob)[_ranges(x[s], size[s])]
        for w in np.unique(width[fast]).tolist():
            sel = np.flatnonzero(fast & (width == w))
            buf[(start[sel, None] + np.arange(w)).ravel()] = _digits(value[sel], w).ravel()
    flat = buf.tobytes()
    raw = [flat[a:b] for a, b in zip(start.tolist(), end.tolist())]
    # numbers numpy does not write (a width past 18, a corrupt first number): as key_of does
    for j in np.flatnonzero(numeric & (width > 0) & ~fast).tolist():
        raw[j] = b"%0*d" % (int(width[j]), int(first[j]) + int(pos[j]))
    return raw, np.where(numeric, width > 0, stored)


def _digits(value: np.ndarray, width: int) -> np.ndarray:
    """uint8 ``(len(value), width)``: each value in zero-padded decimal, as ``b"%0*d"``
    writes it (values from 0 to ``10**width - 1``, ``width`` at most 18)."""
    powers = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    return ((value[:, None] // powers) % 10 + ord("0")).astype(np.uint8)
