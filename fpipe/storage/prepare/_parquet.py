"""``fpipe prepare`` on Parquet files: an index pointing into the files as they are.

Nothing is copied. For every row the index records its file (``shard_id.npy``), row group and
place in it (``parquet/row_group.npy``, ``parquet/row_in_group.npy``) and its row number in
the file (``parquet/row.npy``, for its key), plus metadata columns computed from the data with
pyarrow, one row group at a time:

- every integer, float and boolean column, as it is (int64; float64 with NaN for nulls);
- ``<column>.bytes`` for media (``{bytes, path}`` structs), binary and text columns,
  ``<column>.chars`` for text, ``<column>.width`` / ``.height`` for image columns (from the
  image header, as for tar members), ``bytes`` their sum;
- the user's columns (``--column NAME=SPEC``, :mod:`._parquet_columns`);

The columns (and their kinds) are the first readable file's; a file without one of them, an
unreadable file (truncated, corrupt footer) or row group, a media struct with neither bytes
nor path or whose path leads out of the dataset folder (refused unopened:
:func:`~fpipe.storage.paths.contained`; so is a listed file that does), an unreadable image
header, or a row without a value for a mapped field is left out
and reported with its file and row key (``data/train-00000-of-00002/17``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from fpipe.core.errors import error_text
from fpipe.decode.extensions import ext_kind, last_part
from fpipe.samples.field_spec import parse_field_spec
from fpipe.storage.paths import PathEscapeError, contained
from fpipe.storage.prepare._image_header import HEADER_PREFIX, image_size
from fpipe.storage.prepare._parquet_columns import compile_columns, user_column_values
from fpipe.storage.prepare._progress import progress_bar
from fpipe.storage.read.arrow_stream import ArrowStreamFile
from fpipe.storage.read.parquet import file_stem, media_file
from fpipe.storage.read.parquet_open import PreadFile
from fpipe.storage.read.record import ParquetLayout

__all__ = ["ParquetIndex", "index_parquet", "media_ext", "open_table_file", "schema_layout"]

#: Hugging Face feature types stored as ``{bytes, path}`` structs, and their default extension
_HF_MEDIA = {"Image": "png", "Audio": "wav", "Video": "mp4"}
#: names a metadata column may not take (the index has its own, or they leave ``columns/``)
_RESERVED = frozenset({"shard_id", "bytes"})

_MAGIC = (
    (b"\xff\xd8\xff", "jpg"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"GIF8", "gif"),
    (b"BM", "bmp"),
    (b"fLaC", "flac"),
    (b"OggS", "ogg"),
    (b"ID3", "mp3"),
    (b"\x1aE\xdf\xa3", "webm"),
)


def media_ext(data: bytes | None, path: str | None) -> str:
    """The extension a media cell is decoded as: its path's, else sniffed from its bytes
    (``""`` when neither tells)."""
    if path:
        ext = last_part(path.rsplit("/", 1)[-1].rsplit(".", 1)[-1]) if "." in path else ""
        if ext_kind(ext) in ("image", "av"):
            return ext
    if data:
        head = bytes(data[:16])
        if head[:4] == b"RIFF":
            return {b"WEBP": "webp", b"WAVE": "wav", b"AVI ": "avi"}.get(head[8:12], "")
        if head[4:8] == b"ftyp":
            return "mp4"
        for magic, ext in _MAGIC:
            if head.startswith(magic):
                return ext
    return ""


def _hf_features(schema) -> dict[str, str]:
    """Column -> Hugging Face feature type (``Image``, ``Audio``...) from the schema's
    ``huggingface`` metadata, when ``datasets`` wrote the file."""
    meta = (schema.metadata or {}).get(b"huggingface")
    if not meta:
        return {}
    try:
        feats = json.loads(meta).get("info", {}).get("features", {})
    except (ValueError, AttributeError):
        return {}
    return {k: v.get("_type", "") for k, v in feats.items() if isinstance(v, dict)}


def _is_media_struct(t) -> bool:
    import pyarrow as pa

    if not pa.types.is_struct(t):
        return False
    names = {t.field(k).name for k in range(t.num_fields)}
    return bool(names) and names <= {"bytes", "path"}


def open_table_file(files: Any, path: str, size: int, *, arrow: bool = False, scan: bool = True):
    """A :class:`pyarrow.parquet.ParquetFile` read through ``files`` (``pread``), or for
    ``arrow`` an :class:`~fpipe.storage.read.arrow_stream.ArrowStreamFile` (memory-mapped,
    its record batches found when ``scan``)."""
    if arrow:
        return ArrowStreamFile(path, scan=scan)
    import pyarrow.parquet as pq

    return pq.ParquetFile(PreadFile(files, path, size))


def schema_layout(schema, *, arrow: bool = False) -> ParquetLayout:
    """The :class:`ParquetLayout` of a file's schema (media extensions still empty);
    ``arrow``: of an Arrow stream file."""
    import pyarrow as pa

    hf = _hf_features(schema)
    media, strings, binary, numeric = [], [], [], []
    for f in schema:
        t = f.type
        if _is_media_struct(t) or (hf.get(f.name) in _HF_MEDIA and pa.types.is_struct(t)):
            media.append(f.name)
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            strings.append(f.name)
        elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
            binary.append(f.name)
        elif pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
            numeric.append(f.name)
    exts = {c: _HF_MEDIA.get(hf.get(c, ""), "") for c in media}
    return ParquetLayout(
        format="arrow" if arrow else "parquet",
        columns=tuple(schema.names),
        media_columns=tuple(media),
        media_exts=exts,
        strings=tuple(strings),
        binary=tuple(binary),
        numeric=tuple(numeric),
    )


#: the arrays every index has, even without rows
_BASE = {
    "shard_id.npy": np.int32,
    "parquet/row_group.npy": np.int32,
    "parquet/row_in_group.npy": np.int32,
    "parquet/row.npy": np.int64,
}


class ParquetIndex:
    """What indexing the files gives: arrays, kept files, problems, the layout."""

    def __init__(self, arrow: bool = False) -> None:
        self.arrow = arrow  #: Arrow stream files: the index also keeps each row's batch offset
        self.layout: ParquetLayout | None = None
        self.shards: list[dict[str, Any]] = []
        self.parts: dict[str, list[np.ndarray]] = {}
        self.problems: list[tuple[str, str, str]] = []
        self.column_specs: tuple = ()  #: the user's ``--column`` specs
        self.user_columns: tuple = ()  #: them checked against the first file's schema

    def add(self, values: Mapping[str, np.ndarray]) -> None:
        """Append the arrays of one row group (by relative file name)."""
        for k, v in values.items():
            self.parts.setdefault(k, []).append(v)

    def arrays(self) -> tuple[dict[str, np.ndarray], dict[str, str]]:
        """(``.npy`` files by relative name, metadata column dtypes). A column with nulls in
        some row groups only is float64 (NaN) throughout; width/height columns are kept for
        image columns only."""
        layout = self.layout
        images = {
            c for c, e in (layout.media_exts if layout else {}).items() if ext_kind(e) == "image"
        }
        out: dict[str, np.ndarray] = {}
        dtypes: dict[str, str] = {}
        for k, chunks in self.parts.items():
            if k.startswith("columns/"):
                name = k[len("columns/") : -len(".npy")]
                base, _, stat = name.rpartition(".")
                media = layout is not None and base in layout.media_columns
                if stat in ("width", "height") and media and base not in images:
                    continue  # not an image column after all
            out[k] = np.concatenate(chunks)
            if k.startswith("columns/"):
                dtypes[name] = str(out[k].dtype)
        base = {**_BASE, "parquet/batch_offset.npy": np.int64} if self.arrow else _BASE
        for k, dt in base.items():
            out.setdefault(k, np.zeros(0, dt))
        return out, dtypes


def _column_values(col) -> np.ndarray:
    """A numeric pyarrow column as float64 with NaN for nulls (int64 kept when no null)."""
    import pyarrow as pa

    if pa.types.is_boolean(col.type):
        col = col.cast(pa.int64())
    if col.null_count == 0 and (pa.types.is_integer(col.type)):
        return col.to_numpy().astype(np.int64, copy=False)
    return col.cast(pa.float64()).to_numpy(zero_copy_only=False).astype(np.float64)


def _lengths(col, measure) -> np.ndarray:
    return np.asarray(measure(col).fill_null(-1).to_numpy(zero_copy_only=False), np.int64)


def _scan_group(
    table,
    layout: ParquetLayout,
    required: dict[str, list[str]],
    exts: dict[str, str],
    stem: str,
    first_row: int,
    read_path,
    user_columns=(),
) -> tuple[np.ndarray, dict[str, np.ndarray], list[tuple[str, str]]]:
    """(rows kept, column values of all rows, problems as (key, reason)) of one row group."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    keep = np.ones(n, bool)
    why: dict[int, str] = {}
    cols: dict[str, np.ndarray] = {}
    total = np.zeros(n, np.int64)
    for c in layout.numeric:
        if c not in _RESERVED and "/" not in c and not c.startswith("."):
            cols[c] = _column_values(table.column(c).combine_chunks())
    for c in (*layout.strings, *layout.binary):
        col = table.column(c).combine_chunks()
        size = _lengths(col, pc.binary_length)
        cols[f"{c}.bytes"] = size
        total += np.maximum(size, 0)
        if c in layout.strings:
            cols[f"{c}.chars"] = _lengths(col, pc.utf8_length)
    for c in layout.media_columns:
        arr = table.column(c).combine_chunks()
        names = {arr.type.field(k).name for k in range(arr.type.num_fields)}
        empty = pa.nulls(n, pa.binary())
        data = arr.field("bytes") if "bytes" in names else empty
        paths = arr.field("path").to_pylist() if "path" in names else [None] * n
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        size = _lengths(data, pc.binary_length)
        blobs = data.to_pylist()  # one conversion per row group, not a scalar per row
        image = ext_kind(exts.get(c) or "") == "image"
        width, height = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
        for j in range(n):
            if not valid[j]:
                continue  # a null cell: a missing value (required fields checked below)
            blob = blobs[j]
            if blob is None:
                if paths[j] is None:
                    why.setdefault(j, f"column {c!r}: the struct has neither bytes nor path")
                    continue
                try:
                    blob = read_path(paths[j], c)
                except PathEscapeError as e:  # refused, never opened
                    why.setdefault(j, e.reason)
                    continue
                except OSError as e:
                    why.setdefault(j, f"column {c!r}: no bytes, and its path cannot be read ({e})")
                    continue
                size[j] = len(blob)
            if not exts.get(c):
                exts[c] = media_ext(blob, paths[j])
                image = ext_kind(exts[c]) == "image"
            if image:
                try:
                    width[j], height[j] = image_size(blob[:HEADER_PREFIX])
                except ValueError:
                    try:
                        width[j], height[j] = image_size(blob)
                    except ValueError as e:
                        why.setdefault(j, f"column {c!r}: {e}")
        cols[f"{c}.bytes"] = size
        total += np.maximum(size, 0)
        cols[f"{c}.width"], cols[f"{c}.height"] = width, height
    if "bytes" not in layout.columns:
        cols["bytes"] = total
    user, wrong = user_column_values(table, user_columns)
    cols.update(user)
    for j, reason in wrong.items():
        why.setdefault(j, reason)
    for field, alts in required.items():
        present = np.zeros(n, bool)
        for a in alts:
            if a in table.column_names:
                present |= (
                    table.column(a).combine_chunks().is_valid().to_numpy(zero_copy_only=False)
                )
        for j in np.flatnonzero(~present):
            why.setdefault(int(j), f"missing field {field!r} ({','.join(alts)})")
    for j in why:
        keep[j] = False
    problems = [(f"{stem}/{first_row + j}", r) for j, r in sorted(why.items())]
    return np.flatnonzero(keep), cols, problems


