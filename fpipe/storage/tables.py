"""Tables (JSONL or CSV) whose rows are samples and whose media columns name files.

A media value is a path relative to ``root`` (default: the table's folder), or, when an
auxiliary prepared tar dataset is given (``aux``), a member name ``"<shard stem>/<key>.<ext>"``
of that dataset. OpenSora's ``path,text,num_frames,height,width`` CSV works as is: ``path`` is
the media column and the numeric columns become metadata columns.

``read(i)`` returns every column of the row as bytes: a media column under its own name and
under the file's extension (``{"path": b"<mp4 bytes>", "mp4": b"<same>"}``), other columns as
UTF-8 text (``{"text": b"a cat", "num_frames": b"120"}``).
A table can be used directly (parsed on open, problems surface on read) or prepared
(``fpipe prepare table.csv``: files checked, bad rows left out and reported, columns stored as
``.npy`` under ``<table folder>/.fpipe``).
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.storage.config import CRUDE, DatasetConfig, load_dataset_config
from fpipe.storage.image_header import HEADER_PREFIX, IMAGE_EXTS, image_size
from fpipe.storage.tar_index import INDEX_DIR, encode_keys, load_array, read_info

__all__ = ["PreparedTableDataset", "TableDataset", "is_table", "read_table"]

TABLE_SUFFIXES = (".jsonl", ".csv")
MEDIA_NAMES = frozenset(
    {
        "path",
        "file",
        "filename",
        "image",
        "image_path",
        "video",
        "video_path",
        "audio",
        "audio_path",
        "media",
        "media_path",
    }
)
MEDIA_SUFFIXES = IMAGE_EXTS | {
    "mp4",
    "webm",
    "mkv",
    "avi",
    "mov",
    "wav",
    "mp3",
    "flac",
    "ogg",
    "m4a",
    "npy",
    "npz",
    "txt",
    "json",
    "pth",
}


def is_table(path: str | Path) -> bool:
    """True for ``.jsonl`` and ``.csv`` files."""
    return str(path).endswith(TABLE_SUFFIXES)


def _cell(v: Any) -> Any:
    if isinstance(v, (dict, list)):
        return msgspec.json.encode(v).decode()
    return v


def read_table(path: str | Path) -> tuple[list[str], list[dict[str, Any]]]:
    """(column names, rows) of a JSONL or CSV file; CSV numbers are parsed."""
    path = Path(path)
    rows: list[dict[str, Any]] = []
    names: dict[str, None] = {}
    if path.suffix == ".jsonl":
        dec = msgspec.json.Decoder()
        with open(path, "rb") as f:
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
                rows.append({k: _cell(v) for k, v in obj.items()})
    elif path.suffix == ".csv":
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            names.update(dict.fromkeys(reader.fieldnames or ()))
            for row in reader:
                rows.append({k: _parse_csv(v) for k, v in row.items() if k is not None})
    else:
        raise ConfigError(f"{path}: a table must be .jsonl or .csv")
    return list(names), rows


def _parse_csv(v: str | None) -> Any:
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        return v


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _guess_media(names: list[str], rows: list[dict[str, Any]]) -> list[str]:
    out = []
    sample = rows[:20]
    for n in names:
        vals = [r.get(n) for r in sample if isinstance(r.get(n), str)]
        named = n.lower() in MEDIA_NAMES
        if vals and (
            named
            or all(v.rsplit(".", 1)[-1].lower() in MEDIA_SUFFIXES and " " not in v for v in vals)
        ):
            out.append(n)
    return out


def _suffix(value: str) -> str:
    base = value.rsplit("/", 1)[-1]
    return base.split(".", 1)[1] if "." in base else ""


class _TableBase:
    """Shared read logic; subclasses fill the column stores."""

    path: str
    config: DatasetConfig
    _names: list[str]
    _media: list[str]
    _root: str
    _aux_path: str | None
    _n: int
    _stem: str

    def _setup(self) -> None:
        self._aux = None

    def __len__(self) -> int:
        return self._n

    def __getstate__(self) -> dict[str, Any]:
        return dict(self._state)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)

    def _value(self, col: str, i: int) -> Any:
        raise NotImplementedError

    def _row_number(self, i: int) -> int:
        return i

    def _check(self, i: int) -> int:
        i = int(i)
        if not 0 <= i < self._n:
            raise IndexError(f"sample index {i} out of range for {self._n} samples")
        return i

    def key(self, i: int) -> str:
        """``"<table stem>/<row number>"`` (row numbers count data rows from 0)."""
        return f"{self._stem}/{self._row_number(self._check(i))}"

    def _aux_ds(self):
        if self._aux is None:
            from fpipe.storage.dataset import open_dataset

            self._aux = open_dataset(self._aux_path)
        return self._aux

    def _media_bytes(self, col: str, value: str, key: str) -> bytes:
        fpath = os.path.join(self._root, value)
        try:
            with open(fpath, "rb") as f:
                return f.read()
        except FileNotFoundError:
            if self._aux_path is None:
                raise BadSampleError(fpath, key, f"column {col!r}: media file missing") from None
        except OSError as e:
            raise BadSampleError(fpath, key, f"column {col!r}: cannot read: {e}") from None
        aux = self._aux_ds()
        ext = _suffix(value)
        j = aux.index_of_key(value[: len(value) - len(ext) - 1]) if ext else None
        if j is None:
            raise BadSampleError(self._aux_path, key, f"column {col!r}: no member {value!r}")
        data = aux.read(j).get(ext[:-3] if ext.endswith(".gz") else ext)
        if data is None:
            raise BadSampleError(self._aux_path, key, f"column {col!r}: no member {value!r}")
        return data

    def read(self, i: int) -> dict[str, bytes]:
        """Every column of row ``i`` as bytes; media columns hold the file's bytes."""
        i = self._check(i)
        out: dict[str, bytes] = {}
        for col in self._names:
            v = self._value(col, i)
            if v is None:
                continue
            if col in self._media:
                data = self._media_bytes(col, str(v), self.key(i))
                out[col] = data
                ext = _suffix(str(v))
                if ext.endswith(".gz"):
                    ext = ext[:-3]
                if ext and ext not in self._names:
                    out.setdefault(ext, data)
            else:
                out[col] = str(v).encode("utf-8")
        return out

    def av_metadata(self, i: int) -> dict[str, Any]:
        """Stored audio/video stream metadata of row ``i`` by the key :meth:`read` gives the
        file (the media column, and the file's extension): ``{"path": AVMetadata, "mp4":
        AVMetadata}``; empty for a table that was not prepared (the decoder probes then)."""
        return {}

    def split_indices(self, name: str) -> np.ndarray:
        """Rows whose ``split`` column equals ``name``; all rows without a ``split`` column."""
        if "split" not in self._names:
            return np.arange(self._n, dtype=np.int64)
        return np.asarray(
            [i for i in range(self._n) if self._value("split", i) == name], dtype=np.int64
        )


