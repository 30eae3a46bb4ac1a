"""``fpipe prepare TABLE``: check a JSONL/CSV table's rows and write its ``"table"`` index.

Every media file is checked (present, image header readable, audio/video probed when
``probe_av``), and every field of the field map must have a value; a row that fails is left
out and reported. The kept rows are stored as the
arrays of :func:`fpipe.storage.read.tables.table_arrays` plus ``<media column>.bytes`` (and
``.width`` / ``.height`` for images, the :mod:`~fpipe.storage.read.av_meta` statistics for
audio/video) and the user's columns (``--column``, ``--extra-columns``: :mod:`._table_columns`)
under ``<table folder>/.fpipe``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fpipe.core.errors import BadSampleError
from fpipe.decode.extensions import ext_kind, strip_gz
from fpipe.samples.field_spec import ColumnSpec, FieldSpec, parse_field_spec
from fpipe.storage.config.dataset_yaml import DatasetConfig, dump_yaml
from fpipe.storage.config.yaml_record import write_yaml_record
from fpipe.storage.prepare._image_header import HEADER_PREFIX, image_size
from fpipe.storage.prepare._options import PrepareOptions, PrepareReport, Problem
from fpipe.storage.prepare._source import _dataset_config
from fpipe.storage.prepare._table_columns import check_table_columns, row_columns, user_column
from fpipe.storage.prepare.scan import load_function
from fpipe.storage.read import av_meta
from fpipe.storage.read.layouts import open_dataset
from fpipe.storage.read.record import ArrayStore
from fpipe.storage.read.tables import TableReader, read_table, suffix, table_arrays, table_record
from fpipe.storage.read.tar.index import INDEX_DIR, write_folder

__all__ = ["check_row", "missing_field", "table_index", "write_table_index"]


def check_row(reader: TableReader, i: int, probe_av: bool) -> tuple[dict, dict, dict]:
    """(size/image columns, audio/video statistics, keyframes by column) of row ``i``.

    Raises:
      BadSampleError, ValueError, OSError: the row must be left out.
    """
    key = reader.key(i)
    extra: dict[str, int] = {}
    av: dict[str, Any] = {}
    keyframes: dict[str, np.ndarray] = {}
    for col in reader.media_columns:
        v = reader.value(col, i)
        if v is None:
            raise BadSampleError(reader.table_path, key, f"column {col!r} is empty")
        fpath = reader.media_path(str(v), col, key)  # refused unopened if it leads out
        kind = ext_kind(suffix(str(v)))
        on_disk = os.path.isfile(fpath)
        data: Any = fpath if on_disk else reader.media_bytes(col, str(v), key)
        extra[f"{col}.bytes"] = os.path.getsize(fpath) if on_disk else len(data)
        if kind == "av" and probe_av:  # stream metadata and keyframes (demux only)
            stats, keyframes[col] = av_meta.probe_stats(data, col, path=fpath, key=key)
            av.update(stats)
        if kind == "image":
            if on_disk:
                with open(fpath, "rb") as f:
                    head = f.read(HEADER_PREFIX)
            else:
                head = data
            try:
                w, h = image_size(head)
            except ValueError:
                with open(fpath, "rb") as f:  # PIL may need more than the prefix
                    w, h = image_size(f.read())
            extra[f"{col}.width"], extra[f"{col}.height"] = w, h
    return extra, av, keyframes


def _resolves(row: dict[str, Any], media: tuple[str, ...], alt: FieldSpec) -> bool:
    """Whether source ``alt`` of a field map has a value in ``row`` (a table row as parsed):
    a non-empty cell (and ``alt.path`` leads somewhere in a JSON cell), or a media column
    whose file has extension ``alt.ext`` (read under that name when no column has it)."""
    if alt.ext in row:
        value = row[alt.ext]
        for part in alt.path:
            if isinstance(value, dict):
                value = value.get(part)
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                return False
        return value is not None
    return any(isinstance(row.get(c), str) and strip_gz(suffix(row[c])) == alt.ext for c in media)


def missing_field(
    row: dict[str, Any], media: tuple[str, ...], fields: dict[str, Any]
) -> str | None:
    """The reason a table row is left out for a field map (``None``: every field found), as
    for tar samples: ``missing field 'caption' (caption)``."""
    for name, spec in fields.items():
        if not any(_resolves(row, media, alt) for alt in parse_field_spec(spec)):
            shown = spec if isinstance(spec, str) else ",".join(spec)
            return f"missing field {name!r} ({shown})"
    return None


def _number_column(name: str, vals: list[Any]) -> np.ndarray:
    if av_meta.is_float_column(name):
        return np.asarray([math.nan if v is None else v for v in vals], np.float64)
    return np.asarray([-1 if v is None else v for v in vals], np.int64)


def table_index(
    path: str | Path,
    *,
    root: str | Path | None,
    media_columns: list[str] | None,
    aux: str | Path | None,
    probe_av: bool = True,
    fields: dict[str, Any] | None = None,
    columns: Sequence[ColumnSpec] = (),
    extra_columns_fn: str | None = None,
):
    """Check a table's rows and build its prepared arrays.

    ``fields``: the field map; a row where a field has no value is left out, as a tar sample
    is (every mapped field is required). ``columns``, ``extra_columns_fn``: the user's
    columns (:mod:`._table_columns`), refused before a row is checked when they cannot give
    a number.

    Returns (arrays by relative file name, index info, problems as (path, key, reason)).
    """
    record, mem = table_record(path, root=root, media_columns=media_columns, aux=aux)
    t = record.table
    assert t is not None
    check_table_columns(columns, t, str(path))
    extra_fn = load_function(extra_columns_fn) if extra_columns_fn else None
    reader = TableReader(record, t.root, t.aux, ArrayStore(make=mem.__getitem__), open_dataset)
    keep: list[int] = []
    rows_extra: list[dict[str, Any]] = []
    rows_user: list[dict[str, Any]] = []
    keyframes = av_meta.KeyframeBuilder()
    problems: list[tuple[str, str, str]] = []
    names, rows = read_table(path)
    for i in range(record.num_samples):
        why = missing_field(rows[i], t.media_columns, fields) if fields else None
        if why is not None:
            problems.append((str(path), reader.key(i), why))
            continue
        try:
            extra, av, kf = check_row(reader, i, probe_av)
            user = row_columns(reader, t, i, columns, extra_fn)
        except BadSampleError as e:
            problems.append((e.path, e.key, e.reason))
            continue
        except (ValueError, OSError) as e:
            problems.append((str(path), reader.key(i), str(e)))
            continue
        keep.append(i)
        rows_extra.append({**extra, **av})
        rows_user.append(user)
        keyframes.add(kf)
    arrays, dtypes, layout = table_arrays(names, [rows[i] for i in keep], t.media_columns)
    arrays["rows.npy"] = np.asarray(keep, np.int64)
    for name in dict.fromkeys(k for r in rows_extra for k in r):
        arr = _number_column(name, [r.get(name) for r in rows_extra])
        arrays[f"columns/{name}.npy"] = arr
        dtypes[name] = str(arr.dtype)
    for name in dict.fromkeys(k for r in rows_user for k in r):  # as Parquet's, they win
        arr = user_column([r.get(name) for r in rows_user])
        arrays[f"columns/{name}.npy"] = arr
        dtypes[name] = str(arr.dtype)
    kf = keyframes.build()
    arrays.update(av_meta.keyframe_files(kf))
    info: dict[str, Any] = {
        "kind": "table",
        "num_samples": len(keep),
        "shards": [],
        "columns": dtypes,
        "table": {
            "columns": list(layout.columns),
            "media_columns": list(layout.media_columns),
            "strings": list(layout.strings),
            "nullable": list(layout.nullable),
            "json_columns": list(layout.json_columns),
        },
    }
    if kf:  # audio/video media columns (the file's extension is added per row on load)
        info["av"] = {"fields": {c: [c] for c in kf}}
    return arrays, info, problems


def write_table_index(
    path: Path,
    *,
    root,
    media_columns,
    aux,
    config: DatasetConfig,
    probe_av: bool,
    columns: Sequence[ColumnSpec] = (),
    extra_columns_fn: str | None = None,
) -> tuple[Path, dict[str, Any], list]:
    """Index table ``path`` into ``<table folder>/.fpipe``; returns (folder, info, problems)."""
    folder = path.parent
    arrays, info, problems = table_index(
        path,
        root=root,
        media_columns=None if media_columns is None else list(media_columns),
        aux=aux,
        probe_av=probe_av,
        fields=dict(config.field_map),
        columns=columns,
        extra_columns_fn=extra_columns_fn,
    )
    info["table"]["path"] = path.name
    info["table"]["root"] = os.path.relpath(root if root is not None else folder, folder)
    info["table"]["aux"] = None if aux is None else os.path.relpath(aux, folder)
    rel = [(os.path.relpath(a, folder) if os.path.isabs(a) else a, k, r) for a, k, r in problems]
    out = folder / INDEX_DIR
    write_folder(out, arrays, info, rel)
    dump_yaml(out / "dataset.yaml", config)
    write_yaml_record(out)  # its YAML files parsed, for a fast open
    return out, info, rel


def _prepare_table(p: Path, opts: PrepareOptions, t0: float) -> PrepareReport:
    config = _dataset_config(DatasetConfig(), opts)
    out, info, problems = write_table_index(
        p,
        root=opts.root,
        media_columns=opts.media_columns,
        aux=opts.aux,
        config=config,
        probe_av=opts.probe_av,
        columns=opts.columns,
        extra_columns_fn=opts.extra_columns_fn,
    )
    return PrepareReport(
        path=str(p),
        index_dir=str(out),
        kind="table",
        source="table",
        num_samples=int(info["num_samples"]),
        num_shards=0,
        problems=tuple(Problem(*q) for q in problems),
        columns=tuple(info["columns"]),
        members=tuple(info["table"]["media_columns"]),
        splits={},
        elapsed_s=time.perf_counter() - t0,
        sample_type=config.sample_type,
        field_map=dict(config.field_map),
    )
