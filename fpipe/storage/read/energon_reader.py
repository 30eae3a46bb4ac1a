"""The samples of an Energon folder read: each one byte range of its shard, found through the
shard's ``.tar.idx`` offsets and parsed as one whole sample.

A range that no longer holds exactly one sample (a shard changed after ``energon prepare``)
or that holds a link member is a :class:`~fpipe.core.errors.BadSampleError` naming the shard
and the sample; links are never followed.
"""

from __future__ import annotations

import io
import os

import numpy as np

from fpipe.core.errors import BadSampleError
from fpipe.decode.limits import DecodeLimits
from fpipe.storage.read.energon_meta import IDX_SUFFIX
from fpipe.storage.read.reader import FileCache, members_to_dict, read_each
from fpipe.storage.read.record import IndexRecord
from fpipe.storage.read.webdataset import ShardError, iter_samples, shard_stem, split_name

__all__ = ["EnergonReader", "LinkMember", "parse_sample"]


class LinkMember(Exception):
    """A sample's range holds a link member (symbolic or hard), which is never followed."""

    def __init__(self, member: str, target: str):
        super().__init__(
            f"member {member!r} is a link to {target!r}; links in shards are never followed"
        )


def _refuse_link(member: str, target: str) -> None:
    raise LinkMember(member, target)


def parse_sample(buf: bytes) -> tuple[str, list[tuple[str, bytes]]]:
    """(key, [(ext, bytes)]) of the one sample a byte range of a tar file holds.

    Raises:
      ShardError: the range does not hold exactly one whole sample: no tar header at its
        start, a member cut at its end, or a second sample in it (a shard that no longer
        matches its ``.tar.idx``).
      LinkMember: a member of the sample is a link.
    """
    samples = iter_samples(io.BytesIO(buf), len(buf), lambda e: -1, _refuse_link)
    first = next(samples, None)
    if first is None:
        raise ShardError("no tar member in the sample's byte range")
    key, exts, _offs, _sizes, content = first
    try:
        extra = next(samples, None)
    except ShardError as e:  # the range ends after the sample: no end-of-archive marker in it
        if not e.reason.startswith("no end-of-archive marker"):
            raise
        extra = None
    if extra is not None:
        raise ShardError(f"a second sample ({extra[0]!r}) follows sample {key!r} in the range")
    return key, [(e, content[e]) for e in exts]


def _header_key(head: bytes) -> bytes | None:
    """The sample key of a tar member from its 512-byte header (``name`` field, with the
    POSIX ``prefix``), or None when the header is not a plain file's (long names, pax)."""
    if len(head) < 512 or head[156:157] not in (b"0", b"\0"):
        return None
    name = head[:100].split(b"\0", 1)[0]
    if head[257:263] == b"ustar\x00":
        prefix = head[345:500].split(b"\0", 1)[0]
        if prefix:
            name = prefix + b"/" + name
    parts = split_name(name.decode("utf-8", "surrogateescape"))
    return None if parts is None else parts[0].encode("utf-8", "surrogateescape")


