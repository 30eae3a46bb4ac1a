"""Read-only files by name for cookers (Energon's auxiliary ``FileStore``): a local folder, or
a prepared dataset whose files are named ``<sample key>.<member>``.

Names come from sample data, so they are not trusted: a folder's names are confined to it
(no absolute path, no ``..``, no symbolic link leading out). Reading is pure: the same name
gives the same bytes in every worker.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from fpipe.core.errors import ConfigError
from fpipe.storage.paths import contained, is_url

__all__ = ["DatasetFiles", "FolderFiles", "StoredMediaMetadata"]


class StoredMediaMetadata:
    """The ``media_metadata`` table of Energon's ``.nv-meta/index.sqlite`` under ``root``
    (written by ``energon prepare --media-metadata-by-...`` or Energon's
    ``prepare_filesystem_dataset``), opened read-only on first use; empty when absent."""

    def __init__(self, root: str):
        # a store on object storage: none read (the metadata is computed from the bytes)
        self._path = None if is_url(root) else Path(root) / ".nv-meta" / "index.sqlite"
        self._db: sqlite3.Connection | None = None
        self._has: bool | None = None

    def get(self, name: str) -> tuple[str, str] | None:
        """``(metadata_type, metadata_json)`` stored for file ``name``, or None."""
        if self._has is None:
            self._has = False
            if self._path is not None and self._path.is_file():
                # read-only, used by one thread at a time but not always the same one (a Ray
                # actor with max_concurrency=2 runs successive tasks on different threads)
                db = sqlite3.connect(
                    f"file:{self._path}?mode=ro", uri=True, check_same_thread=False
                )
                found = db.execute(
                    "SELECT name FROM sqlite_master WHERE type='table' AND name='media_metadata'"
                ).fetchone()
                self._db, self._has = db, found is not None
        if not self._has or self._db is None:
            return None
        row = self._db.execute(
            "SELECT metadata_type, metadata_json FROM media_metadata WHERE entry_key = ?", (name,)
        ).fetchone()
        return None if row is None else (str(row[0]), str(row[1]))


class FolderFiles:
    """The files under ``root``, read by relative name: a local folder, or a folder on object
    storage (a URL; each file one GET)."""

    def __init__(self, root: str):
        self.root = str(root)

    def read(self, name: str) -> tuple[bytes, str]:
        """``(bytes, path)`` of file ``name``; ConfigError for a name leaving the folder,
        KeyError for a missing file."""
        path = contained(
            self.root,
            name,
            where=f"auxiliary folder {self.root}",
            what="file name",
            folder="the store's folder",
        )
        try:
            if is_url(path):
                from fpipe.storage.read.remote import read_object

                return read_object(path), path
            return Path(path).read_bytes(), path
        except (FileNotFoundError, IsADirectoryError):
            raise KeyError(f"{self.root}: no file {name!r}") from None


class DatasetFiles:
    """The members of a prepared dataset, read as ``<sample key>.<member>`` (the sample's key
    inside its shard, as Energon names it, or fpipe's ``shard/key``)."""

    def __init__(self, root: str):
        self.root = str(root)
        self._ds = None
        self._keys: dict[str, int] | None = None

    def _open(self):
        if self._ds is None:
            from fpipe.storage.read.keys import member_key
            from fpipe.storage.read.layouts import open_dataset

            ds = open_dataset(self.root)
            keys: dict[str, int] = {}
            for i in range(len(ds)):
                keys.setdefault(member_key(ds, i), i)
                keys[ds.key(i)] = i
            self._ds, self._keys = ds, keys
        return self._ds, self._keys

    def read(self, name: str) -> tuple[bytes, int, str]:
        """``(bytes, sample index, member)`` of file ``name``; KeyError when no sample has the
        key or the sample has no such member."""
        if not isinstance(name, str) or "." not in name:
            raise ConfigError(f"{self.root}: file name {name!r} is not '<sample key>.<member>'")
        ds, keys = self._open()
        key, ext = name.split(".", 1)
        i = keys.get(key)
        if i is None:
            raise KeyError(f"{self.root}: no sample with key {key!r} (file {name!r})")
        raw = ds.read(i, frozenset([ext]))
        if ext not in raw:
            raise KeyError(f"{self.root}: sample {key!r} has no member {ext!r}")
        return raw[ext], i, ext

    def shard_name(self, index: int) -> str:
        """The name of the shard holding sample ``index`` ("" for a table's rows)."""
        ds, _ = self._open()
        if not ds.record.shards:
            return ""
        return ds.record.shards[int(ds.column("shard_id")[index])].name