def _required(field_map: Mapping[str, Any]) -> dict[str, list[str]]:
    """Field -> the columns that may give it (every field of a field map is required)."""
    return {f: [a.ext for a in parse_field_spec(spec)] for f, spec in field_map.items()}


def index_parquet(
    root: str,
    names: list[str],
    files: Any,
    sizes: Mapping[str, tuple[int, int]],
    field_map: Mapping[str, Any],
    progress: bool = False,
    arrow: bool = False,
    columns: tuple = (),
) -> ParquetIndex:
    """Index Parquet files ``names`` (relative to ``root``, a folder or URL) read through
    ``files`` (``pread``); ``sizes``: name -> (bytes, mtime_ns). ``arrow``: the files are
    local Arrow stream files (``save_to_disk``), record batches in the part of row groups.
    ``columns``: the user's :class:`~fpipe.samples.field_spec.ColumnSpec` columns."""
    out = ParquetIndex(arrow)
    out.column_specs = tuple(columns)
    required = _required(field_map)
    exts: dict[str, str] = {}

    def read_path(rel: str, col: str) -> bytes:
        with open(media_file(root, rel, col), "rb") as f:  # PathEscapeError: leads out
            return f.read()

    bar = progress_bar(len(names), "indexing", unit="file", enabled=progress)
    for name in names:
        bar.update(1)
        stem = file_stem(name)
        size, mtime = sizes[name]
        try:  # a listed file (state.json, a link in the folder) leading out: never opened
            path = contained(root, name, what="file")
        except PathEscapeError as e:
            out.problems.append((name, stem, e.reason))
            continue
        try:
            pf = open_table_file(files, path, size, arrow=arrow)
            pf.metadata  # noqa: B018 - a Parquet footer is parsed here: a bad one is reported
        except Exception as e:  # noqa: BLE001 - pyarrow's errors: the file is left out
            what = "Arrow stream" if arrow else "Parquet"
            out.problems.append((name, stem, f"unreadable {what} file ({error_text(e)})"))
            continue
        try:
            kept = _index_file(out, pf, name, required, exts, read_path)
        finally:
            if arrow:
                pf.close()
        out.shards.append({"name": name, "samples": kept, "bytes": size, "mtime_ns": mtime})
    bar.close()
    if out.layout is not None:
        import msgspec

        fallback = out.layout.media_exts  # the Hugging Face feature type's, if any
        found = {c: exts.get(c) or fallback.get(c, "") for c in out.layout.media_columns}
        out.layout = msgspec.structs.replace(out.layout, media_exts=found)
    return out


