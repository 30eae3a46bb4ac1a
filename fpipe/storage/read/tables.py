"""The ``"table"`` layout: JSONL or CSV rows are samples and media columns name files.

A media value is a path relative to ``root`` (default: the table's folder), or, when an
auxiliary prepared tar dataset is given (``aux``), a member name ``"<shard stem>/<key>.<ext>"``
of that dataset. A value leading out of ``root`` (``..``, an absolute path elsewhere, a URL, a
symbolic link out) is a bad row, and the file is never opened. OpenSora's
``path,text,num_frames,height,width`` CSV works as is: ``path`` is the media column and the
numeric columns become metadata columns.

``read(i)`` returns every column of the row as bytes: a media column under its own name and
under the file's extension (``{"path": b"<mp4 bytes>", "mp4": b"<same>"}``), other columns as
UTF-8 text (``{"text": b"a cat", "num_frames": b"120"}``).

Columns are typed: ``decode_exts(i)`` says how each column of row ``i`` is decoded when a
sample is cooked, whatever the column is called: a media column by its file's extension
(``image`` naming ``x.jpg`` is decoded as a ``jpg`` image), a text column as text (``str``), a
number column and a JSON object or list cell as JSON (``int``/``float``, ``dict``/``list``).

A table opened as is is parsed into the same arrays ``fpipe prepare TABLE`` writes to
``<table folder>/.fpipe`` (numeric columns, strings as a blob plus offsets), kept in memory;
problems surface on read. Prepared, rows with missing or unreadable media are left out and
reported, and media sizes (and image/video statistics) become columns.

A prepared table records its media folder (and auxiliary dataset) in ``info.yaml``, relative
to the table's folder. That record is data: one that leads out of the table's folder is
refused when the table is opened (:func:`prepared_media`) unless the user names a folder
holding it (``media_root=``), so a table folder from elsewhere cannot read ``/``.

Parsing a table file (:func:`read_table`, :func:`table_arrays`, :func:`table_record`) is
:mod:`fpipe.storage.read.table_files`; its names are importable from here too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from fpipe.core.errors import BadSampleError
from fpipe.decode.extensions import strip_gz
from fpipe.decode.limits import DecodeLimits
from fpipe.storage.paths import PathEscapeError, contained, contained_or_allowed, is_url
from fpipe.storage.read.record import IndexRecord, TableLayout
from fpipe.storage.read.table_files import (
    is_table,
    read_table,
    suffix,
    table_arrays,
    table_record,
)

__all__ = [
    "TableReader",
    "is_table",
    "prepared_media",
    "read_table",
    "suffix",
    "table_arrays",
    "table_record",
]


#: what a refusal of :func:`prepared_media` tells the user to do
_NAME_IT = (
    "; a prepared table's info.yaml is data, and a table folder from elsewhere could name "
    "any folder. If this is where you keep the table's media, name that folder (or one "
    "holding it) when opening: open_dataset(..., media_root=DIR), get_train_dataset(..., "
    "open_kwargs={{'media_root': DIR}}), `fpipe info/preview/check --media-root DIR`; or "
    "move the media inside {folder} and prepare the table again"
)


def prepared_media(
    folder: str, table: TableLayout, allowed: tuple[str, ...], where: str
) -> tuple[str, str | None]:
    """(media folder, auxiliary dataset or None) of the table prepared in ``folder``, as
    ``table`` (read from ``where``, its ``info.yaml``) records them: each inside ``folder``,
    or inside a folder in ``allowed`` (the user's ``media_root``, see
    :func:`~fpipe.storage.paths.allowed_folders`); else a
    :class:`~fpipe.storage.paths.PathEscapeError` (a ``ConfigError``) naming ``where``, the
    recorded path and the fix, before any media file is opened."""
    root = _recorded(folder, table.root, "media folder", allowed, where)
    if table.aux is None:
        return root, None
    return root, _recorded(folder, table.aux, "auxiliary dataset", allowed, where)


def _recorded(folder: str, name: str, what: str, allowed: tuple[str, ...], where: str) -> str:
    try:
        return contained_or_allowed(
            folder, name, allowed, where=where, what=what, folder=f"the table's folder {folder}"
        )
    except PathEscapeError as e:
        fix = _NAME_IT.format(folder=folder)
        raise PathEscapeError(str(e) + fix, e.name, e.reason) from None


class TableReader:
    """Rows of a table as member dicts; media files read from ``root`` or the aux dataset.

    Args:
      root, aux: resolved media folder and auxiliary dataset path (None: none).
      arrays: the table's arrays (:func:`table_arrays` names).
      open_aux: opens the auxiliary dataset (given by the dataset opener, so this module
        needs no import of it).
    """

    def __init__(
        self,
        record: IndexRecord,
        root: str,
        aux: str | None,
        arrays,
        open_aux: Callable[[str], Any],
    ):
        assert record.table is not None
        self._t = record.table
        self._record = record
        self._root = root
        self._aux_path = aux
        self._aux = None
        self._open_aux = open_aux
        self._array = arrays
        self._stem = Path(self._t.path).name.rsplit(".", 1)[0]
        self._strings = frozenset(self._t.strings)
        self._nullable = frozenset(self._t.nullable)
        self._json = frozenset(self._t.json_columns)

    @property
    def table_path(self) -> str:
        """The table file."""
        return self._t.path

    @property
    def media_columns(self) -> tuple[str, ...]:
        """Columns naming media files."""
        return self._t.media_columns

    def value(self, col: str, i: int) -> Any:
        """The cell of column ``col`` in row ``i`` (None when empty)."""
        if col in self._strings:
            if col in self._nullable and self._array(f"strings/{col}.null.npy")[i]:
                return None
            off = self._array(f"strings/{col}.offsets.npy")
            a, b = int(off[i]), int(off[i + 1])
            return self._array(f"strings/{col}.npy")[a:b].tobytes().decode("utf-8")
        arr = self._array(f"columns/{col}.npy")
        v = arr[i]
        if arr.dtype.kind == "f":
            return None if math.isnan(v) else float(v)
        return int(v)

    def key(self, i: int) -> str:
        """``"<table stem>/<row number>"`` (row numbers count data rows from 0)."""
        return f"{self._stem}/{int(self._array('rows.npy')[i])}"

    def media_path(self, value: str, col: str = "", key: str = "") -> str:
        """The file media value ``value`` (of column ``col`` in the row of key ``key``) names,
        inside ``root`` (:func:`~fpipe.storage.paths.contained`); a value leading out of it is
        a :class:`~fpipe.core.errors.BadSampleError` naming the table, the key and the value,
        and the file is never opened."""
        try:
            return contained(
                self._root, value, what=f"column {col!r}: path", folder="the media folder"
            )
        except PathEscapeError as e:
            raise BadSampleError(self.table_path, key, e.reason) from None

    def media_bytes(
        self, col: str, value: str, key: str, limits: DecodeLimits | None = None
    ) -> bytes:
        """Bytes of the media file ``value`` (from ``root``, else from the aux dataset, whose
        ``.gz`` members are inflated within ``limits``)."""
        fpath = self.media_path(value, col, key)
        try:
            if is_url(fpath):  # a table on object storage: its media beside it, one GET each
                from fpipe.storage.read.remote import read_object

                return read_object(fpath)
            with open(fpath, "rb") as f:
                return f.read()
        except FileNotFoundError:
            if self._aux_path is None:
                raise BadSampleError(fpath, key, f"column {col!r}: media file missing") from None
        except OSError as e:
            raise BadSampleError(fpath, key, f"column {col!r}: cannot read: {e}") from None
        if self._aux is None:
            self._aux = self._open_aux(self._aux_path)
        ext = suffix(value)
        j = self._aux.index_of_key(value[: len(value) - len(ext) - 1]) if ext else None
        data = None if j is None else self._aux.read(j, limits=limits).get(strip_gz(ext))
        if data is None:
            raise BadSampleError(self._aux_path, key, f"column {col!r}: no member {value!r}")
        return data

    def read(
        self, i: int, exts: frozenset[str] | None = None, limits: DecodeLimits | None = None
    ) -> dict[str, bytes]:
        """Every column of row ``i`` as bytes; media columns hold the file's bytes (``exts``
        is ignored: a field map names columns, not member extensions)."""
        out: dict[str, bytes] = {}
        for col in self._t.columns:
            v = self.value(col, i)
            if v is None:
                continue
            if col in self._t.media_columns:
                data = self.media_bytes(col, str(v), self.key(i), limits)
                out[col] = data
                ext = strip_gz(suffix(str(v)))
                if ext and ext not in self._t.columns:
                    out.setdefault(ext, data)
            else:
                out[col] = str(v).encode("utf-8")
        return out

    def row_object(self, i: int) -> dict[str, Any] | None:
        """Row ``i`` of a JSONL table as its JSON object (``{column: value}``: text as
        ``str``, numbers as numbers, JSON cells as dicts/lists, empty cells as None; a media
        column holds its file name), or None for a CSV table. Crude samples of a JSONL table
        carry it under ``json``, where Energon's JSONL datasets give cookers the line."""
        if not self._t.path.endswith(".jsonl"):
            return None
        row: dict[str, Any] = {}
        for col in self._t.columns:
            v = self.value(col, i)
            row[col] = msgspec.json.decode(v) if col in self._json and v is not None else v
        return row

    def decode_exts(self, i: int) -> dict[str, str]:
        """How each column of row ``i`` is decoded when cooked: the extension it is decoded
        as (a media column: its file's, none when the file name has no extension; a text
        column: ``txt``; a number or JSON column: ``json``). The file's extension key that
        :meth:`read` adds is decoded by its own name."""
        out: dict[str, str] = {}
        for col in self._t.columns:
            if col in self._t.media_columns:
                v = self.value(col, i)
                ext = strip_gz(suffix(str(v))) if v is not None else ""
                if ext:
                    out[col] = ext
            elif col in self._json or col not in self._strings:
                out[col] = "json"
            else:
                out[col] = "txt"
        return out

    def av_names(self, field: str, i: int) -> tuple[str, ...]:
        """Keys :meth:`read` gives media column ``field`` under: the column, and the file's
        extension when no column has that name."""
        v = self.value(field, i)
        ext = strip_gz(suffix(str(v))) if v is not None else ""
        return (field, ext) if ext and ext not in self._t.columns else (field,)

    def split_indices(self, name: str) -> np.ndarray:
        """Rows whose ``split`` column equals ``name``; all rows without a ``split`` column."""
        n = self._record.num_samples
        if "split" not in self._t.columns:
            return np.arange(n, dtype=np.int64)
        return np.asarray([i for i in range(n) if self.value("split", i) == name], np.int64)