class TableDataset(_TableBase):
    """A JSONL/CSV table opened directly (parsed into memory when opened)."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        root: str | os.PathLike | None = None,
        media_columns: list[str] | tuple[str, ...] | None = None,
        aux: str | os.PathLike | None = None,
        sample_type: str | None = None,
        field_map: dict[str, str] | None = None,
    ):
        self._state = dict(
            path=str(path),
            root=None if root is None else str(root),
            media_columns=media_columns,
            aux=None if aux is None else str(aux),
            sample_type=sample_type,
            field_map=field_map,
        )
        self._setup()
        self.path = str(path)
        self._stem = Path(path).name.rsplit(".", 1)[0]
        self._root = str(root) if root is not None else str(Path(path).parent)
        self._aux_path = None if aux is None else str(aux)
        self._names, self._rows = read_table(path)
        self._n = len(self._rows)
        self._media = (
            list(media_columns) if media_columns else _guess_media(self._names, self._rows)
        )
        missing = [c for c in self._media if c not in self._names]
        if missing:
            raise ConfigError(f"{path}: media columns {missing} not in table ({self._names})")
        self._numeric = [
            c
            for c in self._names
            if c not in self._media
            and any(_is_number(r.get(c)) for r in self._rows)
            and all(r.get(c) is None or _is_number(r.get(c)) for r in self._rows)
        ]
        self._cols: dict[str, np.ndarray] = {}
        self.config = DatasetConfig(
            sample_type=sample_type or CRUDE, field_map=dict(field_map or {})
        )

    @property
    def column_names(self) -> tuple[str, ...]:
        """The table's numeric columns."""
        return tuple(self._numeric)

    def column(self, name: str) -> np.ndarray:
        """A numeric column (int64, or float64 with NaN where a row has no value)."""
        if name not in self._numeric:
            raise KeyError(f"{self.path}: no numeric column {name!r}; have {self._numeric}")
        if name not in self._cols:
            vals = [r.get(name) for r in self._rows]
            if all(isinstance(v, int) for v in vals):
                self._cols[name] = np.asarray(vals, np.int64)
            else:
                self._cols[name] = np.asarray(
                    [math.nan if v is None else v for v in vals], np.float64
                )
        return self._cols[name]

    def _value(self, col: str, i: int) -> Any:
        return self._rows[i].get(col)


