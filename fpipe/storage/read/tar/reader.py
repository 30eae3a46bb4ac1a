"""Reader of the ``"tar"`` layout: member byte offsets from fpipe's own index.

``fpipe prepare`` stores the extension, byte offset and size of every member and the sample
keys: in the compact layout (format 4, :mod:`.compact`), most of them derived, or in the flat
one (one member table sorted by sample, :mod:`fpipe.storage.read.members`, and ``keys.npy``;
indexes of format 1 hold two arrays per extension instead, still read). The reader looks them
up through the layout's accessor (:mod:`.samples`), never the arrays themselves. A sample is
then one positional read (or one per member when they are far apart). Gzip-compressed shards are
decompressed once into ``.fpipe/decompressed/``.

Every read checks the tar header of one of the sample's members against the index (it must
name ``<key>.<ext>``): a shard rewritten, reordered or swapped after prepare is a
:class:`BadSampleError` naming the shard, the expected member and what is there (so the error
policy counts it), never other samples' bytes under this key. The header comes in the same
read (on object storage, the same ranged GET): for a sample of several members it is the
second member's, which lies between the members read anyway; a one-member read starts 512
bytes early to include its header.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import zlib
from pathlib import Path

import numpy as np

from fpipe.core.errors import BadSampleError
from fpipe.core.temp_names import beside
from fpipe.decode.extensions import GZ, strip_gz
from fpipe.decode.limits import DecodeLimits
from fpipe.storage.paths import contained
from fpipe.storage.read._validate import (
    ShardCheck,
    check_shard_unchanged,
    header_mismatch,
    stale_reason,
)
from fpipe.storage.read.members import CorruptIndex
from fpipe.storage.read.reader import FileCache, members_to_dict
from fpipe.storage.read.record import ArrayStore, IndexRecord
from fpipe.storage.read.tar.batch import byte_ranges as batch_byte_ranges
from fpipe.storage.read.tar.batch import read_many
from fpipe.storage.read.tar.index import READ_GAP, TAR_HEADER
from fpipe.storage.read.tar.samples import sample_index
from fpipe.storage.read.webdataset import is_gzip_shard, shard_stem

__all__ = ["TarReader", "tar_arrays"]


class TarReader:
    """Raw members and keys of a prepared tar dataset (see the module docstring)."""

    def __init__(
        self,
        path: str,
        index_dir: Path,
        record: IndexRecord,
        arrays: ArrayStore,
        files: FileCache,
        shard_check: ShardCheck = "off",
        check_on_read: bool = False,
    ):
        self.path = path
        self._dir = index_dir
        self._record = record
        self._array = arrays
        self._files = files
        #: a format 3 shard table, and a dataset opened to plan (its shards unchecked), is
        #: checked shard by shard when first read (not at open)
        lazy = check_on_read or record.shard_arrays
        self._check = shard_check if lazy else None
        self._stems = _PerShard(record, lambda s: shard_stem(s.name))
        self._gz = _PerShard(record, lambda s: is_gzip_shard(s.name))  # decompressed offsets
        #: shard ids, keys, members and columns, whatever the index layout (.samples)
        self._samples = sample_index(record, arrays, str(index_dir))
        self._members = self._samples.members
        self._columns: dict[str, object] = {}  #: index_column's, by name
        self._paths: dict[int, str] = {}  #: shard id -> file to read (see shard_path)

    def key(self, i: int) -> str:
        """``"<shard stem>/<member key>"`` of sample ``i`` (WebDataset's ``__key__``)."""
        return f"{self._stems[self._shard_id(i)]}/{self.member_key(i)}"

    def member_key(self, i: int) -> str:
        """The key of sample ``i`` inside its shard (no shard stem): what a join matches."""
        return self._key_bytes(i).decode("utf-8", "surrogateescape")

    def _key_bytes(self, i: int) -> bytes:
        """:meth:`member_key` of sample ``i`` as stored (the tar name up to the extension)."""
        try:
            return self._samples.key(i)
        except CorruptIndex as e:
            name = self._record.shards[self._shard_id(i)].name
            raise BadSampleError(name, f"#{i}", self._corrupt(str(e))) from None

    def member_keys(self, indices) -> np.ndarray:
        """:meth:`member_key` of samples ``indices`` at once, as UTF-8 bytes (numpy ``S``)."""
        try:
            return self._samples.packed_keys(np.asarray(indices, dtype=np.int64))
        except CorruptIndex as e:
            raise BadSampleError(self.path, "keys", self._corrupt(str(e))) from None

    def index_column(self, name: str):
        """Column ``name`` (or ``shard_id``) as the index layout gives it: an array-like
        derived on access for a compact index, None where it is the array
        ``columns/<name>.npy`` (``shard_id.npy``) itself. One object per name, as the arrays
        are (``fpipe info`` tells an alias from its column by identity)."""
        if name not in self._columns:
            self._columns[name] = self._samples.column(name)
        return self._columns[name]

    def _corrupt(self, what: str) -> str:
        return f"the index is corrupt ({what}); re-run `fpipe prepare {self.path}`"

    def _shard_id(self, i: int) -> int:
        sid = self._samples.shard_id(i)
        if not 0 <= sid < len(self._record.shards):
            raise BadSampleError(self.path, f"#{i}", self._corrupt(f"shard id {sid}"))
        return sid

    def has_member(self, ext: str, i: int) -> bool:
        """Whether sample ``i`` has a member with extension ``ext``."""
        return ext in self._record.members and any(p[0] == ext for p in self.members(i))

    def shard_path(self, shard_id: int) -> str:
        """File to read shard ``shard_id`` from (a decompressed copy for gzip shards)."""
        name = self._record.shards[shard_id].name
        if self._check is None:
            path = os.path.join(self.path, name)
        else:  # format 3, or opened to plan: checked here, once per shard and process
            path = contained(self.path, name, where=self.path, what="shard")
            check_shard_unchanged(self.path, self._record.shards[shard_id], self._check)
        if not is_gzip_shard(name):
            return path
        return _decompressed_copy(path, self._dir / "decompressed" / (shard_stem(name) + ".tar"))

    def members(self, i: int) -> list[tuple[str, int, int]]:
        """``(ext, offset, size)`` of every member of sample ``i`` in tar order, each checked
        to lie inside its shard.

        Raises:
          BadSampleError: the index is corrupt there (it says to re-run ``fpipe prepare``).
        """
        sid = self._shard_id(i)
        limit = self._record.shards[sid].bytes  # member bytes must lie inside the shard
        try:
            placed = self._members.placed(i)
        except CorruptIndex as e:
            name = self._record.shards[sid].name
            raise BadSampleError(name, f"#{i}", self._corrupt(str(e))) from None
        for ext, off, size in placed:
            if (
                off < TAR_HEADER
                or size < 0
                or (limit >= 0 and off + size > limit and not self._gz[sid])
            ):
                raise BadSampleError(
                    self._record.shards[sid].name,
                    self.key(i),
                    self._corrupt(f"member {ext!r} at {off}+{size} in a shard of {limit} bytes"),
                )
        return placed

    def _placed(self, i: int, exts: frozenset[str] | None = None) -> list[tuple[str, int, int]]:
        """:meth:`members` of sample ``i``, only those in ``exts`` (plain or ``.gz``) when
        given."""
        placed = self.members(i)
        if exts is None:
            return placed
        return [p for p in placed if strip_gz(p[0]) in exts]

    def byte_ranges(self, indices, exts: frozenset[str] | None = None) -> list[tuple]:
        """``(path, offset, size)`` of the reads :meth:`read` and :meth:`read_many` make for
        samples ``indices`` (only the members in ``exts`` when given); a sample whose index
        entry is bad has none (its read raises the error, under the error policy). The index
        is looked up for all of them at once, as :meth:`read_many` does
        (:func:`fpipe.storage.read.tar.batch.byte_ranges`)."""
        idx = np.asarray(indices, dtype=np.int64)
        got = batch_byte_ranges(self, idx, exts) if len(idx) else []
        return self.byte_ranges_each(idx.tolist(), exts) if got is None else got

    def byte_ranges_each(self, indices, exts: frozenset[str] | None = None) -> list[tuple]:
        """:meth:`byte_ranges`, one sample at a time (indexes of format 1, and the samples
        whose reads :meth:`read` makes alone)."""
        ranges = []
        for i in indices:
            try:
                placed = self._placed(i, exts)
                path = self.cached_shard_path(self._shard_id(i)) if placed else ""
            except (BadSampleError, OSError):
                continue  # read(i) raises it, under the error policy
            if placed:
                ranges.extend((path, o, s) for o, s in _read_ranges(placed)[0])
        return ranges

    def prefetch(self, indices, exts: frozenset[str] | None = None) -> None:
        """Hand the byte ranges of samples ``indices`` to the file layer, which may fetch them
        concurrently (object storage) before :meth:`read` asks for them."""
        fetch = getattr(self._files, "prefetch", None)
        if fetch is not None:
            fetch(self.byte_ranges(indices, exts))

    def read_ahead(self, indices, exts: frozenset[str] | None = None):
        """``(files, ranges)``: the file layer that reads samples ``indices`` and their
        :meth:`byte_ranges`, for a read-ahead window (:mod:`fpipe.storage.read.read_ahead`)."""
        return self._files, self.byte_ranges(indices, exts)

    def read(
        self, i: int, exts: frozenset[str] | None = None, limits: DecodeLimits | None = None
    ) -> dict[str, bytes]:
        """Raw member bytes of sample ``i`` by extension (``.gz`` members decompressed within
        ``limits``); only the members in ``exts`` when given."""
        sid = self._shard_id(i)
        placed = self._placed(i, exts)
        try:
            path = self.shard_path(sid)
        except OSError as e:
            name = self._record.shards[sid].name
            raise BadSampleError(name, self.key(i), f"cannot open: {e}") from None
        if not placed:
            return {}
        try:
            parts = self._pread(path, i, placed, sid)
        except OSError as e:
            raise BadSampleError(path, self.key(i), f"read failed: {e}") from None
        return members_to_dict(path, lambda: self.key(i), parts, limits)

    def read_many(
        self, indices, exts: frozenset[str] | None = None, limits: DecodeLimits | None = None
    ) -> list[tuple]:
        """``(key, members)`` of each sample of ``indices`` (in range), as :meth:`key` and
        :meth:`read` give them, the index looked up for all at once
        (:func:`fpipe.storage.read.tar.batch.read_many`); a sample whose key or read fails holds
        the exception instead of its members, for the caller to raise in its turn."""
        return read_many(self, np.asarray(indices, dtype=np.int64), exts, limits)

    def cached_shard_path(self, shard_id: int) -> str:
        """:meth:`shard_path`, remembered per shard once it succeeded."""
        path = self._paths.get(shard_id)
        if path is None:
            path = self._paths[shard_id] = self.shard_path(shard_id)
        return path

    def _pread(self, path: str, i: int, placed: list[tuple[str, int, int]], sid: int):
        """Member bytes of sample ``i`` (one read when they are close), after checking that
        the tar header before one of them names it (see :func:`_read_ranges`)."""
        bufs = []
        ranges, (ext, at, _) = _read_ranges(placed)
        for lo, size in ranges:
            buf = self._files.pread(path, lo, size)
            if len(buf) < size:
                raise BadSampleError(
                    path,
                    self.key(i),
                    f"shard truncated: wanted bytes {lo}..{lo + size}, file ends at "
                    f"{lo + len(buf)}",
                )
            bufs.append((lo, memoryview(buf)))
        expected = self._key_bytes(i) + b"." + ext.encode("utf-8", "surrogateescape")
        found = header_mismatch(_slice(bufs, at - TAR_HEADER, TAR_HEADER), expected)
        if found is not None:
            name = self._record.shards[sid].name
            want = expected.decode("utf-8", "replace")
            raise BadSampleError(
                path, self.key(i), stale_reason(self.path, name, at - TAR_HEADER, want, found)
            )
        if len(bufs) == 1:  # the usual case: one read holds every member
            lo, mv = bufs[0]
            return [(e, bytes(mv[o - lo : o - lo + n])) for e, o, n in placed]
        return [(e, _slice(bufs, o, n)) for e, o, n in placed]

    def av_names(self, field: str, i: int) -> tuple[str, ...]:
        """Extension :meth:`read` gives field ``field``'s media under: the first of the
        field's alternatives present in sample ``i`` (plain or ``.gz``)."""
        for e in self._record.av_fields.get(field, ()):
            if self.has_member(e, i) or self.has_member(e + GZ, i):
                return (e,)
        return ()


class _PerShard:
    """``f(shard entry)`` by shard id, computed on first use (a format 3 index may list a
    million shards; a process reads few of them)."""

    def __init__(self, record: IndexRecord, f):
        self._shards = record.shards
        self._f = f
        self._done: dict[int, object] = {}

    def __getitem__(self, sid: int):
        got = self._done.get(sid)
        if got is None:
            got = self._done[sid] = self._f(self._shards[sid])
        return got


def tar_arrays(record: IndexRecord) -> tuple[str, ...]:
    """The arrays every sample read uses (their headers are checked when a dataset opens)."""
    if record.compact is not None:
        sizes = (f"compact/size.{j}.npy" for j in range(len(record.compact.pattern)))
        shard = ("keys_at", "key_first", "key_width", "members_at", "blocks_at")
        per_shard = (f"compact/shard/{a}.npy" for a in shard)
        return (*per_shard, "compact/offset_base.npy", "compact/offset.npy", *sizes)
    head = ("shard_id.npy", "keys.offsets.npy")
    if record.num_members is None:
        return head
    return (*head, *(f"members/{a}.npy" for a in ("start", "ext", "offset", "size")))


def _read_ranges(
    placed: list[tuple[str, int, int]],
) -> tuple[list[tuple[int, int]], tuple[str, int, int]]:
    """``(offset, size)`` reads for a sample's members, by offset (one covering them all when
    they are close: they are contiguous in a tar, separated by headers; else one per member),
    and the member whose tar header is checked against the index: the second one when the
    sample is one read (its header lies between the first two members, read anyway), else the
    first, whose header the first read then includes (512 bytes more)."""
    if len(placed) == 1:
        _, lo, size = placed[0]
        return [(lo - TAR_HEADER, size + TAR_HEADER)], placed[0]
    by_offset = sorted(placed, key=_offset)
    lo = by_offset[0][1]
    hi = max(o + s for _, o, s in by_offset)
    if hi - lo <= sum(s for _, _, s in by_offset) + READ_GAP:
        return [(lo, hi - lo)], by_offset[1]
    ranges = [(o, s) for _, o, s in by_offset]
    ranges[0] = (lo - TAR_HEADER, ranges[0][1] + TAR_HEADER)
    return ranges, by_offset[0]


def _offset(member: tuple[str, int, int]) -> int:
    return member[1]


def _slice(bufs: list[tuple[int, memoryview]], off: int, size: int) -> bytes:
    """Bytes ``off .. off + size`` of the shard from the reads ``(offset, bytes)`` holding them."""
    lo, mv = next((lo, mv) for lo, mv in bufs if lo <= off and off + size <= lo + len(mv))
    return bytes(mv[off - lo : off - lo + size])


def _decompressed_copy(src: str, dst: Path) -> str:
    """Decompress a gzip shard once to ``dst`` (atomic rename; safe across processes and
    threads).

    A corrupt or truncated shard raises ``OSError`` (the caller makes it a bad sample) and
    leaves no partial file behind."""
    if dst.exists():
        return str(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    # a temporary file per thread: thread workers read a shard first at the same time, and
    # one opening another's half-written copy would truncate it (zeros renamed into place)
    tmp = beside(dst)
    try:
        with gzip.open(src, "rb") as fin, open(tmp, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
        os.replace(tmp, dst)
    except (OSError, EOFError, zlib.error) as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise OSError(f"cannot decompress gzip shard {src}: {type(e).__name__}: {e}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return str(dst)