def _index_file(out: ParquetIndex, pf, name: str, required, exts, read_path) -> int:
    """Index the row groups (record batches) of one open file into ``out``; rows kept."""
    stem = file_stem(name)
    meta = pf.metadata
    if out.layout is None:  # media extensions: sniffed below
        out.layout = schema_layout(pf.schema_arrow, arrow=out.arrow)
        out.user_columns = compile_columns(out.column_specs, pf.schema_arrow, name)
    layout = out.layout
    have = set(pf.schema_arrow.names)
    missing = [c for c in layout.columns if c not in have]
    kept = 0
    sid = len(out.shards)
    first = 0
    for rg in range(meta.num_row_groups):
        n = meta.row_group(rg).num_rows
        rows = f"rows {first}..{first + n - 1}"
        if missing:
            out.problems.append(
                (name, f"{stem}/{first}", f"row group {rg} ({rows}): no column {missing[0]!r}")
            )
            first += n
            continue
        try:
            table = pf.read_row_group(rg)
            if table.num_rows != n:
                raise ValueError(f"{table.num_rows} rows, the footer says {n}")
            idx, cols, bad = _scan_group(
                table, layout, required, exts, stem, first, read_path, out.user_columns
            )
        except Exception as e:  # noqa: BLE001 - pyarrow's errors: the row group is left out
            out.problems.append(
                (
                    name,
                    f"{stem}/{first}",
                    f"row group {rg} ({rows}) unreadable ({type(e).__name__}: {error_text(e)})",
                )
            )
            first += n
            continue
        out.problems.extend((name, k, r) for k, r in bad)
        out.add(
            {
                "shard_id.npy": np.full(len(idx), sid, np.int32),
                "parquet/row_group.npy": np.full(len(idx), rg, np.int32),
                "parquet/row_in_group.npy": idx.astype(np.int32),
                "parquet/row.npy": (idx + first).astype(np.int64),
                **(
                    {"parquet/batch_offset.npy": np.full(len(idx), pf.batch_offsets[rg], np.int64)}
                    if out.arrow
                    else {}
                ),
                **{f"columns/{k}.npy": v[idx] for k, v in cols.items()},
            },
        )
        kept += len(idx)
        first += n
    broken = getattr(pf, "broken", None)  # an Arrow stream cut short: the rest is left out
    if broken:
        out.problems.append((name, f"{stem}/{first}", f"rows from {first} on: {broken}"))
    return kept
