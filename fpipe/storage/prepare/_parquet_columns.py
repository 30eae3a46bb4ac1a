"""User columns of Parquet and Arrow files (``--column NAME=SPEC``), computed with pyarrow.

The syntax is the one of tar shards (:func:`fpipe.samples.field_spec.parse_column`); a source
names a column of the file where a tar sample has a member:

- ``NAME=COL``: an integer, float or boolean column, as it is;
- ``NAME=COL[key]...``: into a struct column by field name, into a list column by position
  (``COL[0]``, ``COL[-1]``), or into JSON text (a string or binary column holding JSON,
  decoded row by row as a tar sample's ``json`` member is);
- ``NAME=len(SPEC)``: the length of a list, of a text in characters, of a binary value in
  bytes;
- ``NAME=A,B``: the first alternative with a value in the row.

Everything but JSON text is computed on a whole row group at once (pyarrow compute, numpy).
What cannot give a number (a text without ``len``, ``len`` of a number, a key into a number,
a column the files lack) is refused with a :class:`~fpipe.core.errors.ConfigError` naming
the column before a row is read; a row whose JSON text is not valid JSON is left out and
reported, as a tar sample with a corrupt ``json`` member is. The column is int64 when every
row has an integer, else float64 with NaN where a row has no value, as for tar shards.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.samples.field_spec import ColumnSpec, FieldSpec
from fpipe.storage.prepare.scan import path_number

__all__ = ["UserColumn", "compile_columns", "user_column_values"]

_SUPPORTED = (
    "Parquet files support NAME=COLUMN (a number column), NAME=COLUMN[key] (into a struct, a "
    "list by position, or JSON text) and NAME=len(COLUMN) (a list, text or binary column)"
)


class _Source(msgspec.Struct, frozen=True):
    """One alternative, checked against the schema."""

    column: str  #: the file's column
    steps: tuple[tuple[str, int], ...]  #: ("field", index) into a struct, ("item", i) into a list
    json_path: tuple[str, ...] | None  #: the rest of the path into JSON text; None: typed
    length: bool  #: ``len(...)``
    integer: bool  #: the values are whole numbers (typed sources only)


class UserColumn(msgspec.Struct, frozen=True):
    """A ``--column`` of a Parquet dataset: its name and its sources, first with a value wins."""

    name: str
    sources: tuple[_Source, ...]


def _is_list(t) -> bool:
    import pyarrow as pa

    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _is_bytes(t) -> bool:
    import pyarrow as pa

    return (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    )


def _is_number(t) -> bool:
    import pyarrow as pa

    return (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_boolean(t)
        or pa.types.is_null(t)
    )


def _compile_source(spec: ColumnSpec, alt: FieldSpec, schema, where: str) -> _Source:
    import pyarrow as pa

    what = f"{where}: column {spec.name!r} ({alt})"
    t = schema.field(alt.ext).type
    steps: list[tuple[str, int]] = []
    path = list(alt.path)
    while path and not _is_bytes(t):
        key = path.pop(0)
        if pa.types.is_struct(t):
            k = t.get_field_index(key)
            if k < 0:
                fields = [t.field(i).name for i in range(t.num_fields)]
                raise ConfigError(f"{what}: the struct has no field {key!r} (it has {fields})")
            steps.append(("field", k))
            t = t.field(k).type
        elif _is_list(t):
            try:
                steps.append(("item", int(key)))
            except ValueError:
                raise ConfigError(f"{what}: a list is indexed by position, not {key!r}") from None
            t = t.value_type
        else:
            raise ConfigError(f"{what}: a {t} value has no [{key}]; {_SUPPORTED}")
    if path:  # JSON text: the rest of the path is followed row by row
        return _Source(alt.ext, tuple(steps), tuple(path), spec.length, False)
    if spec.length and not (_is_list(t) or _is_bytes(t)):
        raise ConfigError(f"{what}: len() of a {t} value; len() takes a list, text or binary")
    if not spec.length and not _is_number(t):
        hint = f"; len({alt}) gives its length" if _is_list(t) or _is_bytes(t) else ""
        raise ConfigError(f"{what}: a {t} value is not a number{hint}. {_SUPPORTED}")
    integer = spec.length or pa.types.is_integer(t) or pa.types.is_boolean(t)
    return _Source(alt.ext, tuple(steps), None, spec.length, integer)


def compile_columns(specs: Sequence[ColumnSpec], schema, where: str) -> tuple[UserColumn, ...]:
    """``specs`` checked against a file's ``schema`` (``where`` names the file); raises a
    :class:`~fpipe.core.errors.ConfigError` for what cannot give a number."""
    out = []
    for spec in specs:
        for alt in spec.alternatives:
            if alt.ext not in schema.names:
                raise ConfigError(
                    f"{where}: column {spec.name!r} ({alt}): the file has no column "
                    f"{alt.ext!r} (it has {list(schema.names)}). {_SUPPORTED}"
                )
        sources = tuple(_compile_source(spec, a, schema, where) for a in spec.alternatives)
        out.append(UserColumn(spec.name, sources))
    return tuple(out)


def _valid(arr) -> np.ndarray:
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), bool)


def _item(arr, i: int, ok: np.ndarray):
    """Element ``i`` (from the end when negative) of each list of ``arr``: (values, ok)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(arr)
    parents = np.asarray(pc.list_parent_indices(arr).to_numpy(zero_copy_only=False), np.int64)
    lengths = np.bincount(parents, minlength=n)
    pos = i if i >= 0 else lengths + i
    has = ok & (pos >= 0) & (pos < lengths)
    at = np.where(has, np.cumsum(lengths) - lengths + pos, 0)
    child = pc.list_flatten(arr).take(pa.array(at, type=pa.int64(), mask=~has))
    return child, has & _valid(child)


