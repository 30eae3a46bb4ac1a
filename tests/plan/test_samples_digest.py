"""The digest of a view's sample indices (in the snapshot fingerprint) hashes the array's bytes
without copying them, and equals the digest snapshots were written with."""

from __future__ import annotations

import hashlib

import numpy as np

from fpipe.plan.source import _digest


def _as_written(*arrays: np.ndarray) -> str:
    h = hashlib.blake2b(digest_size=8)
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str(a.dtype).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def test_digest_is_the_one_snapshots_hold():
    arrays = [
        np.arange(1000, dtype=np.int64),
        np.arange(12, dtype=np.int32).reshape(3, 4).T,  # not contiguous
        np.arange(10)[::3],
        np.array(["a", "bcd"]),
        np.array([], dtype=np.int64),
        np.array(3.5),
        np.array([True, False]),
    ]
    for a in arrays:
        assert _digest(a) == _as_written(a), a
    assert _digest(*arrays) == _as_written(*arrays)
