"""The index record: what one dataset holds, whatever its layout on disk.

Every dataset fpipe opens is described by one :class:`IndexRecord`: its layout (fpipe tar
offsets, Energon's ``.tar.idx``, or a table of media files), its shards and sample counts,
member extensions, metadata columns, column aliases and probed audio/video fields. The record
is read here and only here:

- :func:`read_record` parses ``DIR/.fpipe/info.yaml`` (written by ``fpipe prepare``);
- :func:`fpipe.storage.read.energon_meta.energon_record` builds one from Energon's ``.nv-meta``;
- :func:`fpipe.storage.read.table_files.table_record` builds one from a JSONL/CSV table opened
  as is;
- Parquet files prepared by ``fpipe prepare`` are the ``"parquet"`` layout of ``info.yaml``
  (:mod:`fpipe.storage.read.parquet`).

:class:`fpipe.storage.read.dataset.Dataset` is the one dataset class over a record, its arrays
(:class:`ArrayStore`) and a reader for its layout. Checks of a prepared index against the
files it describes belong in :func:`read_record`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import msgspec
import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.storage.read.tar.compact import CompactInfo
from fpipe.storage.read.tar.index import load_array, read_info
from fpipe.storage.read.tar.shard_table import ShardEntry, ShardTable

__all__ = [
    "ArrayStore",
    "IndexRecord",
    "Layout",
    "ParquetLayout",
    "ShardEntry",
    "TableLayout",
    "read_record",
]

#: ``"tar"``: fpipe's member offsets in ``.fpipe/``; ``"energon"``: Energon's ``.tar.idx``
#: sample offsets, no fpipe index; ``"table"``: rows of a JSONL/CSV table naming media files;
#: ``"parquet"``: rows of Parquet files (file, row group, row), read in place; ``"megatron"``:
#: documents (or sequences) of Megatron's ``prefix.idx`` / ``prefix.bin`` corpora, read in place.
Layout = Literal["tar", "energon", "table", "parquet", "megatron"]


class TableLayout(msgspec.Struct, frozen=True, kw_only=True):
    """Where a table's rows and media are."""

    path: str  #: the table file (relative to the dataset folder once prepared)
    root: str  #: folder media paths are relative to
    aux: str | None = None  #: prepared tar dataset holding media members, or None
    columns: tuple[str, ...] = ()  #: every column of the table, in table order
    media_columns: tuple[str, ...] = ()  #: columns naming media files
    strings: tuple[str, ...] = ()  #: columns stored as strings (the others are numeric)
    nullable: tuple[str, ...] = ()  #: string columns with empty cells
    #: string columns whose cells are JSON objects or lists (decoded as JSON when cooked)
    json_columns: tuple[str, ...] = ()


class ParquetLayout(msgspec.Struct, frozen=True, kw_only=True):
    """How the columns of a ``"parquet"`` dataset are read (every file has these columns)."""

    #: ``"parquet"``: Parquet files; ``"arrow"``: Arrow IPC stream files (``save_to_disk``),
    #: record batches in the part of row groups (:mod:`fpipe.storage.read.arrow_stream`)
    format: str = "parquet"
    columns: tuple[str, ...] = ()  #: every top-level column, in schema order
    #: ``{bytes, path}`` struct columns (Hugging Face ``Image`` / ``Audio`` / ``Video``)
    media_columns: tuple[str, ...] = ()
    #: media column -> the extension its bytes are decoded as (``jpg``, ``png``, ``wav``...)
    media_exts: dict[str, str] = msgspec.field(default_factory=dict)
    strings: tuple[str, ...] = ()  #: string columns (decoded as text)
    binary: tuple[str, ...] = ()  #: binary columns (bytes, decoded by the column's name)
    numeric: tuple[str, ...] = ()  #: integer, float and boolean columns (decoded as JSON)
    #: lists, structs, maps and other types: re-encoded as JSON, decoded as JSON


class IndexRecord(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a dataset's index says, independent of the layout."""

    layout: Layout  #: how samples are found (see :data:`Layout`)
    num_samples: int  #: samples in the dataset
    shards: tuple[ShardEntry, ...] = ()  #: tar shards in shard-id order (empty for tables)
    members: tuple[str, ...] = ()  #: member extensions, sorted (``"tar"`` layout)
    #: rows of the member table (``"tar"`` layout, index format 2); None: an index of format
    #: 1, with two arrays per extension (see :mod:`fpipe.storage.read.members`)
    num_members: int | None = None
    #: the compact per-sample layout (index format 4, :mod:`.tar.compact`); None: flat arrays
    compact: CompactInfo | None = None
    columns: dict[str, str] = msgspec.field(default_factory=dict)  #: column name -> dtype
    aliases: dict[str, str] = msgspec.field(default_factory=dict)  #: alias -> column name
    #: audio/video field -> member extensions (or media column) it was probed from
    av_fields: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)
    table: TableLayout | None = None  #: rows and media of a ``"table"`` layout
    parquet: ParquetLayout | None = None  #: columns of a ``"parquet"`` layout
    problems: int = 0  #: samples left out when the index was written
    source: str = ""  #: what was indexed: webdataset, energon, table, parquet, arrow

    @property
    def shard_names(self) -> list[str]:
        """Shard names in shard-id order (O(shards) strings: a format 3 index builds them
        here only)."""
        return [s.name for s in self.shards]

    @property
    def shard_arrays(self) -> bool:
        """Whether the shard list is a lazily read :class:`~.tar.shard_table.ShardTable`
        (index format 3): per-shard checks then run when a shard is first read."""
        return isinstance(self.shards, ShardTable)

    def shard_starts(self) -> np.ndarray:
        """int64 ``(shards + 1,)``: index of the first sample of each shard, then the total."""
        if isinstance(self.shards, ShardTable):
            return self.shards.starts()
        counts = [s.samples for s in self.shards]
        return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)


