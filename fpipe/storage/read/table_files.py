"""JSONL and CSV table files, parsed: their rows, their media columns and the arrays a table is
read from.

:func:`read_table` reads a file (local, or one GET of an object) into column names and rows:
CSV numbers parsed, JSON object and list cells kept. :func:`guess_media` finds the columns that
name media files (a media column name such as ``image`` or ``path``, or every value a media file
name), and :func:`table_arrays` stores the rows as ``fpipe prepare TABLE`` writes them to
``<table folder>/.fpipe``: numeric columns as arrays, the others as a strings blob plus offsets.
:func:`table_record` is a table opened as is: its index record and in-memory arrays, every row
kept. :class:`~fpipe.storage.read.tables.TableReader` reads the rows back.
"""

from __future__ import annotations

import csv
import io
import math
import os
import posixpath
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import msgspec
import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.decode.extensions import MEDIA_EXTENSIONS, last_part
from fpipe.storage.paths import is_url
from fpipe.storage.read.record import IndexRecord, TableLayout
from fpipe.storage.read.tar.index import encode_keys

__all__ = [
    "MEDIA_NAMES",
    "TABLE_SUFFIXES",
    "guess_media",
    "is_table",
    "read_table",
    "suffix",
    "table_arrays",
    "table_record",
]

TABLE_SUFFIXES = (".jsonl", ".csv")
#: column names that name media files whatever their values look like.
MEDIA_NAMES = frozenset(
    f"{kind}{suffix}"
    for kind in ("file", "image", "video", "audio", "media")
    for suffix in ("", "_path")
) | {"path", "filename"}
_MEDIA_EXTS = frozenset(MEDIA_EXTENSIONS)


def is_table(path: str | Path) -> bool:
    """True for ``.jsonl`` and ``.csv`` files."""
    return str(path).endswith(TABLE_SUFFIXES)


def _cell(v: Any) -> Any:
    if isinstance(v, (dict, list)):
        return msgspec.json.encode(v).decode()
    return v


def _parse_csv(v: str | None) -> Any:
    if v is None or v == "":
        return None
    for kind in (int, float):
        try:
            return kind(v)
        except ValueError:
            pass
    return v


def _json_columns(names: Sequence[str], rows: Sequence[dict[str, Any]]) -> list[str]:
    """Columns of a JSONL table whose non-empty cells are all JSON objects or lists."""
    out = []
    for n in names:
        vals = [r.get(n) for r in rows if r.get(n) is not None]
        if vals and all(isinstance(v, (dict, list)) for v in vals):
            out.append(n)
    return out


def _open_table(path: str, mode: str) -> IO[Any]:
    """The table file, opened: a local file, or an object read whole (one GET; a table is
    held in memory whole either way)."""
    if not is_url(path):
        return open(path, mode, **({} if "b" in mode else {"newline": "", "encoding": "utf-8"}))
    from fpipe.storage.read.remote import read_object

    try:
        data = read_object(path)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such table (no such object)") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the table: {e}") from None
    if "b" in mode:
        return io.BytesIO(data)
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline="")


def read_table(path: str | Path) -> tuple[list[str], list[dict[str, Any]]]:
    """(column names, rows) of a JSONL or CSV file (local, or the URL of one on object
    storage); CSV numbers are parsed, JSON object and list cells kept as they are
    (:func:`table_arrays` stores them as JSON text)."""
    path = str(path)
    rows: list[dict[str, Any]] = []
    names: dict[str, None] = {}
    kind = posixpath.splitext(path)[1]
    if kind == ".jsonl":
        dec = msgspec.json.Decoder()
        with _open_table(path, "rb") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = dec.decode(line)
                except msgspec.DecodeError as e:
                    raise ConfigError(f"{path}:{lineno}: not valid JSON: {e}") from None
                if not isinstance(obj, dict):
                    raise ConfigError(f"{path}:{lineno}: each line must be a JSON object")
                names.update(dict.fromkeys(obj))
                rows.append(obj)
    elif kind == ".csv":
        with _open_table(path, "r") as f:
            reader = csv.DictReader(f)
            names.update(dict.fromkeys(reader.fieldnames or ()))
            for row in reader:
                rows.append({k: _parse_csv(v) for k, v in row.items() if k is not None})
    else:
        raise ConfigError(f"{path}: a table must be .jsonl or .csv")
    return list(names), rows


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def guess_media(names: list[str], rows: list[dict[str, Any]]) -> list[str]:
    """Columns naming media files: a media column name, or every value a media file name."""
    out = []
    sample = rows[:20]
    for n in names:
        vals = [r.get(n) for r in sample if isinstance(r.get(n), str)]
        named = n.lower() in MEDIA_NAMES
        if vals and (
            named or all(last_part(suffix(v)) in _MEDIA_EXTS and " " not in v for v in vals)
        ):
            out.append(n)
    return out