class PreparedTableDataset(_TableBase):
    """A table prepared by ``fpipe prepare TABLE`` (columns in ``.fpipe/``)."""

    def __init__(self, path: str | os.PathLike, *, max_open_files: int = 0):
        del max_open_files  # media files are opened per read
        self._state = dict(path=str(path))
        self._setup()
        self.path = str(path)
        self._dir = Path(path) / INDEX_DIR
        info = read_info(self._dir)
        t = info["table"]
        self._stem = Path(t["path"]).name.rsplit(".", 1)[0]
        self._root = os.path.join(self.path, t["root"])
        self._aux_path = None if t.get("aux") is None else os.path.join(self.path, t["aux"])
        self._names = list(t["columns"])
        self._media = list(t["media_columns"])
        self._strings = list(t["strings"])
        self._nullable = set(t.get("nullable") or ())
        self._numeric = list(info["columns"])
        self._n = int(info["num_samples"])
        self._arrays: dict[str, np.ndarray] = {}
        self.config = load_dataset_config(self._dir / "dataset.yaml")
        self._av_fields = dict((info.get("av") or {}).get("fields") or {})
        self._av_index = None

    def av_metadata(self, i: int) -> dict[str, Any]:  # noqa: D102 - see _TableBase
        if not self._av_fields:
            return {}
        if self._av_index is None:
            from fpipe.storage.av_meta import AVIndex

            self._av_index = AVIndex(self._av_fields, self._array)
        i = self._check(i)
        out: dict[str, Any] = {}
        for col in self._av_fields:
            meta = self._av_index.metadata(col, i)
            if meta is None:
                continue
            out[col] = meta
            ext = _suffix(str(self._value(col, i)))
            ext = ext[:-3] if ext.endswith(".gz") else ext
            if ext and ext not in self._names:
                out.setdefault(ext, meta)
        return out

    def _array(self, rel: str) -> np.ndarray:
        if rel not in self._arrays:
            self._arrays[rel] = load_array(self._dir / rel).view(np.ndarray)
        return self._arrays[rel]

    @property
    def column_names(self) -> tuple[str, ...]:
        """Numeric table columns plus ``<media column>.bytes`` (and width/height for images)."""
        return tuple(self._numeric)

    def column(self, name: str) -> np.ndarray:
        """A metadata column (memory-mapped)."""
        if name not in self._numeric:
            raise KeyError(f"{self.path}: no column {name!r}; have {self._numeric}")
        return self._array(f"columns/{name}.npy")

    def _row_number(self, i: int) -> int:
        return int(self._array("rows.npy")[i])

    def _value(self, col: str, i: int) -> Any:
        if col in self._strings:
            if col in self._nullable and self._array(f"strings/{col}.null.npy")[i]:
                return None
            off = self._array(f"strings/{col}.offsets.npy")
            a, b = int(off[i]), int(off[i + 1])
            return self._array(f"strings/{col}.npy")[a:b].tobytes().decode("utf-8")
        arr = self.column(col)
        v = arr[i]
        if arr.dtype.kind == "f":
            return None if math.isnan(v) else float(v)
        return int(v)


