"""User columns of JSONL/CSV tables (``--column NAME=SPEC``, ``--extra-columns``).

The syntax is the one of tar shards and Parquet files
(:func:`fpipe.samples.field_spec.parse_column`); a source names a column of the table, and
its cells are taken as the table reads them (:meth:`~fpipe.storage.read.tables.TableReader.value`):

- ``NAME=COL``: a number column (every cell a number or empty);
- ``NAME=COL[key]...``: into a JSON object or list cell of a JSONL table, or into JSON text (a
  text cell, decoded row by row: how a CSV table holds nested values); a list by position
  (``COL[0]``, ``COL[-1]``);
- ``NAME=len(SPEC)``: the length of a JSON list or object, or of a text in characters;
- ``NAME=A,B``: the first alternative with a value in the row.

Each value is found as in a tar sample's JSON member (:func:`.scan.path_number`). What cannot
give a number (a text without ``len``, ``len`` or a key of a number column, a media column, a
column the table lacks, a name the table already has) is refused with a
:class:`~fpipe.core.errors.ConfigError` naming the table before a row is checked; a row whose
JSON text is not valid JSON is left out and reported, as a tar sample with a corrupt ``json``
member is. ``--extra-columns`` functions get the row as ``ds.read(i)`` gives it (every
non-empty column as UTF-8 text, media columns as the file's bytes, also under the file's
extension). A column is int64 when every kept row has an integer, else float64 with NaN where
a row has no value, as for tar shards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import numpy as np

from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.samples.field_spec import ColumnSpec, FieldSpec
from fpipe.storage.prepare.scan import _number, path_number
from fpipe.storage.read.record import TableLayout
from fpipe.storage.read.tables import TableReader

__all__ = ["check_table_columns", "row_columns", "user_column"]

_SUPPORTED = (
    "tables support NAME=COLUMN (a number column), NAME=COLUMN[key] (into a JSON cell or JSON "
    "text) and NAME=len(COLUMN) (a JSON list or object, or text, in characters)"
)


def _kind(layout: TableLayout, col: str) -> str:
    if col in layout.media_columns:
        return "media"
    if col in layout.json_columns:
        return "JSON"
    return "text" if col in layout.strings else "number"


def _check_source(spec: ColumnSpec, alt: FieldSpec, layout: TableLayout, where: str) -> None:
    what = f"{where}: column {spec.name!r} ({alt})"
    if alt.ext not in layout.columns:
        raise ConfigError(
            f"{what}: the table has no column {alt.ext!r} (it has {list(layout.columns)}). "
            + _SUPPORTED
        )
    kind = _kind(layout, alt.ext)
    if kind == "media":
        raise ConfigError(
            f"{what}: {alt.ext!r} names a media file; its size is the column "
            f"'{alt.ext}.bytes' (images: '{alt.ext}.width', '{alt.ext}.height'). {_SUPPORTED}"
        )
    if kind == "number" and alt.path:
        raise ConfigError(f"{what}: a number has no [{alt.path[0]}]. {_SUPPORTED}")
    if kind == "number" and spec.length:
        raise ConfigError(f"{what}: len() of a number; len() takes a JSON list or object, or text")
    if kind != "number" and not alt.path and not spec.length:
        shown = "JSON object/list" if kind == "JSON" else "text"
        raise ConfigError(
            f"{what}: {shown} values are not numbers; len({alt}) gives its length. {_SUPPORTED}"
        )


def check_table_columns(specs: Sequence[ColumnSpec], layout: TableLayout, where: str) -> None:
    """Refuse (:class:`~fpipe.core.errors.ConfigError`, naming the table ``where``) the specs
    that cannot give a number for the table of ``layout``."""
    for spec in specs:
        if spec.name in layout.columns:
            raise ConfigError(
                f"{where}: column {spec.name!r}: {spec.name!r} is a column of the table; "
                "give the computed column another name"
            )
        for alt in spec.alternatives:
            _check_source(spec, alt, layout, where)


def _cell(
    reader: TableReader, layout: TableLayout, i: int, alt: FieldSpec, name: str, decoded: dict
) -> Any:
    """The cell of ``alt``'s column in row ``i``, its JSON text decoded (once a row, kept in
    ``decoded``) where a path or a JSON column needs it; raises :class:`BadSampleError` for
    JSON text that is not JSON."""
    col = alt.ext
    if not (alt.path or col in layout.json_columns):
        return reader.value(col, i)  # a number, or a text whose length is wanted
    if col not in decoded:
        cell = reader.value(col, i)
        try:
            decoded[col] = None if cell is None else msgspec.json.decode(cell)
        except msgspec.DecodeError as e:
            reason = f"column {name!r}: {col!r} is not valid JSON: {e}"
            raise BadSampleError(reader.table_path, reader.key(i), reason) from None
    return decoded[col]


def row_columns(
    reader: TableReader,
    layout: TableLayout,
    i: int,
    specs: Sequence[ColumnSpec],
    extra: Callable[[dict[str, bytes]], Any] | None,
) -> dict[str, int | float | None]:
    """The user's columns of row ``i`` of the table of ``layout`` (None: no value); raises
    :class:`BadSampleError` when the row must be left out (JSON text that is not JSON, the
    extra function failed)."""
    out: dict[str, int | float | None] = {}
    decoded: dict[str, Any] = {}
    for spec in specs:
        v = None
        for alt in spec.alternatives:
            cell = _cell(reader, layout, i, alt, spec.name, decoded)
            v = None if cell is None else path_number(cell, alt.path, spec.length)
            if v is not None:
                break  # the first alternative with a value
        out[spec.name] = v
    if extra is not None:
        row = reader.read(i)  # a media file that cannot be read: the row is left out
        try:
            computed = dict(extra(row))
        except Exception as e:  # noqa: BLE001 - user code: report, leave the row out
            reason = f"extra column function failed: {type(e).__name__}: {e}"
            raise BadSampleError(reader.table_path, reader.key(i), reason) from None
        for name, value in computed.items():
            if str(name) in layout.columns:
                raise ConfigError(
                    f"{reader.table_path}: the extra column function returned {name!r}, a "
                    "column of the table; give the computed column another name"
                )
            out[str(name)] = _number(value)
    return out


def user_column(values: Sequence[int | float | None]) -> np.ndarray:
    """int64 when every value is an integer, else float64 with NaN where there is none."""
    if all(isinstance(v, int) for v in values):
        return np.asarray(values, np.int64)
    return np.asarray([np.nan if v is None else v for v in values], np.float64)
