"""The digest of a view's sample indices (in the snapshot fingerprint) hashes the array's bytes
without copying them, and equals the digest snapshots were written with; a range of indices
has the digest (and the view) of its array, without the array."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from fpipe.core.errors import ConfigError
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


def test_a_range_digest_is_the_digest_of_its_array(monkeypatch):
    from fpipe.plan import index_digest

    monkeypatch.setattr(index_digest, "_prefix", [])  # a fresh cache of prefix states
    monkeypatch.setattr(index_digest, "MAX_STATES", 4)  # reached: the rest hashed from the last
    monkeypatch.setattr(index_digest, "_CHUNK", 1000)  # ranges of several chunks
    step = index_digest.STEP
    # a long range first, then shorter ones from its kept states, then past the kept states
    spans = [(0, 3 * step + 5), (0, 0), (0, 1), (0, step - 1), (0, step), (0, 2 * step + 1)]
    spans += [(0, 9 * step + 3), (7, 7), (7, 5000), (step, 3 * step), (5, 2)]
    for a, b in spans:
        expected = _as_written(np.arange(a, max(a, b), dtype=np.int64))
        assert index_digest.range_digest(a, b) == expected, (a, b)
    assert len(index_digest._prefix) == 4


def test_a_view_of_a_range_is_the_view_of_its_indices():
    from fpipe.plan import samples

    col = np.arange(100, dtype=np.int64) * 3
    for a, b in [(0, 37), (11, 60)]:
        by_range = samples(indices=range(a, b), columns={"c": col}, source_id="s", dataset=2)
        by_array = samples(indices=np.arange(a, b), columns={"c": col}, source_id="s", dataset=2)
        assert by_range.config == by_array.config and by_range.size == b - a
        pos = np.array([0, 5, b - a - 1, 3], dtype=np.int64)
        got, want = by_range.gather(0, 4, pos), by_array.gather(0, 4, pos)
        assert sorted(got.columns) == sorted(want.columns)
        for name, values in want.columns.items():
            assert got.columns[name].dtype == values.dtype
            assert got.columns[name].tolist() == values.tolist(), name
    with pytest.raises(ConfigError, match="column 'c' has 100 rows, samples need 101"):
        samples(indices=range(50, 101), columns={"c": col})
    with pytest.raises(ConfigError, match="num_samples=3 but 4 indices"):
        samples(3, indices=range(4))