def suffix(value: str) -> str:
    """Extension of a media file name: what follows the first dot of its base name."""
    base = value.rsplit("/", 1)[-1]
    return base.split(".", 1)[1] if "." in base else ""


def table_arrays(
    names: Sequence[str], rows: Sequence[dict[str, Any]], media: Sequence[str]
) -> tuple[dict[str, np.ndarray], dict[str, str], TableLayout]:
    """The arrays a table is read from: ``columns/<name>.npy`` for numeric columns (int64, or
    float64 with NaN for empty cells), ``strings/<name>.npy`` / ``.offsets.npy`` (and
    ``.null.npy`` where cells are empty) for the others. Returns (arrays, column dtypes,
    layout without paths)."""
    numeric = [
        c
        for c in names
        if c not in media
        and any(_is_number(r.get(c)) for r in rows)
        and all(r.get(c) is None or _is_number(r.get(c)) for r in rows)
    ]
    arrays: dict[str, np.ndarray] = {}
    for c in numeric:
        vals = [r.get(c) for r in rows]
        if all(isinstance(v, int) for v in vals):
            arrays[f"columns/{c}.npy"] = np.asarray(vals, np.int64)
        else:
            arrays[f"columns/{c}.npy"] = np.asarray(
                [math.nan if v is None else v for v in vals], np.float64
            )
    strings = [c for c in names if c not in numeric]
    nullable = []
    for c in strings:
        vals = [r.get(c) for r in rows]
        blob, off = encode_keys(["" if v is None else str(_cell(v)) for v in vals])
        arrays[f"strings/{c}.npy"], arrays[f"strings/{c}.offsets.npy"] = blob, off
        if any(v is None for v in vals):
            arrays[f"strings/{c}.null.npy"] = np.asarray([v is None for v in vals], np.bool_)
            nullable.append(c)
    dtypes = {c: str(arrays[f"columns/{c}.npy"].dtype) for c in numeric}
    layout = TableLayout(
        path="",
        root="",
        columns=tuple(names),
        media_columns=tuple(media),
        strings=tuple(strings),
        nullable=tuple(nullable),
        json_columns=tuple(c for c in _json_columns(strings, rows) if c not in media),
    )
    return arrays, dtypes, layout


def _folder_of(path: str) -> str:
    """The folder of a table file: a local folder, or a URL's prefix."""
    return path.rsplit("/", 1)[0] if is_url(path) else str(Path(path).parent)


def table_record(
    path: str | os.PathLike,
    *,
    root: str | os.PathLike | None = None,
    media_columns: Sequence[str] | None = None,
    aux: str | os.PathLike | None = None,
) -> tuple[IndexRecord, dict[str, np.ndarray]]:
    """Index record and in-memory arrays of a table opened as is (every row kept)."""
    names, rows = read_table(path)
    media = list(media_columns) if media_columns else guess_media(names, rows)
    missing = [c for c in media if c not in names]
    if missing:
        raise ConfigError(f"{path}: media columns {missing} not in table ({names})")
    arrays, dtypes, layout = table_arrays(names, rows, media)
    arrays["rows.npy"] = np.arange(len(rows), dtype=np.int64)
    layout = msgspec.structs.replace(
        layout,
        path=str(path),
        root=str(root) if root is not None else _folder_of(str(path)),
        aux=None if aux is None else str(aux),
    )
    record = IndexRecord(
        layout="table", num_samples=len(rows), columns=dtypes, table=layout, source="table"
    )
    return record, arrays
