"""A row group's columns served by row (:mod:`fpipe.storage.read.parquet_cells`): the bytes
sliced out of the Arrow buffers equal what pyarrow's ``to_pylist`` gives, for nulls, sliced
arrays, ``large_*`` and view types, ``{bytes, path}`` structs and empty columns."""

from __future__ import annotations

import pyarrow as pa
import pytest

from fpipe.storage.read.parquet_cells import BinaryCells, MediaCells, ValueCells, column_cells

TEXT = ["a cat", None, "", "ünïcode ✓", "x" * 300, None]
DATA = [b"\x00\x01", b"", None, b"\xff" * 1000, b"jpeg", None]


def _as_bytes(v):
    return v.encode("utf-8") if isinstance(v, str) else v


@pytest.mark.parametrize("kind,values", [("string", TEXT), ("binary", DATA)])
@pytest.mark.parametrize("large", [False, True])
@pytest.mark.parametrize("start", [0, 1, 3])
def test_binary_and_string_cells_equal_to_pylist(kind, values, large, start):
    typ = {"string": pa.large_string() if large else pa.string(),
           "binary": pa.large_binary() if large else pa.binary()}[kind]  # fmt: skip
    arr = pa.array(values, typ).slice(start)  # a slice: the buffers start before its rows
    cells = column_cells(pa.chunked_array([arr]), kind)
    assert isinstance(cells, BinaryCells)
    assert len(cells) == len(arr)
    assert [cells[r] for r in range(len(cells))] == [_as_bytes(v) for v in values[start:]]
    assert all(type(cells[r]) is bytes for r in range(len(cells)) if cells[r] is not None)


def test_several_chunks_and_view_types():
    chunks = pa.chunked_array([pa.array(TEXT[:2]), pa.array(TEXT[2:])])
    cells = column_cells(chunks, "string")
    assert [cells[r] for r in range(len(cells))] == [_as_bytes(v) for v in TEXT]
    view = column_cells(pa.chunked_array([pa.array(TEXT, pa.string_view())]), "string")
    assert isinstance(view, ValueCells)  # no offsets buffer: one value per row, as bytes
    assert [view[r] for r in range(len(view))] == [_as_bytes(v) for v in TEXT]


def test_media_structs_bytes_path_and_nulls():
    rows = [
        {"bytes": b"img0", "path": "a.jpg"},
        None,  # the struct itself null
        {"bytes": None, "path": "rel/b.png"},
        {"bytes": b"", "path": None},
        {"bytes": None, "path": None},
    ]
    typ = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    arr = pa.array(rows, typ)
    for start in (0, 1):
        cells = column_cells(pa.chunked_array([arr.slice(start)]), "media")
        assert isinstance(cells, MediaCells)
        want = [None if r is None else (r["bytes"], r["path"]) for r in rows[start:]]
        assert [cells[r] for r in range(len(cells))] == want
    only_bytes = pa.array([{"bytes": b"x"}, {"bytes": None}], pa.struct([("bytes", pa.binary())]))
    cells = column_cells(pa.chunked_array([only_bytes]), "media")
    assert [cells[0], cells[1]] == [(b"x", None), (None, None)]


def test_numbers_nested_and_empty_columns():
    nums = column_cells(pa.chunked_array([pa.array([3, None, 5], pa.int64())]), "number")
    assert [nums[0], nums[1], nums[2]] == [3, None, 5]
    nested = column_cells(pa.chunked_array([pa.array([[1, 2], None])]), "json")
    assert [nested[0], nested[1]] == [[1, 2], None]
    empty = column_cells(pa.chunked_array([], pa.string()), "string")
    assert len(empty) == 0
    empty_media = column_cells(
        pa.chunked_array([], pa.struct([("bytes", pa.binary()), ("path", pa.string())])), "media"
    )
    assert len(empty_media) == 0
