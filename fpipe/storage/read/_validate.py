"""Checks of a prepared index against itself and the files it describes, when it is opened.

An index is data from disk, so it is not trusted: :func:`check_record` (counts, shard paths
confined to the dataset folder), :func:`check_shards_unchanged` (each shard's size and mtime
against what ``fpipe prepare`` recorded) and :func:`array_checker` (each array's length and
dtype, checked when the array is first loaded) run on open. All of them cost O(shards) or one
``.npy`` header, never O(samples), so a billion-sample index still opens in milliseconds. Values
inside the arrays (member offsets within their shard, key offsets) are checked per sample when
the sample is read (:class:`~fpipe.storage.read.tar.reader.TarReader`); ``fpipe check DIR`` verifies
every member against the shards in one full pass.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.storage.paths import contained
from fpipe.storage.read.npy_files import map_plain_npy, plain_npy_header
from fpipe.storage.read.record import IndexRecord
from fpipe.storage.read.webdataset import _checksum_ok

__all__ = [
    "ShardCheck",
    "array_checker",
    "check_headers",
    "check_record",
    "check_remote_sizes",
    "check_shards_unchanged",
    "header_mismatch",
    "header_names",
    "stale_reason",
]

#: How opening a prepared dataset checks that its shards are the ones indexed:
#: ``"mtime"`` (default): size and modification time (an Energon folder: no shard newer than
#: its ``.tar.idx``); ``"size"``: size only (for copies that did not keep mtimes); ``"off"``:
#: no check. Every layout also checks each sample's bytes against its index when it is read.
ShardCheck = Literal["mtime", "size", "off"]

_REPREPARE = "re-run `fpipe prepare {root}` to index the shards as they are now"


def check_record(root: str | Path, record: IndexRecord, where: str, paths: bool = True) -> None:
    """Counts agree and every shard path stays inside ``root`` (a folder or a URL; see
    :func:`fpipe.storage.paths.contained`); ``paths=False``: counts only, for a reader that
    checks each shard's path when it first reads the shard (a dataset opened to plan)."""
    if record.num_samples < 0:
        raise ConfigError(f"{where}: num_samples is negative ({record.num_samples})")
    if record.num_members is not None and record.num_members < 0:
        raise ConfigError(f"{where}: num_members is negative ({record.num_members})")
    if record.layout == "table":
        return
    if record.shard_arrays:
        _check_shard_table(root, record, where)
        return
    for s in record.shards:
        if s.samples < 0:
            raise ConfigError(f"{where}: shard {s.name!r} has a negative sample count")
        if paths:
            contained(root, s.name, where=where, what="shard path")
    total = sum(s.samples for s in record.shards)
    if total != record.num_samples:
        raise ConfigError(
            f"{where}: num_samples is {record.num_samples} but the shards hold {total} samples"
        )


def check_shards_unchanged(root: str | Path, record: IndexRecord, mode: ShardCheck) -> None:
    """Refuse shards whose size (or mtime) differs from what the index recorded: a shard
    rewritten or swapped after ``fpipe prepare`` would deliver other samples' bytes. An Energon
    folder records no sizes: with ``"mtime"`` a shard modified after its ``.tar.idx`` was
    written is refused."""
    if mode not in ("mtime", "size", "off"):
        raise ConfigError(f"shard check must be 'mtime', 'size' or 'off', got {mode!r}")
    if mode == "mtime" and record.layout == "energon":
        _check_energon_mtimes(root, record)
    if mode == "off" or record.layout not in ("tar", "parquet"):
        return
    if record.shard_arrays:  # O(shards) stats on every rank: each shard is checked when first read
        return
    for s in record.shards:
        check_shard_unchanged(root, s, mode)


def check_shard_unchanged(root: str | Path, s, mode: ShardCheck) -> None:
    """:func:`check_shards_unchanged` of one shard (a :class:`~.record.ShardEntry`)."""
    if mode == "off":
        return
    path = os.path.join(root, s.name)
    try:
        st = os.stat(path)
    except OSError as e:
        raise ConfigError(
            f"{path}: indexed shard cannot be read ({e}); " + _REPREPARE.format(root=root)
        ) from None
    if s.bytes >= 0 and st.st_size != s.bytes:
        raise ConfigError(
            f"{path}: shard changed since it was indexed ({st.st_size} bytes, the index "
            f"says {s.bytes}); " + _REPREPARE.format(root=root)
        )
    if mode == "mtime" and s.mtime_ns >= 0 and st.st_mtime_ns != s.mtime_ns:
        raise ConfigError(
            f"{path}: shard modified since it was indexed (mtime {st.st_mtime_ns} ns, the "
            f"index says {s.mtime_ns}); " + _REPREPARE.format(root=root) + " (or open it "
            "with shard_check='size' if it was copied without keeping modification times)"
        )