class EnergonReader:
    """Raw members and keys of an Energon folder, through its ``.tar.idx`` sample offsets."""

    def __init__(self, path: str, record: IndexRecord, arrays, files: FileCache):
        self.path = path
        self._record = record
        self._array = arrays
        self._files = files
        self._starts = record.shard_starts()

    def _sample(self, i: int) -> tuple[str, str, list[tuple[str, bytes]]]:
        sid = int(np.searchsorted(self._starts, i, side="right") - 1)
        j = i - int(self._starts[sid])
        offs = self._array(f"idx/{sid}")
        lo, hi = int(offs[j]), int(offs[j + 1])
        name = self._record.shards[sid].name
        path = os.path.join(self.path, name)
        where = f"{shard_stem(name)}/#{j}"
        try:
            buf = self._files.pread(path, lo, hi - lo)
        except OSError as e:
            raise BadSampleError(path, where, f"read failed: {e}") from None
        if len(buf) < hi - lo:
            raise BadSampleError(path, where, f"shard truncated: bytes {lo}..{hi} not there")
        try:
            key, parts = parse_sample(buf)
        except LinkMember as e:
            raise BadSampleError(path, where, str(e)) from None
        except ShardError as e:
            raise BadSampleError(
                path,
                where,
                f"stale shard: bytes {lo}..{hi} of {name!r}, sample {j} by its {IDX_SUFFIX} "
                f"file: {e.reason}; the shard no longer matches its index (changed after "
                f"`energon prepare`): re-run `energon prepare {self.path}` (or `fpipe prepare`)",
            ) from None
        return path, f"{shard_stem(name)}/{key}", parts

    def byte_ranges(self, indices) -> list[tuple[str, int, int]]:
        """``(shard path, offset, size)`` of samples ``indices``: one range each (a sample's
        members are contiguous in its shard)."""
        out = []
        for i in indices:
            sid = int(np.searchsorted(self._starts, i, side="right") - 1)
            offs = self._array(f"idx/{sid}")
            j = int(i) - int(self._starts[sid])
            lo, hi = int(offs[j]), int(offs[j + 1])
            out.append((os.path.join(self.path, self._record.shards[sid].name), lo, hi - lo))
        return out

    def prefetch(self, indices, exts: frozenset[str] | None = None) -> None:
        """Start the ranged GETs of samples ``indices`` (object storage; a no-op on disk)."""
        fetch = getattr(self._files, "prefetch", None)
        if fetch is not None:
            fetch(self.byte_ranges(indices))

    def read_ahead(self, indices, exts: frozenset[str] | None = None):
        """``(files, ranges)`` of samples ``indices`` for a read-ahead window
        (:mod:`fpipe.storage.read.read_ahead`)."""
        return self._files, self.byte_ranges(indices)

    def key(self, i: int) -> str:
        """``"<shard stem>/<member key>"`` (reads the sample's tar headers)."""
        return self._sample(i)[1]

    def member_key(self, i: int) -> str:
        """The key of sample ``i`` inside its shard, from its first tar header (one 512-byte
        read; the whole sample when that header is not a plain file's, e.g. a long name)."""
        return self.member_keys(np.array([i]))[0].decode("utf-8", "surrogateescape")

    def member_keys(self, indices) -> np.ndarray:
        """:meth:`member_key` of samples ``indices`` as UTF-8 bytes (numpy ``S``)."""
        indices = np.asarray(indices, np.int64)
        sids = np.searchsorted(self._starts, indices, side="right") - 1
        out = []
        for i, sid in zip(indices.tolist(), sids.tolist()):
            name = self._record.shards[sid].name
            offs = self._array(f"idx/{sid}")
            lo = int(offs[i - int(self._starts[sid])])
            try:
                key = _header_key(self._files.pread(os.path.join(self.path, name), lo, 512))
            except OSError:
                key = None
            if key is None:  # not a plain ustar/GNU file header: parse the whole sample
                key = self._sample(i)[1][len(shard_stem(name)) + 1 :].encode(
                    "utf-8", "surrogateescape"
                )
            out.append(key)
        return np.array(out or [b""], dtype="S")[: len(out)]

    def read(
        self, i: int, exts: frozenset[str] | None = None, limits: DecodeLimits | None = None
    ) -> dict[str, bytes]:
        """Raw member bytes of sample ``i`` by extension (``.gz`` members decompressed within
        ``limits``). ``exts`` is ignored: the sample is one range of its shard, read whole."""
        path, key, parts = self._sample(i)
        return members_to_dict(path, lambda: key, parts, limits)

    def read_many(
        self, indices, exts: frozenset[str] | None = None, limits: DecodeLimits | None = None
    ) -> list[tuple]:
        """``(key, members)`` of each sample, each read once (:meth:`key` alone reads the
        sample's headers too); a failing sample holds its exception instead of members."""

        def read_one(i: int) -> tuple[str, dict[str, bytes]]:
            path, key, parts = self._sample(i)
            return key, members_to_dict(path, lambda: key, parts, limits)

        return read_each(indices.tolist() if hasattr(indices, "tolist") else indices, read_one)

    def av_names(self, field: str, i: int) -> tuple[str, ...]:
        """No stored audio/video metadata without an fpipe index."""
        return ()
