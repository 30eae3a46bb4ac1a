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

    def shard_ids(self, idx: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.starts(), idx, side="right").astype(np.int64) - 1

    def shard_id(self, i: int) -> int:
        return int(np.searchsorted(self.starts(), i, side="right")) - 1

    def key(self, i: int) -> bytes:
        raw, ok = self.keys(np.asarray([i], np.int64))
        if not ok[0]:
            raise CorruptIndex(f"key entry of sample {i}")
        return raw[0]

    def keys(self, idx: np.ndarray) -> tuple[list[bytes], np.ndarray]:
        idx = np.asarray(idx, np.int64)
        sid = self.shard_ids(idx)
        pos = idx - self.starts()[sid]
        at = self._array("compact/shard/keys_at.npy")[sid]
        first = self._array("compact/shard/key_first.npy")[sid]
        width = self._array("compact/shard/key_width.npy")[sid]
        off, blob = self._array("compact/keys.offsets.npy"), self._array("compact/keys.npy")
        raw: list[bytes] = []
        ok = np.ones(len(idx), bool)
        for j, (a, p, f, w) in enumerate(
            zip(at.tolist(), pos.tolist(), first.tolist(), width.tolist())
        ):
            if a < 0:
                raw.append(b"%0*d" % (w, f + p) if w > 0 else b"")
                ok[j] = w > 0
                continue
            r = a + p
            if not 0 <= r < len(off) - 1:
                raw.append(b"")
                ok[j] = False
                continue
            x, y = int(off[r]), int(off[r + 1])
            ok[j] = 0 <= x <= y <= len(blob)
            raw.append(blob[x:y].tobytes() if ok[j] else b"")
        return raw, ok

    def packed_keys(self, idx: np.ndarray) -> np.ndarray:
        raw, ok = self.keys(idx)
        if not ok.all():
            raise CorruptIndex("key entries out of range")
        width = max((len(k) for k in raw), default=1) or 1
        return np.asarray(raw, dtype=f"S{width}")

    def placed(self, i: int) -> list[tuple[str, int, int]]:
        """``(ext, offset, size)`` of every member of sample ``i``, in tar order."""
        rows = self.rows(np.asarray([i], np.int64))
        if not rows.ok[0]:
            raise CorruptIndex(f"member entries of sample {i}")
        names = self._exts
        return [
            (names[e], o, s)
            for e, o, s in zip(rows.ext.tolist(), rows.offset.tolist(), rows.size.tolist())
        ]

    def rows(self, idx: np.ndarray) -> MemberRows:
        """The members of samples ``idx`` (as :meth:`FlatMembers.rows`)."""
        idx = np.asarray(idx, np.int64)
        n = len(idx)
        sid = self.shard_ids(idx)
        at = self._array("compact/shard/members_at.npy")[sid].astype(np.int64)
        pat = np.flatnonzero(at < 0)
        exp = np.flatnonzero(at >= 0)
        k = len(self._pattern)
        # pattern samples: the first member's offset, the next ones one header further
        i = idx[pat]
        first, good = self._first_offsets(i, sid[pat])
        size = (
            np.stack(
                [self._array(f"compact/size.{j}.npy")[i].astype(np.int64) for j in range(k)], axis=1
            )
            if k
            else np.zeros((len(pat), 0), np.int64)
        )
        off = np.zeros_like(size)
        if k:
            off[:, 0] = first
            for j in range(1, k):
                off[:, j] = off[:, j - 1] + (size[:, j - 1] + 511) // 512 * 512 + 512
        ok = np.ones(n, bool)
        ok[pat] = good & (k > 0)
        parts = [(np.repeat(pat, k), np.tile(self._pattern, len(pat)), off.ravel(), size.ravel())]
        if len(exp):
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
            return IndexColumn(n, np.dtype(np.int32), self.shard_ids)
        dtype = np.dtype(self._rec.columns.get(name, "int64"))
        info = self._info
        if name in info.sums:
            return IndexColumn(n, dtype, lambda idx: self._sizes(idx, None))
        if name in info.sizes:
            ext = self._exts.index(info.sizes[name])
            return IndexColumn(n, dtype, lambda idx: self._sizes(idx, ext))
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


class IndexColumn:
    """A per-sample column read on access (``col[i]``, ``col[indices]``, ``col[a:b]``),
    in the dtype the index says, whatever it is stored as (or derived from)."""

    def __init__(self, n: int, dtype: np.dtype, get: Callable[[np.ndarray], np.ndarray]):
        self._n, self.dtype, self._get = n, dtype, get
        self.shape = (n,)
        self.ndim = 1

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, key):
        if isinstance(key, slice):
            key = np.arange(*key.indices(self._n), dtype=np.int64)
        elif np.ndim(key) == 0:
            i = int(key)
            if not -self._n <= i < self._n:
                raise IndexError(f"index {i} out of range for {self._n} samples")
            return self[np.asarray([i % self._n])][0]
        idx = np.asarray(key)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        idx = idx.astype(np.int64)
        if len(idx) and (idx.min() < -self._n or idx.max() >= self._n):
            raise IndexError(f"indices out of range for {self._n} samples")
        return np.asarray(self._get(idx % max(self._n, 1))).astype(self.dtype)

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