def _record_from_info(
    info: dict[str, Any], where: str, index_dir: str | Path | None = None
) -> IndexRecord:
    kind = info.get("kind", "webdataset")
    if kind not in ("webdataset", "table", "parquet"):
        raise ConfigError(f"{where}: unknown index kind {kind!r}")
    av = (info.get("av") or {}).get("fields") or {}
    flat = kind == "webdataset" and info.get("version") != 1
    obj = {
        "layout": {"webdataset": "tar"}.get(kind, kind),
        "num_samples": info.get("num_samples"),
        "shards": [] if "num_shards" in info else info.get("shards") or [],
        "members": info.get("members") or [],
        "num_members": info.get("num_members") if flat else None,
        "compact": info.get("compact") if flat and info.get("version", 0) >= 4 else None,
        "columns": info.get("columns") or {},
        "aliases": info.get("aliases") or {},
        "av_fields": av,
        "table": info.get("table"),
        "parquet": info.get("parquet"),
        "problems": info.get("problems") or 0,
        "source": info.get("source") or kind,
    }
    if flat and not isinstance(obj["num_members"], int):
        raise ConfigError(f"{where}: bad index info: num_members must be an integer")
    try:
        record = msgspec.convert(obj, IndexRecord, strict=False)
    except msgspec.ValidationError as e:
        raise ConfigError(f"{where}: bad index info: {e}") from None
    count = info.get("num_shards")
    if count is None:
        return record
    if index_dir is None or isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ConfigError(f"{where}: bad index info: num_shards must be an integer >= 0")
    # not validated by msgspec: a Sequence of ShardEntry read from shards/*.npy on demand
    return msgspec.structs.replace(record, shards=ShardTable(index_dir, count))


def read_record(index_dir: str | Path, data: bytes | None = None) -> IndexRecord:
    """Read the index record of a prepared dataset from ``index_dir/info.yaml`` (``data``:
    its bytes, read already).

    Raises:
      ConfigError: the file is missing, not an fpipe index, newer than this fpipe, or
        malformed (the message names the file).
    """
    info = read_info(index_dir, data)
    return _record_from_info(info, str(Path(index_dir) / "info.yaml"), index_dir)


class ArrayStore:
    """Arrays of a dataset by relative name (``"shard_id.npy"``, ``"columns/bytes.npy"``).

    Read from an index folder (memory-mapped, loaded on first use) or computed in memory by
    ``make(name)`` for layouts without an fpipe index. Values are cached per process.
    """

    def __init__(
        self,
        folder: str | Path | None = None,
        make: Callable[[str], np.ndarray] | None = None,
        check: Callable[[str, np.ndarray], None] | None = None,
    ):
        self.folder = None if folder is None else Path(folder)
        self._make = make
        self._check = check  #: run on each array loaded from ``folder`` (see storage.validate)
        self._cache: dict[str, np.ndarray] = {}
        self._mapped: dict[str, np.ndarray] = {}  #: mapped already, not yet checked

    def take_mapped(self, mapped: dict[str, np.ndarray]) -> None:
        """Arrays of the folder mapped already by name (what opening the dataset mapped to
        check their headers): each is used in place of mapping its file again when first
        asked for, and checked then as an array loaded here is."""
        self._mapped.update(mapped)

    def __call__(self, name: str) -> np.ndarray:
        """The array called ``name`` (a plain ndarray view of the map: fast scalar indexing).
        From an index folder, a missing or unreadable file is a :class:`ConfigError` naming it
        (the index changed since the dataset was opened, or is corrupt)."""
        arr = self.optional(name)
        if arr is None:
            path = self.folder / name  # type: ignore[operator]  # None only from a folder
            raise ConfigError(f"{path}: index array missing; re-run `fpipe prepare`")
        return arr

    def optional(self, name: str) -> np.ndarray | None:
        """:meth:`__call__`, or None where an index folder has no such file (arrays that
        older indexes lack)."""
        arr = self._cache.get(name)
        if arr is None:
            if self.folder is not None:
                path = self.folder / name
                try:
                    arr = self._mapped.pop(name, None)
                    if arr is None:
                        arr = load_array(path)
                    arr = arr.view(np.ndarray)
                except FileNotFoundError:
                    return None
                except (OSError, ValueError) as e:
                    raise ConfigError(
                        f"{path}: unreadable index array ({e}); re-run `fpipe prepare`"
                    ) from None
                if self._check is not None:
                    self._check(name, arr)
            elif self._make is not None:
                arr = self._make(name)
            else:
                raise KeyError(name)
            self._cache[name] = arr
        return arr

    def __len__(self) -> int:
        """Arrays loaded so far in this process."""
        return len(self._cache)
