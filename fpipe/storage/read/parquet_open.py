"""Opening a Parquet file for :class:`~fpipe.storage.read.parquet.ParquetReader` (and for
``fpipe prepare``): :class:`PreadFile`, a file over fpipe's file layer (``pread``) for pyarrow
to read object storage through, and :func:`open_parquet`, a
:class:`pyarrow.parquet.ParquetFile` whose row groups decode into the system allocator's memory.
"""

from __future__ import annotations

import io
from typing import Any

__all__ = ["PreadFile", "open_parquet"]


class PreadFile(io.RawIOBase):
    """A read-only, seekable file over ``files.pread(path, offset, size)`` (a
    :class:`~fpipe.storage.read.reader.FileCache` or a
    :class:`~fpipe.storage.read.remote.RemoteFiles`), for pyarrow to read a Parquet file
    through fpipe's file layer. ``size``: the file's length in bytes."""

    def __init__(self, files: Any, path: str, size: int):
        super().__init__()
        self._files, self._path, self._size, self._pos = files, path, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def size(self) -> int:
        return self._size

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            size = self._size - self._pos
        size = max(0, min(size, self._size - self._pos))
        data = self._files.pread(self._path, self._pos, size) if size else b""
        self._pos += len(data)
        return data

    def readinto(self, buf) -> int:
        data = self.read(len(buf))
        buf[: len(data)] = data
        return len(data)


def open_parquet(source: Any, *, pre_buffer: bool) -> Any:
    """A :class:`pyarrow.parquet.ParquetFile` over ``source`` whose row groups are decoded into
    memory from the system allocator (``pyarrow.system_memory_pool()``).

    Why: a worker decodes a row group (megabytes) every few dozen samples and drops one from its
    cache as often. pyarrow's default allocator (mimalloc) hands such freed memory back to the
    operating system within milliseconds, so every row group's buffers were page-faulted in
    afresh: about 0.1 ms of system time per sample in a 2-worker loader, more than the read
    itself, where the system allocator reuses the memory. Where pyarrow's reader class does
    not take a pool, the file reads with pyarrow's default one. ``pre_buffer``: fetch a row
    group's column chunks together (on pyarrow's I/O threads), for object storage.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(source, pre_buffer=pre_buffer)
    try:
        from pyarrow._parquet import ParquetReader as _Reader
    except ImportError:  # another pyarrow: its default pool
        return pf
    # the options ParquetFile opens with (Arrow extension types on where pyarrow has them)
    for extra in ({"arrow_extensions_enabled": True}, {}):
        try:
            reader = _Reader(memory_pool=pa.system_memory_pool())
            reader.open(source, metadata=pf.metadata, pre_buffer=pre_buffer, **extra)
        except (TypeError, AttributeError):
            continue
        if reader.schema_arrow.equals(pf.schema_arrow):  # the same columns, typed the same
            pf.reader = reader
            break
    return pf
