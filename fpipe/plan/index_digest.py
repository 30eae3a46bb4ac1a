"""Digests of array contents in plan configs, and of a range of sample indices without the array.

A view over given sample indices records a digest of them in its config (the snapshot
fingerprint), so a restore into a plan over other samples is refused. The split of a dataset
is mostly one contiguous range of indices (its shards in index order): hashing the range as an
array cost the array (8 bytes a sample, allocated and hashed for each dataset of a blend, 80 MB
for 100 datasets of 10^5 samples) though its bytes follow from two numbers.

:func:`range_digest` gives the very digest :func:`array_digest` gives for
``np.arange(start, stop)`` without holding that array: it hashes the range in chunks, and for
ranges from 0 (a split of every shard) it starts from a kept hash state of a prefix. The
bytes of ``arange(0, m)`` begin with those of ``arange(0, n)`` for ``n < m``, so the states
after each multiple of :data:`STEP` indices serve every range from 0 in the process: a blend
of datasets from 0 hashes its largest range once, plus under ``STEP`` indices per dataset.
"""

from __future__ import annotations

import hashlib

import numpy as np

from fpipe.core.fork_locks import fork_safe_lock

__all__ = ["array_digest", "range_digest"]

#: indices between two kept hash states of ranges from 0 (16 KiB of int64)
STEP = 2048
#: kept states at most: ranges from 0 up to 8M indices start from one (~460 bytes a state,
#: 1.9 MB at most per process); a longer range hashes its rest from the last
MAX_STATES = 4096
#: indices hashed per chunk of a range (512 KiB of int64 at a time)
_CHUNK = 1 << 16

_INT64 = str(np.dtype(np.int64)).encode()
#: _prefix[k]: the hash after the dtype and the bytes of ``arange(0, k * STEP)``
_prefix: list = []
_lock = fork_safe_lock(globals(), "_lock")


def _new():
    return hashlib.blake2b(digest_size=8)


def array_digest(*arrays: np.ndarray) -> str:
    """A short hash of array contents (so configs that differ only in data differ)."""
    h = _new()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str(a.dtype).encode())
        # the array's own bytes, not a copy of them (8 MB for a split of 10^6 samples)
        h.update(a.tobytes() if a.dtype.hasobject or a.ndim == 0 else a.reshape(-1).data)
    return h.hexdigest()


def range_digest(start: int, stop: int) -> str:
    """``array_digest(np.arange(start, stop, dtype=np.int64))``, without that array."""
    start, stop = int(start), max(int(start), int(stop))
    if start != 0:
        h = _new()
        h.update(_INT64)
        _hash_range(h, start, stop)
        return h.hexdigest()
    k = min(stop // STEP, MAX_STATES - 1)
    with _lock:  # states are only appended; one thread extends them at a time
        if not _prefix:
            first = _new()
            first.update(_INT64)
            _prefix.append(first)
        while len(_prefix) <= k:
            h = _prefix[-1].copy()
            _hash_range(h, (len(_prefix) - 1) * STEP, len(_prefix) * STEP)
            _prefix.append(h)
        h = _prefix[k].copy()
    _hash_range(h, k * STEP, stop)
    return h.hexdigest()


def _hash_range(h, start: int, stop: int) -> None:
    for a in range(start, stop, _CHUNK):
        h.update(np.arange(a, min(a + _CHUNK, stop), dtype=np.int64).data)