def table_index(
    path: str | Path,
    *,
    root: str | Path | None,
    media_columns: list[str] | None,
    aux: str | Path | None,
    probe_av: bool = True,
) -> tuple[dict[str, Any], list[tuple[str, str, str]]]:
    """Check a table's rows and build its prepared columns.

    Returns (arrays by relative file name + ``"_info"``, problems). A row whose media file is
    missing or (for images) has an unreadable header, or (with ``probe_av``) whose audio/video
    file cannot be probed, is left out and reported.
    """
    from fpipe.storage import av_meta

    ds = TableDataset(path, root=root, media_columns=media_columns, aux=aux)
    keep: list[int] = []
    extra: dict[str, list[int]] = {}
    av_rows: list[dict[str, Any]] = []  # audio/video statistics of kept rows
    keyframes = av_meta.KeyframeBuilder()
    problems: list[tuple[str, str, str]] = []
    for i in range(len(ds)):
        key = ds.key(i)
        row_extra: dict[str, int] = {}
        row_av: dict[str, Any] = {}
        row_kf: dict[str, np.ndarray] = {}
        try:
            for col in ds._media:
                v = ds._value(col, i)
                if v is None:
                    raise BadSampleError(str(path), key, f"column {col!r} is empty")
                fpath = os.path.join(ds._root, str(v))
                is_av = probe_av and av_meta.is_av_ext(_suffix(str(v)))
                if os.path.isfile(fpath):
                    row_extra[f"{col}.bytes"] = os.path.getsize(fpath)
                    head = b""
                    if _suffix(str(v)).lower() in IMAGE_EXTS:
                        with open(fpath, "rb") as f:
                            head = f.read(HEADER_PREFIX)
                    if is_av:  # stream metadata and keyframes (demux only)
                        row_av_col, row_kf[col] = av_meta.probe_stats(
                            fpath, col, path=fpath, key=key
                        )
                        row_av.update(row_av_col)
                else:
                    data = ds._media_bytes(col, str(v), key)
                    row_extra[f"{col}.bytes"] = len(data)
                    head = data if _suffix(str(v)).lower() in IMAGE_EXTS else b""
                    if is_av:
                        row_av_col, row_kf[col] = av_meta.probe_stats(
                            data, col, path=fpath, key=key
                        )
                        row_av.update(row_av_col)
                if head:
                    try:
                        w, h = image_size(head)
                    except ValueError:
                        with open(fpath, "rb") as f:  # PIL may need more than the prefix
                            w, h = image_size(f.read())
                    row_extra[f"{col}.width"], row_extra[f"{col}.height"] = w, h
        except BadSampleError as e:
            problems.append((e.path, e.key, e.reason))
            continue
        except (ValueError, OSError) as e:
            problems.append((str(path), key, str(e)))
            continue
        keep.append(i)
        av_rows.append(row_av)
        keyframes.add(row_kf)
        for k, v in row_extra.items():
            extra.setdefault(k, [-1] * (len(keep) - 1)).append(v)
        for k in extra:
            if len(extra[k]) < len(keep):
                extra[k].append(-1)
    arrays: dict[str, Any] = {"rows.npy": np.asarray(keep, np.int64)}
    columns: dict[str, str] = {}
    for name in ds.column_names:
        arr = ds.column(name)[np.asarray(keep, np.int64)] if keep else ds.column(name)[:0]
        arrays[f"columns/{name}.npy"] = arr
        columns[name] = str(arr.dtype)
    for name, vals in extra.items():
        arrays[f"columns/{name}.npy"] = np.asarray(vals, np.int64)
        columns[name] = "int64"
    av_names = list(dict.fromkeys(k for r in av_rows for k in r))
    for name in av_names:  # audio/video statistics (NaN / -1 where a row has none)
        float_col = av_meta.is_float_column(name)
        fill = math.nan if float_col else -1
        arr = np.asarray(
            [r.get(name, fill) for r in av_rows], np.float64 if float_col else np.int64
        )
        arrays[f"columns/{name}.npy"] = arr
        columns[name] = str(arr.dtype)
    kf = keyframes.build()
    arrays.update(av_meta.keyframe_files(kf))
    strings = [c for c in ds._names if c not in ds._numeric]
    nullable: list[str] = []
    for col in strings:
        vals = [ds._value(col, i) for i in keep]
        blob, off = encode_keys(["" if v is None else str(v) for v in vals])
        arrays[f"strings/{col}.npy"] = blob
        arrays[f"strings/{col}.offsets.npy"] = off
        if any(v is None for v in vals):
            arrays[f"strings/{col}.null.npy"] = np.asarray([v is None for v in vals], np.bool_)
            nullable.append(col)
    arrays["_info"] = {
        "kind": "table",
        "num_samples": len(keep),
        "shards": [],
        "columns": columns,
        "table": {
            "columns": ds._names,
            "media_columns": ds._media,
            "strings": strings,
            "nullable": nullable,
        },
    }
    if kf:  # audio/video media columns (the file's extension is added per row on load)
        arrays["_info"]["av"] = {"fields": {c: [c] for c in kf}}
    return arrays, problems
