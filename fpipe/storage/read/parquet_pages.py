"""Where each cell of a Parquet byte-array column chunk lies in the file, read from its page
headers, so a row's bytes can be sliced out of the memory-mapped file.

Why: a Hugging Face ``Image`` column is typically stored uncompressed (JPEG and PNG bytes do not
compress), in ``PLAIN`` encoding: each value is its 4-byte length and its bytes. Decoding such
a row group with pyarrow reads the column chunk (megabytes) and copies every value into an Arrow
array, although a worker of a 2-process loader uses only about half of each row group's rows
(the other half go to the other worker): about 4% of a worker's time with 224 px images. Located
here instead, from a few page headers, a row costs one slice of the mapped file, and only the
rows read are ever touched.

:func:`plain_spans` handles the chunks it can (``UNCOMPRESSED``; ``PLAIN`` or dictionary-encoded
data pages v1 and v2; definition levels, no repetition) and returns None for any other, which
pyarrow then decodes as before; so does a chunk whose headers and values do not add up (a
damaged file), where pyarrow's own error then names what is wrong.
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["Spans", "plain_spans"]

#: ``(levels, starts, ends)``: each row's definition level (None: all at the maximum) and where
#: its bytes lie in the file (``starts[r] == ends[r] == 0`` for a row below the maximum level)
Spans = tuple[list[int] | None, list[int], list[int]]

_U32 = struct.Struct("<I").unpack_from
_DATA_PAGE, _INDEX_PAGE, _DICTIONARY_PAGE, _DATA_PAGE_V2 = 0, 1, 2, 3
_PLAIN, _PLAIN_DICTIONARY, _RLE, _RLE_DICTIONARY = 0, 2, 3, 8


class _Bad(Exception):
    """The bytes are not what a page header or value should be: leave the chunk to pyarrow."""


def plain_spans(buf: Any, column: Any, max_def: int, max_rep: int, num_rows: int) -> Spans | None:
    """The cells of one column chunk of a row group of ``num_rows`` rows, located in ``buf``
    (the whole file, e.g. an ``mmap``), or None where the chunk is not one this reads.
    ``column``: its ``pyarrow.parquet.ColumnChunkMetaData``; ``max_def`` / ``max_rep``: its
    leaf's maximum definition and repetition levels."""
    if (
        max_rep
        or column.physical_type != "BYTE_ARRAY"
        or column.compression != "UNCOMPRESSED"
        or column.file_path  # a chunk in another file
        or column.num_values != num_rows
    ):
        return None
    pos = column.dictionary_page_offset if column.has_dictionary_page else None
    pos = column.data_page_offset if pos is None else min(pos, column.data_page_offset)
    end = pos + column.total_compressed_size
    if pos < 0 or end > len(buf):
        return None
    page = _Page(buf, max_def)
    try:
        while len(page.starts) < num_rows:
            if pos >= end:
                raise _Bad
            header, pos = _struct(buf, pos)
            size = header.get(3, -1)
            if size < 0 or pos + size > end or header.get(2) != size:
                raise _Bad
            kind = header.get(1)
            if kind == _DATA_PAGE:
                page.v1(pos, pos + size, header.get(5) or {})
            elif kind == _DATA_PAGE_V2:
                page.v2(pos, pos + size, header.get(8) or {})
            elif kind == _DICTIONARY_PAGE:
                page.dictionary(pos, pos + size, header.get(7) or {})
            elif kind != _INDEX_PAGE:
                raise _Bad
            pos += size
    except (_Bad, IndexError, ValueError, struct.error):
        return None
    if len(page.starts) != num_rows:
        return None
    levels = page.levels
    return (levels if any(v != max_def for v in levels) else None), page.starts, page.ends


class _Page:
    """The cells of a chunk's pages as they are read: each row's level and byte span."""

    def __init__(self, buf: Any, max_def: int):
        self.buf, self.max_def = buf, max_def
        self.levels: list[int] = []
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.dict_starts: list[int] | None = None  #: the dictionary page's values
        self.dict_ends: list[int] = []

    def dictionary(self, pos: int, end: int, head: dict) -> None:
        n = head.get(1, -1)
        if n < 0 or head.get(2) not in (_PLAIN, _PLAIN_DICTIONARY) or self.dict_starts:
            raise _Bad
        self.dict_starts, self.dict_ends = [], []
        pos = _plain(self.buf, pos, n, self.dict_starts, self.dict_ends)
        if pos != end:
            raise _Bad

    def v1(self, pos: int, end: int, head: dict) -> None:
        n = head.get(1, -1)
        if n < 0:
            raise _Bad
        if self.max_def:
            if head.get(3) != _RLE:  # the deprecated BIT_PACKED levels: not read here
                raise _Bad
            size = int.from_bytes(self.buf[pos : pos + 4], "little")
            levels = _rle(self.buf, pos + 4, pos + 4 + size, self.max_def.bit_length(), n)
            pos += 4 + size
        else:
            levels = [0] * n
        self._values(pos, end, head.get(2), levels)

    def v2(self, pos: int, end: int, head: dict) -> None:
        n = head.get(1, -1)
        def_size, rep_size = head.get(5, -1), head.get(6, 0)
        if n < 0 or def_size < 0 or rep_size:
            raise _Bad
        width = self.max_def.bit_length()
        levels = _rle(self.buf, pos, pos + def_size, width, n) if self.max_def else [0] * n
        self._values(pos + def_size, end, head.get(4), levels)

    def _values(self, pos: int, end: int, encoding: int | None, levels: list[int]) -> None:
        """A data page's values after its levels: ``PLAIN`` (each a 4-byte length and the
        bytes) or indices into the dictionary page; they must fill the page exactly."""
        if levels and max(levels) > self.max_def:
            raise _Bad
        present = levels.count(self.max_def)
        starts: list[int] = []
        ends: list[int] = []
        if encoding == _PLAIN:
            pos = _plain(self.buf, pos, present, starts, ends)
        elif encoding in (_PLAIN_DICTIONARY, _RLE_DICTIONARY) and self.dict_starts is not None:
            width = self.buf[pos] if present else 0
            if width > 32:
                raise _Bad
            index = _rle(self.buf, pos + 1, end, width, present) if present else []
            pos = end
            starts = [self.dict_starts[k] for k in index]
            ends = [self.dict_ends[k] for k in index]
        else:
            raise _Bad
        if pos != end:
            raise _Bad
        self.levels += levels
        if present == len(levels):  # no null: the values are the rows
            self.starts += starts
            self.ends += ends
            return
        values = iter(zip(starts, ends))
        for lv in levels:
            a, b = next(values) if lv == self.max_def else (0, 0)
            self.starts.append(a)
            self.ends.append(b)