def _check_shard_table(root: str | Path, record: IndexRecord, where: str) -> None:
    """:func:`check_record` of a format 3 shard table, in O(1) Python calls: counts with numpy,
    and the names that could lead out of ``root`` by their text (``..``, ``\\``, NUL, ``:``,
    a leading ``/``, empty) checked one by one. A symbolic link out is refused when the
    reader first opens the shard (:class:`~.tar.reader.TarReader`)."""
    table = record.shards
    if len(table) and int(table.samples.min()) < 0:
        bad = int(np.flatnonzero(table.samples < 0)[0])
        raise ConfigError(f"{where}: shard {table.name(bad)!r} has a negative sample count")
    total = int(table.samples.sum())
    if total != record.num_samples:
        raise ConfigError(
            f"{where}: num_samples is {record.num_samples} but the shards hold {total} samples"
        )
    off = table._offsets
    suspect = [table.names_with(n) for n in (b"..", b"\\", b"\0", b":")]
    lengths = np.diff(off)
    starts = off[:-1][lengths > 0]
    slash = np.flatnonzero(lengths > 0)[table._names[starts] == ord("/")] if len(starts) else []
    # (not np.unique: its first call imports numpy.ma, ~15 ms in every worker process that
    # opens a dataset)
    flagged = np.concatenate([*suspect, slash, np.flatnonzero(lengths == 0)])
    for i in sorted(set(flagged.tolist())):
        contained(root, table.name(int(i)), where=where, what="shard path")


def check_remote_sizes(url: str, record: IndexRecord, sizes: dict[str, int]) -> None:
    """Refuse objects missing or whose size differs from the ``bytes`` prepare recorded
    (``sizes``: object name relative to ``url`` -> size, from one listing)."""
    for s in record.shards:
        size = sizes.get(s.name)
        if size is None or (s.bytes >= 0 and size != s.bytes):
            now = "is missing" if size is None else f"has {size} bytes, the index says {s.bytes}"
            raise ConfigError(
                f"{url}/{s.name}: shard changed since it was indexed (it {now}); "
                + _REPREPARE.format(root=url)
                + " (or open it with shard_check='off')"
            )


def _check_energon_mtimes(root: str | Path, record: IndexRecord) -> None:
    for s in record.shards:
        path = os.path.join(root, s.name)
        try:
            shard, idx = os.stat(path).st_mtime_ns, os.stat(path + ".idx").st_mtime_ns
        except OSError:
            continue  # a missing shard or index fails when read, with its name
        if shard > idx:
            raise ConfigError(
                f"{path}: shard modified after its .tar.idx was written (by `energon "
                f"prepare`); re-run `energon prepare {root}` (or `fpipe prepare {root}`) to "
                "index the shards as they are now (or open it with shard_check='size' if it "
                "was copied without keeping modification times)"
            )


def _expected(record: IndexRecord, name: str) -> tuple[int, str] | None:
    """(length, dtype kinds) an index array must have, or None for arrays not checked here."""
    n = record.num_samples
    if name == "shard_id.npy":
        return n, "iu"
    if name == "keys.offsets.npy":
        return n + 1, "iu"
    if name == "keys.npy":
        return -1, "u"
    if record.num_members is not None and name.startswith("members/"):
        if name == "members/start.npy":
            return n + 1, "iu"
        return record.num_members, "iu"
    if name.startswith("members/") and name.endswith((".offset.npy", ".size.npy")):
        return n, "iu"
    if name.startswith("columns/"):
        return n, "iufb"
    if name.startswith("compact/"):  # index format 4 (tar/compact.py)
        return _expected_compact(record, name[len("compact/") :])
    if name.startswith("parquet/"):  # file row group, place in it, row number (Parquet layout)
        return n, "iu"
    return None


def _expected_compact(record: IndexRecord, name: str) -> tuple[int, str]:
    """:func:`_expected` of ``compact/<name>``: per shard, per sample, or its own length
    (the keys and members of the shards stored explicitly)."""
    if name.startswith("shard/"):
        return len(record.shards), "iu"
    if name.startswith("columns/"):
        return record.num_samples, "iufb"
    if name == "offset.npy" or name.startswith("size."):
        return record.num_samples, "iu"
    return -1, "iu"


def _check_shape(record: IndexRecord, where: str, name: str, shape: tuple, dtype) -> None:
    want = _expected(record, name)
    if want is None:
        return
    length, kinds = want
    if len(shape) != 1 or (length >= 0 and shape[0] != length) or dtype.kind not in kinds:
        raise ConfigError(
            f"{where}/{name}: shape {shape} and dtype {dtype} do not fit an index of "
            f"{record.num_samples} samples (want ({length if length >= 0 else 'any'},) of "
            f"kind {kinds!r}); the index is corrupt: re-run `fpipe prepare`"
        )


