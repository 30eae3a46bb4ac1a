"""WebDataset shards: listing, member names, and a fast walk over tar headers.

A sample is a run of consecutive tar members sharing a key. As in WebDataset, the key is the
member path up to the first dot of its base name and the rest is the extension
(``a/b.c/001.seg.png`` -> key ``a/b.c/001``, extension ``seg.png``). Members without a dot in
their base name and Energon-style meta members (``__name__``) are skipped, as are directories
and other non-regular entries. A link member (symbolic or hard) is never followed: the walk
tells the caller (``on_link``), which refuses its sample.

The walk parses plain ustar/GNU headers of regular files with :mod:`struct`-free byte slicing
(checksum verified) and hands every other header (pax, GNU long names, base-256 sizes, sparse
files, ...) to Python's :mod:`tarfile` at the same offset, so any tar that ``tarfile`` reads is
read. Only the fast path makes 20,000+ samples/s on one core possible.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import tarfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from fpipe.storage.paths import PathEscapeError, contained, expand_braces

__all__ = [
    "RawSample",
    "SHARD_SUFFIXES",
    "ShardError",
    "is_gzip_shard",
    "iter_samples",
    "list_shards",
    "peek_extensions",
    "shard_stem",
    "split_name",
]

SHARD_SUFFIXES = (".tar", ".tar.gz", ".tgz")
_BLOCK = 512
_ZERO = bytes(_BLOCK)
_META_RE = re.compile(r"(^|/)__[^/]*__($|/)")

#: (key, [ext...], [offset_data...], [size...], {ext: bytes read}) of one sample.
RawSample = tuple[str, list[str], list[int], list[int], dict[str, bytes]]


class ShardError(Exception):
    """The shard cannot be read past some point (truncated or corrupt)."""

    def __init__(self, reason: str, key: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.key = key


def shard_stem(name: str) -> str:
    """Shard name without its ``.tar`` / ``.tar.gz`` / ``.tgz`` suffix (used in sample keys)."""
    for suffix in SHARD_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def is_gzip_shard(name: str) -> bool:
    """True for ``.tar.gz`` and ``.tgz`` shards."""
    return name.endswith((".tar.gz", ".tgz"))


def open_shard(root: str, name: str, storage=None) -> tuple[BinaryIO, int | None]:
    """Open shard ``name`` of the dataset at ``root`` (a folder or a URL) for one sequential
    walk: ``(binary file, size in bytes or None for gzip shards)``. A shard on object storage
    is fetched by one streamed GET into an anonymous local temporary file. Raises OSError, or
    :class:`~fpipe.storage.paths.PathEscapeError` (a ``ConfigError``) for a name leading out
    of ``root`` (a shard named by ``.info.yaml``, a link in the folder), which is never
    opened."""
    path = contained(root, name, what="shard")
    if "://" in root:
        from fpipe.storage.paths import is_url
        from fpipe.storage.read.remote import RemoteFiles

        if is_url(root):
            return RemoteFiles(root, storage).open_stream(path)
    if is_gzip_shard(name):
        return gzip.open(path, "rb"), None  # noqa: SIM115 - the caller closes it
    f = open(path, "rb", buffering=1 << 14)  # noqa: SIM115 - the caller closes it
    return f, os.fstat(f.fileno()).st_size


def list_shards(
    root: str | Path,
    patterns: list[str] | tuple[str, ...] = (),
    suffixes: tuple[str, ...] = SHARD_SUFFIXES,
) -> list[str]:
    """Shard paths relative to ``root``, sorted, '/'-separated.

    Without patterns every file ending in one of ``suffixes`` (``*.tar``, ``*.tar.gz`` and
    ``*.tgz``; ``.parquet`` for Parquet datasets) below ``root`` is found (hidden folders such
    as ``.fpipe`` and ``.nv-meta`` are skipped). Patterns are relative globs with brace
    expansion, e.g. ``"train/shard-{0000..0099}.tar"``.
    """
    root = Path(root)
    found: set[str] = set()
    if patterns:
        for pattern in patterns:
            for p in expand_braces(pattern):
                matches = list(root.glob(p)) if any(c in p for c in "*?[") else [root / p]
                found.update(m.relative_to(root).as_posix() for m in matches if m.is_file())
    else:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for fn in filenames:
                if fn.endswith(suffixes) and not fn.startswith("."):
                    found.add(Path(dirpath, fn).relative_to(root).as_posix())
    return sorted(found)


def split_name(name: str) -> tuple[str, str] | None:
    """``(key, ext)`` of a member name, or None for members that belong to no sample."""
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    if dot <= slash + 1 or dot == len(name) - 1:
        return None
    if "__" in name and _META_RE.search(name):
        return None
    return name[:dot], name[dot + 1 :]


def _fallback_tarfile(f) -> tarfile.TarFile:
    """A TarFile that reads headers from ``f`` at whatever offset it is given.

    It is opened on a one-member in-memory archive (so that opening reads nothing from ``f``
    and cannot fail on ``f``'s first header) and then pointed at ``f``.
    """
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as w:
        w.addfile(tarfile.TarInfo("x"), io.BytesIO())
    buf.seek(0)
    tf = tarfile.TarFile(fileobj=buf, mode="r")
    tf.fileobj = f
    tf.firstmember = None
    return tf


#: byte -> its lowest bit (the parity of a byte sum is the parity of its odd bytes' count)
_LOW_BIT = bytes(i & 1 for i in range(256))
_ADLER = 65521  #: Adler-32's modulus (a prime)


def _checksum_ok(h: bytes) -> bool:
    """Whether a 512-byte header's stored checksum is the sum of its bytes, the checksum field
    counted as spaces (what tar writes and ``tarfile`` checks).

    ``sum(h)`` iterates 512 Python ints; this is the same test, exactly, in C: the sum ``S`` of
    512 bytes is at most 130,560, Adler-32's low half is ``(1 + S) mod 65521`` and the count of
    odd bytes gives ``S mod 2``; two numbers in ``[0, 130560]`` equal modulo 65521 and modulo 2
    are equal (131,042 > 130,560).
    """
    try:
        stored = int(h[148:156].split(b"\0", 1)[0].strip() or b"-1", 8)
    except ValueError:
        return False
    want = stored - 256 + sum(h[148:156])  # what sum(h) is when the checksum is right
    return (
        0 <= want <= 255 * _BLOCK
        and zlib.adler32(h) & 0xFFFF == (1 + want) % _ADLER
        and h.translate(_LOW_BIT).count(1) & 1 == want & 1
    )


_CHUNK = 1 << 24


def _read_bounded(read: Callable[[int], bytes], want: int) -> bytes:
    """``read(want)`` in chunks, for streams of unknown length (a gzip shard): a header that
    declares 2**62 bytes ends at the stream's end instead of allocating them up front."""
    if want <= _CHUNK:
        return read(want)
    parts, got = [], 0
    while got < want:
        chunk = read(min(_CHUNK, want - got))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def iter_samples(
    f,
    file_size: int | None,
    read_plan: Callable[[str], int],
    on_link: Callable[[str, str], None] | None = None,
) -> Iterator[RawSample]:
    """Walk a tar stream and yield its samples in order.

    Args:
      f: a binary file object with ``seek``/``read`` (plain file or ``gzip.GzipFile``).
      file_size: bytes in the (decompressed) stream if known, to detect truncated members.
      read_plan: ext -> how many bytes of the member to read (0 none, -1 all, n a prefix).
      on_link: called with ``(member name, link target)`` for each symbolic or hard link
        member (a link is never followed, and its member is left out of its sample).

    Raises:
      ShardError: at the first header or member that cannot be read; samples yielded before
        are complete. ``key`` names the sample that was being read, if any.
    """
    off = 0
    tf: tarfile.TarFile | None = None
    plans: dict[str, int] = {}
    key: str | None = None
    exts: list[str] = []
    offs: list[int] = []
    sizes: list[int] = []
    content: dict[str, bytes] = {}
    seek, read = f.seek, f.read
    while True:
        try:
            seek(off)
            h = read(_BLOCK)
        except (OSError, EOFError, zlib.error) as e:
            raise ShardError(f"unreadable at byte {off}: {e}", key or "") from None
        if len(h) < _BLOCK:
            if h:
                raise ShardError(f"truncated tar header at byte {off}", key or "")
            if key is not None:  # its members are complete: keep it, then report
                yield key, exts, offs, sizes, content
            end = f.tell() if file_size is None else file_size
            if off > end:  # the last member's data is there, its zero padding is cut
                raise ShardError(
                    f"truncated inside the zero padding of the last member: the file ends at "
                    f"byte {end}, the next header was due at byte {off}",
                    key or "",
                )
            # tarfile tolerates a missing end-of-archive marker; a shard cut exactly at a member
            # boundary looks the same, so it is reported (the samples read are kept)
            raise ShardError(
                f"no end-of-archive marker: the shard ends at byte {off}, right after a member "
                "(truncated?)",
                key or "",
            )
        typ = h[156]
        if typ in (0x30, 0x00, 0x35) and h[0] and not h[345] and h[124] < 0x80 and _checksum_ok(h):
            try:
                size = int(h[124:136].split(b"\0", 1)[0].strip() or b"0", 8)
                name = h[:100].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            except ValueError:
                raise ShardError(f"corrupt tar header at byte {off}", key or "") from None
            if typ == 0x35:
                off += _BLOCK
                continue
            data_off = off + _BLOCK
            off = data_off + ((size + 511) & ~511)
        else:
            if h == _ZERO:
                break
            try:
                if tf is None:
                    tf = _fallback_tarfile(f)
                seek(off)
                tf.offset = off
                tf.members = []
                ti = tf.next()
            except (tarfile.TarError, OSError, EOFError, ValueError) as e:
                raise ShardError(f"corrupt tar header at byte {off}: {e}", key or "") from None
            if ti is None:  # tarfile ends quietly at an invalid header; that is corruption
                raise ShardError(f"corrupt tar header at byte {off}", key or "")
            off = tf.offset
            if not ti.isreg():
                if on_link is not None and (ti.issym() or ti.islnk()):
                    on_link(ti.name, ti.linkname)
                continue
            name, size, data_off = ti.name, ti.size, ti.offset_data
        parts = split_name(name)
        if parts is None:
            if file_size is not None and data_off + size > file_size:
                raise ShardError(f"truncated: member {name!r} ends past the end of file", key or "")
            continue
        k, ext = parts
        if k != key:
            if key is not None:
                yield key, exts, offs, sizes, content
            key, exts, offs, sizes, content = k, [], [], [], {}
        if file_size is not None and data_off + size > file_size:
            raise ShardError(
                f"truncated: member {name!r} needs bytes {data_off}..{data_off + size} "
                f"but the file has {file_size}",
                k,
            )
        exts.append(ext)
        offs.append(data_off)
        sizes.append(size)
        n = plans.get(ext)
        if n is None:
            n = plans[ext] = read_plan(ext)
        if n:
            want = size if n < 0 or n > size else n
            try:
                seek(data_off)
                data = read(want) if file_size is not None else _read_bounded(read, want)
            except (OSError, EOFError, zlib.error) as e:
                raise ShardError(f"unreadable member {name!r}: {e}", key) from None
            if len(data) < want:
                raise ShardError(f"truncated member {name!r}", key)
            content[ext] = data
    if key is not None:
        yield key, exts, offs, sizes, content


def peek_extensions(root: str | Path, name: str, max_samples: int = 50) -> list[str]:
    """Extensions seen in the first samples of a shard (for interactive prompts)."""
    seen: dict[str, None] = {}
    try:
        f, size = open_shard(str(root), name)
        with f:
            for i, (_, exts, _, _, _) in enumerate(iter_samples(f, size, lambda e: 0)):
                seen.update(dict.fromkeys(exts))
                if i + 1 >= max_samples:
                    break
    except (ShardError, OSError, PathEscapeError):  # leading out: refused unopened
        pass
    return list(seen)
