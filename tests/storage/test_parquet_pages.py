"""Byte-array cells sliced out of the memory-mapped Parquet file
(:mod:`fpipe.storage.read.parquet_pages`, :mod:`fpipe.storage.read.parquet_mapped`): the same
cells as pyarrow decodes, for data pages v1 and v2, dictionary pages, several pages, nulls at
either level of a ``{bytes, path}`` struct and required columns; compressed or damaged chunks
are left to pyarrow, whose error then names the file and the row."""

from __future__ import annotations

import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fpipe.core.errors import BadSampleError
from fpipe.storage import open_dataset, prepare_dataset
from fpipe.storage.read import parquet_pages
from fpipe.storage.read.parquet_cells import SpanCells, column_cells
from fpipe.storage.read.parquet_mapped import MappedParquet
from tests.storage.parquet_helpers import image_bytes

KINDS = {"image": "media", "text": "string", "blob": "binary"}
MEDIA = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def _rows(n: int) -> pa.Table:
    images = [
        None if i % 7 == 3 else {"bytes": None if i % 5 == 1 else bytes([i]) * (i * 37 % 300),
                                 "path": None if i % 3 else f"img/{i}.jpg"}
        for i in range(n)
    ]  # fmt: skip
    return pa.table(
        {
            "image": pa.array(images, MEDIA),
            "text": pa.array([None if i % 4 == 2 else f"caption {i % 6}" for i in range(n)]),
            "blob": pa.array([b"\x00" * (i % 9) for i in range(n)], pa.large_binary()),
        }
    )


def _same_cells(path, table_kinds=KINDS) -> int:
    """Checks every row group's mapped cells against pyarrow's; returns how many it served."""
    pf = pq.ParquetFile(path)
    mapped = MappedParquet(str(path))
    table_kinds = {c: k for c, k in table_kinds.items() if c in pf.schema_arrow.names}
    served = 0
    for rg in range(pf.metadata.num_row_groups):
        table = pf.read_row_group(rg)
        got = mapped.cells(pf, rg, list(table_kinds), table_kinds)
        for col, cells in got.items():
            want = column_cells(table.column(col), table_kinds[col])
            assert len(cells) == len(want) == table.num_rows
            assert [cells[r] for r in range(len(cells))] == [want[r] for r in range(len(want))]
            served += 1
    return served


@pytest.mark.parametrize("version", ["1.0", "2.0"])
@pytest.mark.parametrize("dictionary", [None, 1 << 20, 200])  # 200: full, then plain pages
def test_mapped_cells_equal_pyarrows(tmp_path, version, dictionary):
    path = tmp_path / "t.parquet"
    pq.write_table(
        _rows(40), path, row_group_size=16, compression="none", data_page_version=version,
        use_dictionary=dictionary is not None, dictionary_pagesize_limit=dictionary or 1 << 20,
        data_page_size=256,  # several pages per chunk
    )  # fmt: skip
    assert _same_cells(path) == 3 * 3  # every column of the 3 row groups


def test_required_columns_and_a_struct_without_path(tmp_path):
    typ = pa.struct([pa.field("bytes", pa.binary(), nullable=False)])
    schema = pa.schema(
        [pa.field("image", typ, nullable=False), pa.field("text", pa.string(), False)]
    )
    table = pa.table({"image": [{"bytes": b"ab"}, {"bytes": b""}], "text": ["x", "y"]}, schema)
    path = tmp_path / "r.parquet"
    pq.write_table(table, path, compression="none")
    assert _same_cells(path) == 2


def test_compressed_chunks_are_left_to_pyarrow(tmp_path):
    path = tmp_path / "z.parquet"
    pq.write_table(_rows(10), path, compression={"image": "none", "text": "snappy", "blob": "zstd"})
    pf = pq.ParquetFile(path)
    assert set(MappedParquet(str(path)).cells(pf, 0, list(KINDS), KINDS)) == {"image"}
    assert _same_cells(path) == 1


def test_the_reader_serves_images_from_the_mapped_file(tmp_path):
    root = tmp_path / "ds"
    root.mkdir()
    images = [{"bytes": image_bytes(i), "path": None} for i in range(12)]
    table = pa.table({"image": pa.array(images, MEDIA), "text": [f"t{i}" for i in range(12)]})
    pq.write_table(table, root / "a.parquet", row_group_size=5, compression="none")
    prepare_dataset(root)
    ds = open_dataset(root)
    got = ds.read_many(list(range(12)))
    assert got == [(f"a/{i}", {"image": image_bytes(i), "text": b"t%d" % i}) for i in range(12)]
    assert all(type(m["image"]) is bytes for _, m in got)
    group = next(iter(ds.reader._groups.values()))
    assert isinstance(group["text"], SpanCells)  # sliced from the file, not decoded by pyarrow
    assert isinstance(group["image"]._bytes, SpanCells)


def test_a_damaged_value_is_a_typed_error_naming_file_and_row(tmp_path):
    root = tmp_path / "bad"
    root.mkdir()
    table = pa.table({"image": pa.array([{"bytes": bytes([i]) * 20, "path": None}
                                         for i in range(6)], MEDIA)})  # fmt: skip
    pq.write_table(table, root / "a.parquet", row_group_size=3, compression="none")
    prepare_dataset(root)
    data = bytearray((root / "a.parquet").read_bytes())
    at = data.find(bytes([4]) * 20)  # row 4's bytes; its length is the 4 bytes before
    struct.pack_into("<I", data, at - 4, 10**6)
    (root / "a.parquet").write_bytes(bytes(data))
    ds = open_dataset(root, shard_check="off")
    assert ds.read(1)["image"] == bytes([1]) * 20  # the other row group is intact
    got = ds.read_many([3, 5, 0], frozenset({"image"}))
    for (_, err), row in zip(got[:2], (3, 5)):
        assert isinstance(err, BadSampleError) and err.key == f"a/{row}"
        assert err.path.endswith("a.parquet") and "unreadable Parquet" in err.reason
    assert got[2] == ("a/0", {"image": bytes([0]) * 20})


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            return bytes(out)


@pytest.mark.parametrize("bit_packed", [False, True])
def test_a_level_run_longer_than_the_page_is_refused(bit_packed):
    # the run's count is the file's word: 2**20 values where 4 are read is a damaged header
    # (a count of 2**62 would otherwise build a list of that many values)
    buf = _varint((2**20 << 1) | int(bit_packed)) + b"\x01" * 8
    with pytest.raises(parquet_pages._Bad):
        parquet_pages._rle(buf, 0, len(buf), 1, 4)


def test_a_thrift_list_longer_than_the_bytes_is_refused():
    # a list of 2**20 booleans (a byte each) in a dozen bytes: refused, not walked past the end
    buf = bytes([0xF1]) + _varint(2**20) + b"\x01" * 8
    with pytest.raises(parquet_pages._Bad):
        parquet_pages._value(buf, 0, 9, 0)