def _json_values(src: _Source, arr, need: np.ndarray, name: str):
    """(values, have, integer, bad rows) of a path into JSON text, row by row."""
    cells = arr.to_pylist()
    values: list[Any] = [None] * len(cells)
    bad: dict[int, str] = {}
    for j in np.flatnonzero(need):
        try:
            doc = msgspec.json.decode(cells[j])
        except msgspec.DecodeError as e:
            bad[int(j)] = f"column {name!r}: {src.column!r} is not valid JSON: {e}"
            continue
        values[j] = path_number(doc, src.json_path or (), src.length)  # None: next alternative
    have = np.array([v is not None for v in values], bool)
    whole = all(isinstance(v, int) for v in values if v is not None)
    out = np.array([0 if v is None else v for v in values], np.int64 if whole else np.float64)
    return out, have, whole, bad


def _typed_values(src: _Source, arr) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.compute as pc

    t = arr.type
    if src.length:
        if _is_list(t):
            arr = pc.list_value_length(arr)
        else:
            utf8 = pa.types.is_string(t) or pa.types.is_large_string(t)
            arr = pc.utf8_length(arr) if utf8 else pc.binary_length(arr)
    if pa.types.is_null(arr.type):
        return np.zeros(len(arr), np.int64)
    if src.integer:
        return np.asarray(arr.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False))
    return np.asarray(arr.cast(pa.float64()).to_numpy(zero_copy_only=False), np.float64)


def user_column_values(
    table, columns: Sequence[UserColumn]
) -> tuple[dict[str, np.ndarray], dict[int, str]]:
    """(column name -> values of every row, row -> why it is left out) of one row group."""
    import pyarrow.compute as pc

    n = table.num_rows
    out: dict[str, np.ndarray] = {}
    bad: dict[int, str] = {}
    for col in columns:
        have = np.zeros(n, bool)
        parts: list[tuple[np.ndarray, np.ndarray]] = []
        whole = True
        for src in col.sources:
            arr = table.column(src.column).combine_chunks()
            ok = _valid(arr)
            for kind, k in src.steps:
                if kind == "field":
                    arr = pc.struct_field(arr, [k])
                    ok &= _valid(arr)
                else:
                    arr, ok = _item(arr, k, ok)
            if src.json_path is not None:
                values, ok, integer, wrong = _json_values(src, arr, ok & ~have, col.name)
                for j, why in wrong.items():
                    bad.setdefault(j, why)
            else:
                values, integer = _typed_values(src, arr), src.integer
            take = ok & ~have
            if take.any():
                parts.append((take, values))
                whole &= integer
            have |= take
        whole &= bool(have.all())
        values = np.zeros(n, np.int64) if whole else np.full(n, np.nan)
        for take, v in parts:
            values[take] = v[take]
        out[col.name] = values
    return out, bad
