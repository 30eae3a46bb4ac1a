"""The columns of one decoded Parquet row group (or Arrow record batch), served by row.

:class:`~fpipe.storage.read.parquet.ParquetReader` keeps these for the row groups in its cache.
A row group is decoded by pyarrow once, but a worker process reads only the rows its batches
hold (about half of each row group with two workers), so nothing is done per row until that
row is read: a binary or string column keeps the Arrow buffers and takes a row's bytes out of
the data buffer by its offsets (:class:`BinaryCells`: one copy of the bytes the row holds, no
Python object for the rows never read, and text served as its UTF-8 bytes with no decode and
re-encode); a ``{bytes, path}`` media struct is two such columns (:class:`MediaCells`).
:class:`SpanCells` serves an uncompressed column the same way straight from the memory-mapped
file, with no row group decoded (:mod:`fpipe.storage.read.parquet_mapped`). Other
columns (numbers, nested values) are small and become Python values once per row group.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["BinaryCells", "MediaCells", "SpanCells", "ValueCells", "column_cells"]


class ValueCells:
    """A column as one Python value per row (``None`` for a null cell)."""

    __slots__ = ("_values",)

    def __init__(self, values: list):
        self._values = values

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, row: int) -> Any:
        return self._values[row]


class BinaryCells:
    """A ``binary`` / ``string`` (or ``large_*``) Arrow array: row ``r``'s bytes sliced out of
    the data buffer by the offsets (``None`` for a null cell). The array's buffers are kept,
    not copied."""

    __slots__ = ("_data", "_null", "_offsets")

    def __init__(self, arr: Any):
        import pyarrow as pa

        large = pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type)
        _, offsets, data = arr.buffers()[:3]
        n, at = len(arr), arr.offset
        dtype = np.int64 if large else np.int32
        self._offsets: list[int] = (
            np.frombuffer(offsets, dtype=dtype)[at : at + n + 1].tolist() if n else [0]
        )
        self._data = memoryview(data) if data is not None else memoryview(b"")
        self._null: list[bool] | None = arr.is_null().to_pylist() if arr.null_count else None

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, row: int) -> bytes | None:
        if self._null is not None and self._null[row]:
            return None
        return self._data[self._offsets[row] : self._offsets[row + 1]].tobytes()


class SpanCells:
    """A byte-array column whose cells lie in a buffer (a memory-mapped Parquet file, located
    by :func:`~fpipe.storage.read.parquet_pages.plain_spans`): row ``r`` is
    ``buf[starts[r]:ends[r]]`` (``None`` where ``null`` says so). Nothing is copied until a
    row is read."""

    __slots__ = ("_buf", "_ends", "_null", "_starts")

    def __init__(self, buf: Any, starts: list[int], ends: list[int], null: list[bool] | None):
        self._buf, self._starts, self._ends, self._null = buf, starts, ends, null

    def __len__(self) -> int:
        return len(self._starts)

    def __getitem__(self, row: int) -> bytes | None:
        if self._null is not None and self._null[row]:
            return None
        return bytes(self._buf[self._starts[row] : self._ends[row]])


Cells = Any  #: what a column's cells give by row: BinaryCells, SpanCells or ValueCells


class MediaCells:
    """A ``{bytes, path}`` struct column (Hugging Face ``Image`` / ``Audio``): row ``r`` as
    ``(bytes or None, path or None)``, or ``None`` where the struct itself is null.
    ``data`` / ``paths``: the two fields' cells (None: the struct lacks the field);
    ``null``: which structs are null (None: none is)."""

    __slots__ = ("_bytes", "_n", "_null", "_paths")

    def __init__(self, data: Cells | None, paths: Cells | None, n: int, null: list[bool] | None):
        self._bytes, self._paths, self._n, self._null = data, paths, n, null

    @classmethod
    def of_arrow(cls, arr: Any) -> MediaCells:
        """The cells of a struct array."""
        names = {arr.type.field(k).name for k in range(arr.type.num_fields)}
        return cls(
            _cells(arr.field("bytes"), "binary") if "bytes" in names else None,
            _cells(arr.field("path"), "string") if "path" in names else None,
            len(arr),
            arr.is_null().to_pylist() if arr.null_count else None,
        )

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, row: int) -> tuple[bytes | None, str | None] | None:
        if self._null is not None and self._null[row]:
            return None
        data = None if self._bytes is None else self._bytes[row]
        path = None if self._paths is None else self._paths[row]
        return data, (path.decode("utf-8") if isinstance(path, bytes) else path)


def column_cells(column: Any, kind: str) -> ValueCells | BinaryCells | MediaCells:
    """One row group's ``column`` (a pyarrow ``ChunkedArray``) as cells by row, for a column
    of ``kind`` (``media`` | ``string`` | ``binary`` | ``number`` | ``json``): binary and
    string cells give bytes (text as UTF-8), media cells ``(bytes, path)``, the others Python
    values."""
    arr = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    if kind == "media":
        return MediaCells.of_arrow(arr)
    return _cells(arr, kind)


def _cells(arr: Any, kind: str) -> ValueCells | BinaryCells:
    import pyarrow as pa

    t = arr.type
    if kind in ("binary", "string") and (
        pa.types.is_binary(t)
        or pa.types.is_string(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_large_string(t)
    ):
        return BinaryCells(arr)
    values = arr.to_pylist()
    if kind in ("binary", "string"):  # other encodings (views, fixed size): bytes per row
        values = [v.encode("utf-8") if isinstance(v, str) else v for v in values]
    return ValueCells(values)
