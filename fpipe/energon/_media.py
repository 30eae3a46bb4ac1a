"""Energon's media-metadata preparation of a folder of loose files
(``megatron.energon.media.filesystem_prepare.prepare_filesystem_dataset``).

The metadata of each media file below the folder is written where Energon writes it, the
``media_metadata`` table of ``<folder>/.nv-meta/index.sqlite`` (keyed by the file's path
relative to the folder), so the folder serves Energon and fpipe alike: a metadataset's
``aux: {name: filesystem://folder}`` store answers ``get_media_metadata(name)`` from it. The
table only saves work: without it, fpipe computes the same record from the file's bytes.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from fpipe.core.errors import ConfigError
from fpipe.decode.media_metadata import MediaFilterConfig, serialize_media_metadata

__all__ = ["prepare_dataset_media", "prepare_filesystem_dataset"]

_META = ".nv-meta"


def prepare_filesystem_dataset(
    root_path: Any,
    media_filter: MediaFilterConfig,
    *,
    progress: bool = False,
    workers: int = 16,
    index_sqlite_tmp_path: Any = None,
) -> int:
    """Write the media metadata of the files below ``root_path`` that ``media_filter``
    selects; returns the number of records written. ``progress``, ``workers`` and
    ``index_sqlite_tmp_path`` change no data (the files are read in one process).

    Raises:
      ConfigError: ``root_path`` is not a local folder.
      ValueError: no media file was found (as Energon).
    """
    del progress, workers, index_sqlite_tmp_path
    from fpipe.energon.epath import EPath

    root = EPath(root_path)
    if not root.is_local() or not root.is_dir():
        raise ConfigError(
            f"prepare_filesystem_dataset: {root} is not a local folder (fpipe prepares local "
            "folders; the metadata of other files is computed when a store is asked for it)"
        )
    base = root.local_path()
    names = []
    for folder, dirs, files in os.walk(base, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d != _META)
        for name in files:
            rel = Path(folder, name).relative_to(base).as_posix()
            if media_filter.should_consider_all() or media_filter.should_consider_media(name):
                names.append(rel)
    if not names:
        raise ValueError(f"No media files found to process in {root}")
    rows = []
    for rel in sorted(names):
        data = (base / rel).read_bytes()
        meta = media_filter.extract_metadata(data, filename=Path(rel).name)
        if meta is not None:
            kind, payload = serialize_media_metadata(meta)
            rows.append((rel, kind.value, payload))
    _write(base, rows)
    return len(rows)


def prepare_dataset_media(root: str | os.PathLike, media_filter: MediaFilterConfig) -> int:
    """Write the media metadata of the members of the prepared dataset at ``root`` that
    ``media_filter`` selects (``<sample key>.<member>``, as Energon names them), the
    ``media_filter=`` of ``BaseWebdatasetFactory.prepare_dataset``; returns the count."""
    from fpipe.storage.read.keys import member_key
    from fpipe.storage.read.layouts import open_dataset

    ds = open_dataset(root)
    rows = []
    for i in range(len(ds)):
        key = member_key(ds, i)
        for ext, data in sorted(ds.read(i).items()):
            name = f"{key}.{ext}"
            if ext.startswith("__") or not isinstance(data, bytes):
                continue
            if not (media_filter.should_consider_all() or media_filter.should_consider_media(name)):
                continue
            meta = media_filter.extract_metadata(data, filename=name)
            if meta is not None:
                kind, payload = serialize_media_metadata(meta)
                rows.append((name, kind.value, payload))
    _write(Path(root), rows)
    return len(rows)


def _write(base: Path, rows: list[tuple[str, str, str]]) -> None:
    """Rows ``(file name, type, JSON)`` into Energon's table, replacing rows of those names."""
    (base / _META).mkdir(exist_ok=True)
    db = sqlite3.connect(base / _META / "index.sqlite")
    try:
        with db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS media_metadata (entry_key TEXT PRIMARY KEY, "
                "metadata_type TEXT NOT NULL, metadata_json TEXT NOT NULL)"
            )
            db.executemany(
                "INSERT OR REPLACE INTO media_metadata (entry_key, metadata_type, metadata_json) "
                "VALUES (?, ?, ?)",
                rows,
            )
    finally:
        db.close()
