"""Sample keys inside their shards, and a sorted lookup from key to sample index (joins).

A join (``join:`` in a metadataset) matches samples of two datasets by the key of the sample
inside its shard (``000123`` of ``shard-0007/000123``), whatever the shards: the datasets may
split their samples into shards differently and hold them in another order. Keys are handled
as fixed-width UTF-8 bytes (numpy ``S``): :class:`KeyLookup` sorts them once and answers a whole
batch of keys with one ``searchsorted``.
"""

from __future__ import annotations

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.storage.read.webdataset import shard_stem

__all__ = ["KeyLookup", "member_key", "member_keys", "packed_keys"]

_CHUNK = 1 << 16  # rows packed at once (bounds the temporary index matrix)


def packed_keys(blob: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Keys ``blob[start[i]:end[i]]`` as one fixed-width bytes array (numpy ``S``), built
    without a Python loop over keys.

    Example:
        >>> blob = np.frombuffer(b"ab" b"cde", np.uint8)
        >>> packed_keys(blob, np.array([0, 2]), np.array([2, 5])).tolist()
        [b'ab', b'cde']
    """
    start = np.asarray(start, np.int64)
    lengths = np.asarray(end, np.int64) - start
    width = max(int(lengths.max()) if len(lengths) else 1, 1)
    out = np.zeros((len(start), width), np.uint8)
    cols = np.arange(width, dtype=np.int64)
    for a in range(0, len(start), _CHUNK):
        mask = cols < lengths[a : a + _CHUNK, None]
        pos = start[a : a + _CHUNK, None] + cols
        out[a : a + _CHUNK][mask] = blob[pos[mask]]
    return out.view(f"S{width}").ravel()


def member_key(ds, i: int) -> str:
    """The key of sample ``i`` of dataset ``ds`` inside its shard (its row number for a
    table): ``ds.key(i)`` without the shard stem."""
    fn = getattr(ds.reader, "member_key", None)
    if fn is not None:
        return fn(int(i))
    key = ds.key(i)
    if ds.record.shards:
        stem = shard_stem(ds.record.shards[int(ds.column("shard_id")[i])].name)
        return key[len(stem) + 1 :]
    return key.split("/", 1)[-1]


def member_keys(ds, indices: np.ndarray) -> np.ndarray:
    """:func:`member_key` of samples ``indices`` as UTF-8 bytes (numpy ``S``); vectorized for
    datasets prepared by ``fpipe prepare`` (keys stored in the index), one key at a time for
    the others (an Energon folder reads each sample's tar header: prepare it for speed)."""
    fn = getattr(ds.reader, "member_keys", None)
    if fn is not None:
        return fn(indices)
    keys = [member_key(ds, i).encode("utf-8", "surrogateescape") for i in indices.tolist()]
    return np.array(keys or [b""], dtype="S")[: len(keys)]


class KeyLookup:
    """Sample index by key among ``indices`` of a dataset: sorted keys + ``searchsorted``.

    ``where`` names the dataset in messages. Keys must be unique among ``indices`` (as
    Energon requires of joined datasets); a duplicate raises ConfigError naming it.

    Example:
        >>> lk = KeyLookup(np.array([b"b", b"a", b"c"]), np.array([10, 11, 12]), "ds")
        >>> lk.find(np.array([b"c", b"x", b"a"])).tolist()
        [12, -1, 11]
    """

    def __init__(self, keys: np.ndarray, indices: np.ndarray, where: str):
        order = np.argsort(keys, kind="stable")
        self.keys = keys[order]
        self.indices = np.asarray(indices, np.int64)[order]
        dup = np.flatnonzero(self.keys[1:] == self.keys[:-1])
        if len(dup):
            k = self.keys[dup[0]].decode("utf-8", "surrogateescape")
            a, b = self.indices[dup[0]], self.indices[dup[0] + 1]
            raise ConfigError(
                f"{where}: sample key {k!r} appears more than once (samples #{a} and #{b}; "
                f"{len(dup)} duplicate(s) in all); the datasets of a join need unique keys"
            )

    def __len__(self) -> int:
        return len(self.keys)

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The sample index of each key, -1 where the key is absent."""
        keys = np.asarray(keys, dtype="S")
        if not len(self.keys) or not len(keys):
            return np.full(len(keys), -1, np.int64)
        # A query longer than the stored width is truncated by the cast inside searchsorted;
        # comparing with the query itself afterwards rejects such false hits.
        pos = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        hit = self.keys[pos] == keys
        return np.where(hit, self.indices[pos], -1)
