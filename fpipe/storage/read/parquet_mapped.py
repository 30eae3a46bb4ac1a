"""A local Parquet file memory-mapped, whose byte-array columns are served by row straight from
the mapping (:mod:`fpipe.storage.read.parquet_pages` locates the cells), for
:class:`~fpipe.storage.read.parquet.ParquetReader`.

A row group's cells are located from its page headers, and a row's bytes are copied out of the
mapped file only when that row is read: no row group is decoded, and a worker reads nothing of
the rows that go to other workers. Columns this cannot serve (compressed ones, numbers, nested
values) are left to pyarrow; the file's metadata (row groups, column chunks) comes from the
``ParquetFile`` pyarrow opened, whose footer is read once per process.
"""

from __future__ import annotations

import mmap
from typing import Any

from fpipe.storage.read.parquet_cells import MediaCells, SpanCells
from fpipe.storage.read.parquet_pages import plain_spans

__all__ = ["MappedParquet"]


class MappedParquet:
    """File ``path`` mapped read-only; :meth:`cells` serves what it can of a row group."""

    def __init__(self, path: str):
        with open(path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._leaves: dict[str, tuple[int, int, int]] | None = None  #: path -> (j, def, rep)

    def cells(self, pf: Any, rg: int, columns: list[str], kinds: dict[str, str]) -> dict:
        """``{column: cells}`` of row group ``rg`` for those of ``columns`` stored as plain
        byte arrays (``kinds``: the reader's column kinds; media structs by their ``bytes``
        and ``path`` fields). ``pf``: the file's ``pyarrow.parquet.ParquetFile``."""
        import pyarrow as pa

        if self._leaves is None:
            schema = pf.schema
            self._leaves = {
                schema.column(j).path: (
                    j,
                    schema.column(j).max_definition_level,
                    schema.column(j).max_repetition_level,
                )
                for j in range(len(schema))
            }
        meta = pf.metadata.row_group(rg)
        n = meta.num_rows
        out: dict[str, Any] = {}
        schema = pf.schema_arrow
        for c in columns:
            kind = kinds.get(c)
            if schema.get_field_index(c) < 0:  # none, or several: left to pyarrow
                continue
            field = schema.field(c)
            if kind in ("binary", "string") and _is_bytes(pa, field.type):
                got = self._leaf(meta, c, n, int(field.nullable))
                if got is not None:
                    out[c] = SpanCells(self._map, got[1], got[2], _below(got[0], got[3]))
            elif kind == "media" and pa.types.is_struct(field.type):
                cells = self._media(pa, meta, c, field, n)
                if cells is not None:
                    out[c] = cells
        return out

    def _media(self, pa, meta, col: str, field, n: int) -> MediaCells | None:
        """A ``{bytes, path}`` struct from its two leaves (where the struct has them)."""
        parts: dict[str, SpanCells] = {}
        struct_null: list[bool] | None = None
        outer = int(field.nullable)
        for name in ("bytes", "path"):
            k = field.type.get_field_index(name)
            if k < 0:
                continue
            sub = field.type.field(k)
            if not _is_bytes(pa, sub.type):
                return None
            got = self._leaf(meta, f"{col}.{name}", n, outer + int(sub.nullable))
            if got is None:
                return None
            levels, starts, ends, max_def = got
            parts[name] = SpanCells(self._map, starts, ends, _below(levels, max_def))
            if outer and levels is not None:  # level 0: the struct itself is null
                struct_null = [lv == 0 for lv in levels]
        if not parts:
            return None
        return MediaCells(parts.get("bytes"), parts.get("path"), n, struct_null)

    def _leaf(self, meta, path: str, n: int, optional: int) -> tuple | None:
        """``(levels, starts, ends, max level)`` of leaf column ``path`` in a row group of
        ``n`` rows, or None where it is not a plain byte array at the top level of nesting
        (``optional``: how many of its levels may be null, which must be all it has)."""
        assert self._leaves is not None
        leaf = self._leaves.get(path)
        if leaf is None:
            return None
        j, max_def, max_rep = leaf
        if max_def != optional:  # an optional level we do not know the meaning of
            return None
        spans = plain_spans(self._map, meta.column(j), max_def, max_rep, n)
        return None if spans is None else (*spans, max_def)


def _is_bytes(pa, t) -> bool:
    return (
        pa.types.is_binary(t)
        or pa.types.is_string(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_large_string(t)
    )


def _below(levels: list[int] | None, max_def: int) -> list[bool] | None:
    """Which rows are null (below the leaf's maximum level); None: none is."""
    return None if levels is None else [lv < max_def for lv in levels]
