"""Where a sample of a prepared tar index is: its shard, its key, its members, its columns.

One accessor per index layout, with the same methods and the same values, so that the reader
(:class:`~fpipe.storage.read.tar.reader.TarReader`), its batch reads
(:mod:`fpipe.storage.read.tar.batch`) and :meth:`Dataset.column` never look at the arrays
themselves:

- :class:`FlatSamples`: formats 1 to 3 (``shard_id.npy``, ``keys.npy`` + offsets, the member
  table of :mod:`fpipe.storage.read.members`, ``columns/<name>.npy``);
- :class:`CompactSamples`: format 4 (:mod:`fpipe.storage.read.tar.compact`), the values
  derived on access, O(1) per sample.

``shard_ids(idx)`` / ``keys(idx)`` / ``rows(idx)`` answer a batch with numpy; a value that
cannot be right (an index array edited or cut short) is flagged, never read past: the caller
names the dataset and the sample (``CorruptIndex``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.storage.read.members import CorruptIndex, FlatMembers, MemberRows, PerExtensionMembers
from fpipe.storage.read.tar.compact import CompactInfo
from fpipe.storage.read.tar.compact_keys import key_of, keys_of

__all__ = ["CompactSamples", "FlatSamples", "IndexColumn", "sample_index"]

Arrays = Callable[[str], np.ndarray]


class FlatSamples:
    """Shard ids, keys and members of an index of format 1 to 3."""

    def __init__(self, record, arrays: Arrays):
        self._array = arrays
        flat = record.num_members is not None
        table = FlatMembers if flat else PerExtensionMembers
        self.members = table(record.members, arrays)
        #: batches of members at once (format 1 has none: one sample at a time)
        self.batched = flat

    def shard_ids(self, idx: np.ndarray) -> np.ndarray:
        """int64 shard id of each sample of ``idx`` (as stored: the caller checks its range)."""
        return self._array("shard_id.npy")[idx].astype(np.int64)

    def shard_id(self, i: int) -> int:
        """:meth:`shard_ids` of one sample."""
        return int(self._array("shard_id.npy")[i])

    def key(self, i: int) -> bytes:
        """The key of sample ``i`` inside its shard, as stored (UTF-8)."""
        off, blob = self._array("keys.offsets.npy"), self._array("keys.npy")
        a, b = int(off[i]), int(off[i + 1])
        if not 0 <= a <= b <= len(blob):
            raise CorruptIndex(f"key bytes {a}..{b}")
        return blob[a:b].tobytes()

    def keys(self, idx: np.ndarray) -> tuple[list[bytes], np.ndarray]:
        """(keys of samples ``idx``, bool: each key's entry is sound; b"" where not)."""
        off, blob = self._array("keys.offsets.npy"), self._array("keys.npy")
        a, b = off[idx], off[idx + 1]
        ok = (a >= 0) & (a <= b) & (b <= len(blob))
        # The batch's keys gathered into one bytes object, then cut: a slice of bytes per key
        # costs a third of a slice of the array and its copy.
        size = np.where(ok, b - a, 0)
        end = np.cumsum(size)
        start = end - size
        total = int(end[-1]) if len(end) else 0
        gather = np.repeat(np.where(ok, a, 0) - start, size) + np.arange(total)
        flat = np.asarray(blob)[gather].tobytes()
        raw = [flat[x:y] for x, y in zip(start.tolist(), end.tolist())]
        return raw, ok

    def packed_keys(self, idx: np.ndarray) -> np.ndarray:
        """Keys of samples ``idx`` as fixed-width bytes (numpy ``S``)."""
        from fpipe.storage.read.keys import packed_keys

        off, blob = np.asarray(self._array("keys.offsets.npy")), self._array("keys.npy")
        start, end = off[idx], off[idx + 1]
        if len(idx) and (start.min() < 0 or np.any(end < start) or end.max() > len(blob)):
            raise CorruptIndex("key offsets out of range")
        return packed_keys(np.asarray(blob), start, end)

    def column(self, name: str):
        """None: the column is the array ``columns/<name>.npy`` (``shard_id.npy``) itself."""
        return None


class CompactSamples:
    """Shard ids, keys, members and columns of a format 4 index (module docstring of
    :mod:`fpipe.storage.read.tar.compact`). Every array is mapped when first used; a sample
    reads one entry of each per-sample array it needs."""

    def __init__(self, record, arrays: Arrays, where: str):
        self._rec = record
        self._array = arrays
        self._where = where
        info: CompactInfo = record.compact
        self._info = info
        exts = list(record.members)
        bad = [e for e in info.pattern if e not in exts]
        bad += [e for e in info.sizes.values() if e not in exts]
        if bad:
            raise ConfigError(f"{where}: bad index info: compact names unknown members {bad}")
        self._exts = tuple(exts)
        self._pattern = np.asarray([exts.index(e) for e in info.pattern], np.int64)
        if info.block < 1:
            raise ConfigError(f"{where}: bad index info: compact block {info.block} < 1")
        self._pattern_list: list[int] = self._pattern.tolist()
        self._size_files = [f"compact/size.{j}.npy" for j in range(len(self._pattern_list))]
        self._starts: np.ndarray | None = None
        self.batched = True
        self._explicit = FlatMembers(exts, lambda name: arrays("compact/explicit/" + name[8:]))

    @property
    def members(self) -> CompactSamples:
        """What answers ``placed`` / ``rows``: this accessor (a property, not an attribute: a
        reference to itself would keep a closed dataset's arrays mapped until a GC pass)."""
        return self

    def starts(self) -> np.ndarray:
        """int64 ``(S + 1,)``: first sample of each shard (from the shard list, once)."""
        if self._starts is None:
            self._starts = self._rec.shard_starts()
        return self._starts

    # One sample's lookups (key, placed, shard_id, a derived column's value) read single
    # entries as Python ints (ndarray.item) and do int arithmetic: the batch methods' numpy
    # calls on arrays of one cost ~20x more. Nothing is copied out of the maps: per-shard
    # arrays as lists would hold ~36 bytes per shard in every worker.

    def _place(self, i: int) -> tuple[int, int]:
        """(shard id, position in its shard) of sample ``i`` (as :meth:`shard_ids`)."""
        starts = self.starts()
        sid = int(starts.searchsorted(i, "right")) - 1
        return sid, i - starts.item(sid)

    def shard_ids(self, idx: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.starts(), idx, side="right").astype(np.int64) - 1

    def shard_id(self, i: int) -> int:
        return self._place(i)[0]

    def key(self, i: int) -> bytes:
        sid, pos = self._place(i)
        at = self._array("compact/shard/keys_at.npy").item(sid)
        first = self._array("compact/shard/key_first.npy").item(sid)
        width = self._array("compact/shard/key_width.npy").item(sid)
        off, blob = self._array("compact/keys.offsets.npy"), self._array("compact/keys.npy")
        got = key_of(at, pos, first, width, off, blob)
        if got is None:
            raise CorruptIndex(f"key entry of sample {i}")
        return got

    def keys(self, idx: np.ndarray) -> tuple[list[bytes], np.ndarray]:
        idx = np.asarray(idx, np.int64)
        sid = self.shard_ids(idx)
        return keys_of(
            self._array("compact/shard/keys_at.npy")[sid],
            idx - self.starts()[sid],
            self._array("compact/shard/key_first.npy")[sid],
            self._array("compact/shard/key_width.npy")[sid],
            self._array("compact/keys.offsets.npy"),
            self._array("compact/keys.npy"),
        )

    def packed_keys(self, idx: np.ndarray) -> np.ndarray:
        raw, ok = self.keys(idx)
        if not ok.all():
            raise CorruptIndex("key entries out of range")
        width = max((len(k) for k in raw), default=1) or 1
        return np.asarray(raw, dtype=f"S{width}")

    def placed(self, i: int) -> list[tuple[str, int, int]]:
        """``(ext, offset, size)`` of every member of sample ``i``, in tar order (what
        :meth:`rows` gives for ``[i]``, in int arithmetic)."""
        sid, pos = self._place(i)
        at = self._array("compact/shard/members_at.npy").item(sid)
        if at >= 0:
            row = at + pos
            try:
                if not 0 <= row < len(self._array("compact/explicit/start.npy")) - 1:
                    raise CorruptIndex("explicit row out of range")
                return self._explicit.placed(row)
            except CorruptIndex:
                raise CorruptIndex(f"member entries of sample {i}") from None
        base = self._array("compact/offset_base.npy")
        block = self._array("compact/shard/blocks_at.npy").item(sid) + pos // self._info.block
        if not self._pattern_list or not 0 <= block < len(base):
            raise CorruptIndex(f"member entries of sample {i}")
        off = (base.item(block) + self._array("compact/offset.npy").item(i)) * 512
        out = []
        for e, file in zip(self._pattern_list, self._size_files):
            size = self._array(file).item(i)
            out.append((self._exts[e], off, size))
            off += (size + 511) // 512 * 512 + 512  # the next member: one header further
        return out

    def rows(self, idx: np.ndarray) -> MemberRows:
        """The members of samples ``idx`` (as :meth:`FlatMembers.rows`)."""
        idx = np.asarray(idx, np.int64)
        sid = self.shard_ids(idx)
        at = self._array("compact/shard/members_at.npy")[sid].astype(np.int64)
        exp = np.flatnonzero(at >= 0)
        if not len(exp):  # every sample follows the pattern (the usual batch)
            return self._pattern_rows(idx, sid)
        pat = np.flatnonzero(at < 0)
        got = self._pattern_rows(idx[pat], sid[pat])
        ok = np.ones(len(idx), bool)
        ok[pat] = got.ok
        parts = [(pat[got.owner], got.ext, got.offset, got.size)]
        row = at[exp] + idx[exp] - self.starts()[sid[exp]]
        limit = len(self._array("compact/explicit/start.npy")) - 1
        good = (row >= 0) & (row < limit)
        ok[exp] = good
        if good.any():  # rows of an empty table cannot even be asked for
            got = self._explicit.rows(np.where(good, row, 0))
            ok[exp] &= got.ok
            parts.append((exp[got.owner], got.ext, got.offset, got.size))
        owner, ext, offset, size_ = (np.concatenate(p) for p in zip(*parts))
        order = np.argsort(owner, kind="stable")
        keep = ok[owner[order]]
        order = order[keep]
        return MemberRows(
            ok=ok,
            owner=owner[order].astype(np.int64),
            ext=ext[order].astype(np.int64),
            offset=offset[order].astype(np.int64),
            size=size_[order].astype(np.int64),
        )

    def _pattern_rows(self, idx: np.ndarray, sid: np.ndarray) -> MemberRows:
        """:meth:`rows` of samples ``idx`` of shards ``sid`` that follow the pattern: the
        first member's offset, the next ones one header further."""
        n, k = len(idx), len(self._pattern)
        first, ok = self._first_offsets(idx, sid)
        ok &= k > 0
        size = np.empty((n, k), np.int64)
        off = np.empty((n, k), np.int64)
        for j in range(k):
            size[:, j] = self._array(self._size_files[j])[idx]
            if j == 0:
                off[:, 0] = first
            else:  # one header (512 bytes) after the previous member's 512-byte blocks
                off[:, j] = off[:, j - 1] + (size[:, j - 1] + 511) // 512 * 512 + 512
        rows = (np.repeat(np.arange(n), k), np.tile(self._pattern, n), off.ravel(), size.ravel())
        if not ok.all():
            keep = np.repeat(ok, k)
            rows = tuple(r[keep] for r in rows)
        return MemberRows(ok, *rows)

    def _first_offsets(self, idx: np.ndarray, sid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(data offset of the first member of pattern samples ``idx`` of shards ``sid``,
        whether their block lies inside offset_base.npy)."""
        base = self._array("compact/offset_base.npy")
        block = self._array("compact/shard/blocks_at.npy")[sid].astype(np.int64)
        block += (idx - self.starts()[sid]) // self._info.block
        good = (block >= 0) & (block < len(base))
        units = base[np.where(good, block, 0)].astype(np.int64) if len(base) else 0 * block
        units = units + self._array("compact/offset.npy")[idx].astype(np.int64)
        return units * 512, good

    def column(self, name: str) -> IndexColumn:
        """Column ``name`` (or ``shard_id``) as an array-like read on access."""
        n = self._rec.num_samples
        if name == "shard_id":
            return IndexColumn(n, np.dtype(np.int32), self.shard_ids, self.shard_id)
        dtype = np.dtype(self._rec.columns.get(name, "int64"))
        info = self._info
        if name in info.sums:
            return IndexColumn(
                n, dtype, lambda idx: self._sizes(idx, None), lambda i: self._size(i, None)
            )
        if name in info.sizes:
            ext = self._exts.index(info.sizes[name])
            return IndexColumn(
                n, dtype, lambda idx: self._sizes(idx, ext), lambda i: self._size(i, ext)
            )
        file = f"compact/columns/{name}.npy"
        return IndexColumn(n, dtype, lambda idx: self._array(file)[idx])

    def _sizes(self, idx: np.ndarray, ext: int | None) -> np.ndarray:
        """Per sample of ``idx``: the sum of its member sizes (``ext`` None), or the size of
        its member ``ext`` (-1: none)."""
        idx = np.asarray(idx, np.int64)
        rows = self.rows(idx)
        if not rows.ok.all():
            bad = int(idx[np.flatnonzero(~rows.ok)[0]])
            raise ConfigError(
                f"{self._where}: member entries of sample {bad} are corrupt; re-run `fpipe prepare`"
            )
        if ext is None:
            return np.bincount(rows.owner, rows.size, minlength=len(idx)).astype(np.int64)
        out = np.full(len(idx), -1, np.int64)
        hit = rows.ext == ext
        out[rows.owner[hit]] = rows.size[hit]
        return out

    def _size(self, i: int, ext: int | None) -> int:
        """:meth:`_sizes` of sample ``i`` alone."""
        try:
            placed = self.placed(i)
        except CorruptIndex:
            raise ConfigError(
                f"{self._where}: member entries of sample {i} are corrupt; re-run `fpipe prepare`"
            ) from None
        if ext is None:
            return sum(size for _, _, size in placed)
        got = -1  # as _sizes: the last member of that extension
        for e, _, size in placed:
            if e == self._exts[ext]:
                got = size
        return got


class IndexColumn:
    """A per-sample column read on access (``col[i]``, ``col[indices]``, ``col[a:b]``),
    in the dtype the index says, whatever it is stored as (or derived from)."""

    def __init__(
        self,
        n: int,
        dtype: np.dtype,
        get: Callable[[np.ndarray], np.ndarray],
        one: Callable[[int], int] | None = None,
    ):
        #: ``get(indices)``: the values of a batch; ``one(i)``: the value of one sample, as
        #: ``get`` gives it (where the batch's numpy calls would cost more than the value)
        self._n, self.dtype, self._get, self._one = n, dtype, get, one
        self.shape = (n,)
        self.ndim = 1

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, key):
        if isinstance(key, slice):
            key = np.arange(*key.indices(self._n), dtype=np.int64)
        elif isinstance(key, (int, np.integer)) or np.ndim(key) == 0:  # the first: no call
            i = int(key)
            if not -self._n <= i < self._n:
                raise IndexError(f"index {i} out of range for {self._n} samples")
            if self._one is not None:
                return self.dtype.type(self._one(i % self._n))
            return self[np.asarray([i % self._n])][0]
        idx = np.asarray(key)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        idx = idx.astype(np.int64, copy=False)
        if len(idx):
            lo, hi = int(idx.min()), int(idx.max())
            if lo < -self._n or hi >= self._n:
                raise IndexError(f"indices out of range for {self._n} samples")
            if lo < 0:  # from the end, as an array's
                idx = idx % self._n
        return np.asarray(self._get(idx)).astype(self.dtype, copy=False)

    def __array__(self, dtype=None, copy=None):
        out = self[np.arange(self._n, dtype=np.int64)]
        return out if dtype is None else out.astype(dtype)

    def item(self, i: int):
        """Value ``i`` as a Python scalar (as ``ndarray.item``)."""
        return self[int(i)].item()

    def tolist(self) -> list:
        return np.asarray(self).tolist()


def sample_index(record, arrays: Arrays, where: str):
    """The accessor of ``record``'s layout: :class:`CompactSamples` or :class:`FlatSamples`."""
    if getattr(record, "compact", None) is not None:
        return CompactSamples(record, arrays, where)
    return FlatSamples(record, arrays)