def array_checker(record: IndexRecord, where: str) -> Callable[[str, np.ndarray], None]:
    """A check run on each index array when it is loaded: its length and dtype kind."""

    def check(name: str, arr: np.ndarray) -> None:
        _check_shape(record, where, name, arr.shape, arr.dtype)
        starts = ("keys.offsets.npy", "members/start.npy", "compact/keys.offsets.npy")
        if name in (*starts, "compact/explicit/start.npy") and len(arr) and int(arr[0]) != 0:
            raise ConfigError(f"{where}/{name}: does not start at 0; the index is corrupt")
        if name == "members/start.npy" and len(arr) and int(arr[-1]) != record.num_members:
            raise ConfigError(
                f"{where}/{name}: ends at {int(arr[-1])}, not at the {record.num_members} "
                "members of the table; the index is corrupt: re-run `fpipe prepare`"
            )

    return check


def check_headers(
    index_dir: Path, record: IndexRecord, names: tuple[str, ...]
) -> dict[str, np.ndarray]:
    """Check the length and dtype of arrays from their ``.npy`` headers only (no data read).

    Returns the arrays in the form ``np.save`` writes, mapped while their headers were read:
    the reads that follow use these very arrays, so each file is opened once, not once here
    and again on first use. The :class:`~fpipe.storage.read.record.ArrayStore` takes them
    (:meth:`~fpipe.storage.read.record.ArrayStore.take_mapped`) and checks each in full
    (:func:`array_checker`) when it is first used, as an array it maps itself."""
    mapped = {}
    for name in names:
        path = os.path.join(index_dir, name)
        try:
            try:
                arr = map_plain_npy(path)  # the form np.save writes, parsed fast
            except ValueError:  # shorter than its header says: found when it is first used
                arr = None
            if arr is not None:
                shape, dtype = arr.shape, arr.dtype
                mapped[name] = arr
            else:
                shape, dtype = _header(path)
        except (OSError, ValueError) as e:
            raise ConfigError(
                f"{path}: unreadable index array ({e}); re-run `fpipe prepare`"
            ) from None
        _check_shape(record, str(index_dir), name, tuple(shape), dtype)
    return mapped


def _header(path: str) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of the ``.npy`` file ``path`` from its header."""
    with open(path, "rb") as f:
        plain = plain_npy_header(f)
        if plain is not None:
            return (plain[0],), plain[1]
        f.seek(0)
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, _, dtype = np.lib.format.read_array_header_2_0(f)
        return shape, dtype


def header_names(buf: bytes, at: int, expected: bytes) -> bool:
    """Whether the tar header at byte ``at`` of ``buf`` (512 bytes there) plainly names member
    ``expected``: its name field is ``expected`` and nothing more. The usual case of
    :func:`header_mismatch`, decided without the checksum or a copy of the header; False says
    only that :func:`header_mismatch` has to look further."""
    n = len(expected)
    return n < 100 and buf.startswith(expected, at) and buf[at + n] == 0


def header_mismatch(header: bytes, expected: bytes) -> str | None:
    """None if the 512-byte tar ``header`` is the one of member ``expected`` (``<key>.<ext>``
    as indexed), else what is there instead.

    Read with the member, it costs nothing extra: the bytes come in the same read. A long name
    (GNU or pax) leaves its first 99-100 bytes in the header and a pax name ``?`` for each
    non-ASCII character; both are accepted as the name they stand for.

    Examples:
      >>> import io, tarfile
      >>> buf = io.BytesIO()
      >>> with tarfile.open(fileobj=buf, mode="w") as tf:
      ...     tf.addfile(tarfile.TarInfo("0001.jpg"))
      >>> header_mismatch(buf.getvalue()[:512], b"0001.jpg") is None
      True
      >>> header_mismatch(buf.getvalue()[:512], b"0002.jpg")
      "member '0001.jpg'"
    """
    if len(header) < 512:  # cut short: the end of the file
        return "no tar header"
    if header_names(header, 0, expected):
        return None  # the usual case, decided without the checksum
    if header == bytes(512) or not _checksum_ok(header):
        return "no tar header"
    short = header[:100].split(b"\0", 1)[0]
    name = short
    if header[257:263] == b"ustar\0":  # POSIX: a name over 100 bytes may be split in two
        prefix = header[345:500].split(b"\0", 1)[0]
        if prefix:
            name = prefix + b"/" + short
    if name == expected:
        return None
    ascii_name = expected.decode("utf-8", "surrogateescape").encode("ascii", "replace")
    for want in (expected, ascii_name):
        if want == name or (len(short) >= 99 and want.startswith(short)):
            return None
    return f"member {name.decode('utf-8', 'replace')!r}"


def stale_reason(root: str, shard: str, offset: int, expected: str, found: str) -> str:
    """The message of a shard that no longer matches its index (rewritten, reordered or
    swapped after prepare): what was expected where, what is there, and what to run."""
    return (
        f"stale shard {shard!r}: the index has member {expected!r} at byte {offset}, the "
        f"shard has {found} there; the shard changed after it was indexed (rewritten, "
        f"reordered or swapped): " + _REPREPARE.format(root=root)
    )