def _plain(buf, pos: int, n: int, starts: list[int], ends: list[int]) -> int:
    """``n`` ``PLAIN`` byte-array values from ``pos`` (each a 4-byte length, then its bytes)
    into ``starts`` / ``ends``; returns the position after them."""
    for _ in range(n):
        pos += 4
        starts.append(pos)
        pos += _U32(buf, pos - 4)[0]
        ends.append(pos)
    return pos


def _rle(buf, pos: int, end: int, width: int, n: int) -> list[int]:
    """``n`` values of ``width`` bits in Parquet's RLE / bit-packed hybrid encoding in
    ``buf[pos:end]`` (levels, dictionary indices)."""
    nbytes = (width + 7) // 8
    mask = (1 << width) - 1
    out: list[int] = []
    while len(out) < n:
        if pos >= end:
            raise _Bad
        header, pos = _varint(buf, pos)
        # a run or group count is the file's word: bounded by what is left to read, so a
        # damaged header cannot make this build a list of 2**63 values
        if (header >> 1) > n - len(out) + 8:
            raise _Bad
        if header & 1:  # bit-packed: (header >> 1) groups of 8 values, LSB first
            size = (header >> 1) * width
            bits = int.from_bytes(buf[pos : pos + size], "little")
            out.extend((bits >> (k * width)) & mask for k in range((header >> 1) * 8))
            pos += size
        else:  # a run of one value
            out.extend([int.from_bytes(buf[pos : pos + nbytes], "little")] * (header >> 1))
            pos += nbytes
    if pos > end:
        raise _Bad
    return out[:n]


# Thrift compact protocol: just what a page header holds (structs of integers, a few binaries
# and lists in its statistics); fields by id, nested structs as dicts, other values skipped.


def _varint(buf, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise _Bad


def _zigzag(buf, pos: int) -> tuple[int, int]:
    v, pos = _varint(buf, pos)
    return (v >> 1) ^ -(v & 1), pos


def _struct(buf, pos: int, depth: int = 0) -> tuple[dict, int]:
    if depth > 8:
        raise _Bad
    out: dict[int, Any] = {}
    fid = 0
    while True:
        b = buf[pos]
        pos += 1
        kind = b & 0x0F
        if kind == 0:  # stop
            return out, pos
        if b >> 4:
            fid += b >> 4
        else:
            fid, pos = _zigzag(buf, pos)
        out[fid], pos = _value(buf, pos, kind, depth)


def _value(buf, pos: int, kind: int, depth: int) -> tuple[Any, int]:
    if kind in (1, 2):  # booleans in a field: the type is the value
        return kind == 1, pos
    if kind == 3:
        return buf[pos], pos + 1
    if kind in (4, 5, 6):
        return _zigzag(buf, pos)
    if kind == 7:
        return None, pos + 8
    if kind == 8:
        size, pos = _varint(buf, pos)
        return None, pos + size
    if kind in (9, 10):  # list, set
        b = buf[pos]
        pos += 1
        size, elem = b >> 4, b & 0x0F
        if size == 15:
            size, pos = _varint(buf, pos)
        if size > len(buf) - pos:  # each element takes a byte at least: a damaged count
            raise _Bad
        for _ in range(size):
            pos = _element(buf, pos, elem, depth)
        return None, pos
    if kind == 11:  # map
        size, pos = _varint(buf, pos)
        if 2 * size > len(buf) - pos:  # a key and a value take a byte each at least
            raise _Bad
        if size:
            kv = buf[pos]
            pos += 1
            for _ in range(size):
                pos = _element(buf, pos, kv >> 4, depth)
                pos = _element(buf, pos, kv & 0x0F, depth)
        return None, pos
    if kind == 12:
        return _struct(buf, pos, depth + 1)
    raise _Bad


def _element(buf, pos: int, kind: int, depth: int) -> int:
    """Past one element of a list or map (where a boolean takes a byte of its own)."""
    return pos + 1 if kind in (1, 2) else _value(buf, pos, kind, depth + 1)[1]
