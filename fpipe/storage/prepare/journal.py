"""The prepare journal: what makes ``fpipe prepare`` of a local folder resumable.

Each shard's scan (:class:`~.scan.ShardScan`) is appended to a journal file in
``DIR/.fpipe/prepare-journal/`` as soon as it is done, with the shard's size and modification
time taken before it was read. A prepare that is killed and run again reads every journal file
there and scans only the shards without a record whose size and time still match: the scans
it takes from the journal are the ones it would compute, so the index it writes is the one of a
prepare that never stopped, byte for byte.

Writing the final index replaces ``.fpipe/`` as a whole (:func:`~fpipe.storage.read.tar.index.
write_folder`), which removes the journal. ``--part`` runs journal in
``DIR/.fpipe-parts/prepare-journal/``, removed by ``--merge`` with the parts: a part run again
(on Ray, a retried or resubmitted task, whatever the number of parts) takes the records of its
shards from every part's journal.

A file is a header record (the format and a digest of the scan options: a record made with
other fields or columns is never used), then one record per shard; a record is its length, its
CRC-32 and a msgpack body. Records are flushed as written, so a killed process loses only the
shard it was writing; reading stops at the first torn or corrupt record. A new run writes a file
of its own and never appends to an older one. Decoding is msgspec's typed decoding: arrays are
(dtype, shape, bytes) of numeric dtypes only, and no code is run.
"""

from __future__ import annotations

import hashlib
import os
import struct
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from fpipe.storage.prepare.scan import ScanOptions, ShardScan

__all__ = ["JOURNAL_DIR", "Journal"]

JOURNAL_DIR = "prepare-journal"
_FORMAT = "fpipe-prepare-journal-1"
_FRAME = struct.Struct("<II")  # body length, CRC-32 of the body
_SYNC_EVERY_S = 2.0  # fsync at most this often (a process kill loses nothing already flushed)


class _Header(msgspec.Struct, array_like=True):
    format: str
    options: str  #: digest of the scan options


class _Entry(msgspec.Struct, array_like=True):
    name: str
    size: int
    mtime_ns: int
    scan: msgspec.Raw  #: the ShardScan, decoded only for a shard that is wanted


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return (obj.dtype.str, list(obj.shape), obj.tobytes())
    if callable(obj):  # a function passed as extra_columns_fn: named, as the user wrote it
        return f"{getattr(obj, '__module__', '')}:{getattr(obj, '__qualname__', repr(obj))}"
    raise NotImplementedError(f"cannot journal {type(obj).__name__}")


def _dec_hook(typ: type, obj: Any) -> Any:
    if typ is np.ndarray:
        dtype, shape, data = obj
        dt = np.dtype(str(dtype))
        if dt.kind not in "biuf":
            raise ValueError(f"array dtype {dt} is not numeric")
        arr = np.frombuffer(data, dt).copy()  # writable, owning its memory
        return arr if len(shape) == 1 else arr.reshape([int(n) for n in shape])
    raise NotImplementedError(f"cannot decode {typ}")


_encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_scan_decoder = msgspec.msgpack.Decoder(ShardScan, dec_hook=_dec_hook)
_entry_decoder = msgspec.msgpack.Decoder(_Entry)
_header_decoder = msgspec.msgpack.Decoder(_Header)


def _options_digest(opts: ScanOptions) -> str:
    return hashlib.sha256(_encoder.encode(opts)).hexdigest()  # a digest: no credentials kept


def _records(path: Path) -> Iterator[bytes]:
    """Bodies of the intact records of one file, up to the first torn or corrupt one."""
    try:
        data = path.read_bytes()
    except OSError:
        return
    at = 0
    while at + _FRAME.size <= len(data):
        size, crc = _FRAME.unpack_from(data, at)
        body = data[at + _FRAME.size : at + _FRAME.size + size]
        if len(body) < size or zlib.crc32(body) != crc:
            return
        yield body
        at += _FRAME.size + size


class Journal:
    """The journal of one prepare (or one ``--part``): its files are in ``folder``
    (``DIR/.fpipe/prepare-journal``, for parts ``DIR/.fpipe-parts/prepare-journal``)."""

    def __init__(self, folder: str | os.PathLike, opts: ScanOptions, writer: str = "all"):
        self.folder = Path(folder)
        self._digest = _options_digest(opts)
        self._writer = writer
        self._file: Any = None
        self._synced = 0.0

    def load(self, stats: dict[str, tuple[int, int]]) -> dict[str, ShardScan]:
        """Recorded scans of the shards of ``stats`` (name -> size, mtime in ns now) whose size
        and time match the record's. Files written with other scan options are removed."""
        found: dict[str, ShardScan] = {}
        for path in sorted(self.folder.glob("*.jnl")) if self.folder.is_dir() else ():
            bodies = _records(path)
            try:
                header = _header_decoder.decode(next(bodies))
            except (StopIteration, msgspec.DecodeError):
                header = None
            if header is None or header != _Header(_FORMAT, self._digest):
                path.unlink(missing_ok=True)
                continue
            for body in bodies:
                try:
                    entry = _entry_decoder.decode(body)
                    stat = stats.get(entry.name)
                    if entry.name in found or stat is None or stat[0] < 0:
                        continue
                    if stat == (entry.size, entry.mtime_ns):
                        found[entry.name] = _scan_decoder.decode(entry.scan)
                except (msgspec.DecodeError, ValueError, TypeError):
                    continue  # a record this version cannot read: that shard is scanned again
        return found

    def add(self, name: str, stat: tuple[int, int], scan: ShardScan) -> None:
        """Record ``scan`` of shard ``name`` (``stat``: its size and time before the read).
        A shard that could not be read to its end, or not be stat'ed, is not recorded: the
        next run reads it again."""
        if scan.shard_error is not None or stat[0] < 0:
            return
        try:
            body = _encoder.encode(
                _Entry(name, stat[0], stat[1], msgspec.Raw(_encoder.encode(scan)))
            )
        except (NotImplementedError, TypeError, ValueError, UnicodeEncodeError):
            return  # e.g. a key that is not valid UTF-8: scanned again next time
        if self._file is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            name_ = f"{self._writer}-{os.getpid()}-{uuid.uuid4().hex[:8]}.jnl"
            self._file = open(self.folder / name_, "xb")  # noqa: SIM115 - closed by close()
            self._write(_encoder.encode(_Header(_FORMAT, self._digest)))
        self._write(body)
        if time.monotonic() - self._synced > _SYNC_EVERY_S:
            os.fsync(self._file.fileno())
            self._synced = time.monotonic()

    def _write(self, body: bytes) -> None:
        self._file.write(_FRAME.pack(len(body), zlib.crc32(body)) + body)
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
