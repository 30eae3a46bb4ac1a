"""Reader of the ``"parquet"`` layout: rows of Parquet files, read in place by row group.

``fpipe prepare`` on a folder of Parquet files (:mod:`fpipe.storage.prepare._parquet`) writes
no copy of the data: each sample is a row, found by three arrays of ``.fpipe/``
(``shard_id.npy``: the file; ``parquet/row_group.npy`` and ``parquet/row_in_group.npy``: where
in it; ``parquet/row.npy``: its row number in the file, for its key), plus metadata columns.

Reads go by row group, the unit Parquet compresses and stores together: the first read of a row
decodes the columns it needs of the whole row group (pyarrow), kept in a small per-process
cache of decoded row groups (``row_group_cache`` of them, least recently used dropped first).
Reading the samples of a slice in order (``max_samples_per_sequence``) then decodes each row
group once; ``fpipe.get_train_dataset`` sizes the cache to the slices a shuffle window
interleaves. Only the columns asked for are read (``exts``: the field map's columns). A decoded
row group keeps pyarrow's buffers (:mod:`fpipe.storage.read.parquet_cells`): a row's bytes are
sliced out when the row is read, so a worker pays only for the rows its batches hold, and
:meth:`ParquetReader.read_many` looks a batch's rows up in the index at once. In local files,
uncompressed byte-array columns (images) are not decoded at all: their cells are located from
the page headers and sliced out of the memory-mapped file
(:mod:`fpipe.storage.read.parquet_mapped`).

Local files are read by pyarrow itself (``pyarrow.OSFile``: positional reads, no Python call
per read; one thread, as the loader's parallelism is its worker processes); on object storage
bytes come through the same file layer as tar shards, a
:class:`~fpipe.storage.read.remote.RemoteFiles` (ranged GETs of the footer and the column
chunks). pyarrow is imported on first read. Arrow stream files (a
Hugging Face ``save_to_disk`` folder, ``format: arrow`` in the layout) are read the same way
with record batches as row groups, memory-mapped
(:class:`~fpipe.storage.read.arrow_stream.ArrowStreamFile`, local files only).

A row's members are its columns, by column name: a ``{bytes, path}`` struct (Hugging Face
``Image`` / ``Audio``) gives its bytes (or, without bytes, the file ``path`` names, relative
to the dataset folder; a path leading out of it is refused unopened, see
:func:`~fpipe.storage.paths.contained`), text gives UTF-8, numbers and nested values JSON.
``decode_exts`` says how each is decoded, as for a table's columns. A file that is unreadable,
changed, or lacks a column is a :class:`~fpipe.core.errors.BadSampleError` naming the file and
the row's key.
"""

from __future__ import annotations

import contextlib
import os
from collections import OrderedDict
from typing import Any

import msgspec
import numpy as np

from fpipe.core.errors import BadSampleError
from fpipe.decode.limits import DecodeLimits
from fpipe.storage.paths import PathEscapeError, contained, is_url
from fpipe.storage.read.arrow_stream import ARROW_SUFFIX, ArrowStreamFile
from fpipe.storage.read.parquet_cells import column_cells
from fpipe.storage.read.parquet_mapped import MappedParquet
from fpipe.storage.read.parquet_open import PreadFile, open_parquet
from fpipe.storage.read.record import ArrayStore, IndexRecord, ParquetLayout

__all__ = [
    "DEFAULT_ROW_GROUP_CACHE",
    "PARQUET_SUFFIX",
    "ParquetReader",
    "file_stem",
    "media_file",
    "row_group_cache_for",
]

PARQUET_SUFFIX = ".parquet"
#: decoded row groups kept per process when the opener gives no size
DEFAULT_ROW_GROUP_CACHE = 4
#: the most row groups :func:`row_group_cache_for` keeps (memory: that many decoded groups)
MAX_ROW_GROUP_CACHE = 64


def row_group_cache_for(
    shuffle_buffer_size: int | None, max_samples_per_sequence: int | None
) -> int:
    """Decoded row groups a process keeps for a slice shuffle: a shuffle window of
    ``shuffle_buffer_size`` samples interleaves about ``buffer / max_samples_per_sequence + 1``
    slices, each read in order (so one row group at a time, two where a slice crosses a
    row-group boundary). Between 2 and :data:`MAX_ROW_GROUP_CACHE`.

    >>> row_group_cache_for(100, 100), row_group_cache_for(1000, 10), row_group_cache_for(None, 5)
    (3, 64, 2)
    """
    k = max(1, max_samples_per_sequence or 1)
    window = max(0, shuffle_buffer_size or 0)
    return max(2, min(MAX_ROW_GROUP_CACHE, -(-window // k) + 2 if window else 2))


_json = msgspec.json.Encoder()


def file_stem(name: str) -> str:
    """A Parquet (or Arrow) file's name without ``.parquet`` (``.arrow``): the first part of
    its rows' keys."""
    for suffix in (PARQUET_SUFFIX, ARROW_SUFFIX):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


class ParquetReader:
    """Rows of the Parquet files of a prepared dataset (see the module docstring).

    Args:
      path: the dataset folder (or URL); file names in ``record.shards`` are relative to it.
      files: the file layer (``pread``), local or remote (only a remote one is read through:
        local files are opened by pyarrow).
      row_group_cache: decoded row groups kept in this process.
    """

    def __init__(
        self,
        path: str,
        record: IndexRecord,
        arrays: ArrayStore,
        files: Any,
        row_group_cache: int | None = None,
    ):
        assert record.parquet is not None
        self.path = path
        self._record = record
        self._layout: ParquetLayout = record.parquet
        self._array = arrays
        self._files = files
        self._cache_size = max(1, int(row_group_cache or DEFAULT_ROW_GROUP_CACHE))
        self._stems = [file_stem(s.name) for s in record.shards]
        self._kinds = _column_kinds(self._layout)
        self._decode_exts = {
            c: {"string": "txt", "number": "json", "json": "json"}.get(k, "")
            or self._layout.media_exts.get(c, "")
            for c, k in self._kinds.items()
        }
        self._decode_exts = {c: e for c, e in self._decode_exts.items() if e}
        self._arrow = self._layout.format == "arrow"
        self._pid = os.getpid()
        #: file id -> pq.ParquetFile (or ArrowStreamFile)
        self._opened: OrderedDict[int, Any] = OrderedDict()
        #: file id -> the local Parquet file mapped (its byte-array cells read from there)
        self._mapped: dict[int, MappedParquet] = {}
        #: (file id, row group) -> {column: its cells}; a null cell reads as ``None``
        self._groups: OrderedDict[tuple[int, int], dict[str, Any]] = OrderedDict()
        self._wanted: dict[frozenset[str] | None, list[str]] = {}  #: exts -> columns
        self.decoded_row_groups = 0  #: row groups decoded by this process (a statistic)

    def _where(self, i: int) -> tuple[int, int, int]:
        return (
            int(self._array("shard_id.npy")[i]),
            int(self._array("parquet/row_group.npy")[i]),
            int(self._array("parquet/row_in_group.npy")[i]),
        )

    def key(self, i: int) -> str:
        """``"<file without .parquet>/<row number in the file>"``."""
        sid = int(self._array("shard_id.npy")[i])
        return f"{self._stems[sid]}/{int(self._array('parquet/row.npy')[i])}"

    def file_path(self, sid: int) -> str:
        """The path (or URL) of file ``sid``."""
        return os.path.join(self.path, self._record.shards[sid].name)

    def _file(self, sid: int):
        """The open :class:`pyarrow.parquet.ParquetFile` of file ``sid`` (a few kept open)."""
        if self._pid != os.getpid():  # forked: start afresh (the file layer does too)
            self._opened.clear()
            self._mapped.clear()
            self._pid = os.getpid()
        pf = self._opened.get(sid)
        if pf is not None:
            self._opened.move_to_end(sid)
            return pf
        path = self.file_path(sid)
        if self._arrow:  # memory-mapped; batches found by their offsets in the index
            pf = ArrowStreamFile(path, scan=False)
            self._opened[sid] = pf
            while len(self._opened) > 8:
                self._opened.popitem(last=False)[1].close()
            return pf
        if hasattr(self._files, "size"):  # object storage: ranged GETs through the file layer
            size = self._record.shards[sid].bytes
            if size < 0:  # an object whose size the index lacks: ask the store
                size = self._files.size(path)
            # a row group's column chunks fetched together (one GET where they are close)
            pf = open_parquet(PreadFile(self._files, path, size), pre_buffer=True)
        else:  # a local file: pyarrow's own positional reads (no Python call per read)
            import pyarrow as pa

            pf = open_parquet(pa.OSFile(path), pre_buffer=False)
            # plain byte-array columns (images) are sliced out of the mapped file instead;
            # a file that cannot be mapped is read by pyarrow alone
            with contextlib.suppress(OSError, ValueError):
                self._mapped[sid] = MappedParquet(path)
        self._opened[sid] = pf
        while len(self._opened) > 8:
            gone, old = self._opened.popitem(last=False)
            old.close()
            self._mapped.pop(gone, None)  # unmapped once no cached row group uses it
        return pf

    def _group(self, sid: int, rg: int, columns: list[str], key: str, i: int) -> dict[str, Any]:
        """Decoded ``columns`` of row group ``rg`` of file ``sid`` (from the cache, or read)."""
        entry = self._groups.get((sid, rg))
        if entry is not None:
            self._groups.move_to_end((sid, rg))
            todo = [c for c in columns if c not in entry]
            if not todo:
                return entry
        else:
            entry, todo = {}, list(columns)
        path = self.file_path(sid)
        try:
            pf = self._file(sid)
            names = set(pf.schema_arrow.names)
            missing = [c for c in todo if c not in names]
            if missing:
                raise BadSampleError(
                    path,
                    key,
                    f"row group {rg}: no column {missing[0]!r} (the file changed "
                    f"since it was indexed; re-run `fpipe prepare {self.path}`)",
                )
            if self._arrow:
                offset = int(self._array("parquet/batch_offset.npy")[i])
                table = pf.read_row_group(rg, columns=todo, offset=offset)
            elif rg >= pf.metadata.num_row_groups:
                raise BadSampleError(
                    path,
                    key,
                    f"no row group {rg} (the file has {pf.metadata.num_row_groups}); "
                    f"re-run `fpipe prepare {self.path}`",
                )
            else:
                mapped = self._mapped.get(sid)
                if mapped is not None:  # the columns served from the mapped file
                    got = mapped.cells(pf, rg, todo, self._kinds)
                    entry.update(got)
                    todo = [c for c in todo if c not in got]
                # one thread: the loader's parallelism is its worker processes
                table = pf.read_row_group(rg, columns=todo, use_threads=False) if todo else None
        except BadSampleError:
            raise
        except Exception as e:  # noqa: BLE001 - pyarrow's errors, OSError: the file is bad
            from fpipe.core.errors import error_text

            what = "record batch" if self._arrow else "row group"
            raise BadSampleError(
                path,
                key,
                f"{what} {rg}: unreadable {'Arrow' if self._arrow else 'Parquet'} "
                f"({type(e).__name__}: {error_text(e)})",
            ) from None
        for c in todo:
            entry[c] = column_cells(table.column(c), self._kinds[c])
        self.decoded_row_groups += 1
        if (sid, rg) not in self._groups:
            self._groups[(sid, rg)] = entry
            while len(self._groups) > self._cache_size:
                self._groups.popitem(last=False)
        return entry

    def _columns(self, exts: frozenset[str] | None) -> list[str]:
        """The columns a read with ``exts`` gives (remembered per ``exts``)."""
        cols = self._wanted.get(exts)
        if cols is None:
            every = list(self._layout.columns)
            cols = every if exts is None else [c for c in every if c in exts] or every
            self._wanted[exts] = cols
        return cols

    def read(
        self, i: int, exts: frozenset[str] | None = None, limits: DecodeLimits | None = None
    ) -> dict[str, bytes]:
        """The cells of row ``i`` as member bytes by column name (only the columns in
        ``exts`` when any is: a field map names columns); null cells are left out."""
        sid, rg, row = self._where(i)
        num = int(self._array("parquet/row.npy")[i])
        return self._read_at(i, sid, rg, row, num, self._columns(exts))[1]

    def read_many(
        self, indices, exts: frozenset[str] | None = None, limits: DecodeLimits | None = None
    ) -> list[tuple]:
        """``(key, members)`` of each row of ``indices`` (in range), as :meth:`key` and
        :meth:`read` give them, the index looked up for all at once; a row whose read fails
        holds the exception instead of its members (and ``"#<index>"`` as its key), for the
        caller to raise in its turn."""
        idx = np.asarray(indices, dtype=np.int64)
        where = zip(
            idx.tolist(),
            self._array("shard_id.npy")[idx].tolist(),
            self._array("parquet/row_group.npy")[idx].tolist(),
            self._array("parquet/row_in_group.npy")[idx].tolist(),
            self._array("parquet/row.npy")[idx].tolist(),
        )
        columns = self._columns(exts)
        out: list[tuple] = []
        for i, sid, rg, row, num in where:
            try:
                out.append(self._read_at(i, sid, rg, row, num, columns))
            except Exception as e:  # noqa: BLE001 - raised by the caller, in this row's turn
                out.append((f"#{i}", e))
        return out

    def _read_at(
        self, i: int, sid: int, rg: int, row: int, num: int, columns: list[str]
    ) -> tuple[str, dict[str, bytes]]:
        """``(key, members)`` of row ``i``: row ``row`` of row group ``rg`` of file ``sid``,
        row ``num`` of that file."""
        if not 0 <= sid < len(self._record.shards):
            raise BadSampleError(self.path, f"#{i}", f"the index is corrupt (file id {sid})")
        key = f"{self._stems[sid]}/{num}"
        group = self._group(sid, rg, columns, key, i)
        out: dict[str, bytes] = {}
        for col in columns:
            cells = group[col]
            if row >= len(cells):
                raise BadSampleError(
                    self.file_path(sid),
                    key,
                    f"row group {rg} holds {len(cells)} rows, the "
                    f"index wants row {row}; re-run `fpipe prepare {self.path}`",
                )
            v = cells[row]
            if v is None:
                continue
            kind = self._kinds[col]
            if kind == "media":
                out[col] = self._media(col, v, sid, key)
            else:  # binary and string cells are bytes already
                out[col] = v if kind in ("binary", "string") else _json.encode(v)
        return key, out

    def _media(self, col: str, cell: tuple, sid: int, key: str) -> bytes:
        """The bytes of a ``{bytes, path}`` cell: its bytes, else the file its path names,
        which must lie inside the dataset folder (never opened otherwise)."""
        data, rel = cell
        if data is not None:
            return bytes(data)
        if rel is None:
            raise BadSampleError(
                self.file_path(sid), key, f"column {col!r}: the struct has neither bytes nor path"
            )
        try:
            fpath = media_file(self.path, rel, col)
            with open(fpath, "rb") as f:
                return f.read()
        except PathEscapeError as e:
            raise BadSampleError(self.file_path(sid), key, e.reason) from None
        except OSError as e:
            raise BadSampleError(
                self.file_path(sid),
                key,
                f"column {col!r}: no bytes, and its path {rel!r} cannot be read ({e})",
            ) from None

    def decode_exts(self, i: int) -> dict[str, str]:
        """How each column is decoded when a sample is cooked: media columns as their stored
        extension (``jpg``, ``wav``), text as ``txt``, numbers and nested values as ``json``;
        binary columns by their own name."""
        return self._decode_exts

    def av_names(self, field: str, i: int) -> tuple[str, ...]:
        """The key :meth:`read` gives media column ``field`` under: the column itself."""
        return (field,) if field in self._layout.media_columns else ()


def media_file(root: str, rel: str, col: str) -> str:
    """The local file a media struct's ``path`` names: inside the dataset folder ``root``
    (:func:`~fpipe.storage.paths.contained`), and never under a URL (media paths are read from
    local datasets only). Raises :class:`~fpipe.storage.paths.PathEscapeError`."""
    what = f"column {col!r}: path"
    if is_url(root):
        raise PathEscapeError(
            f"{what} {rel!r}: paths of media files are read from local datasets only", rel
        )
    return contained(root, rel, what=what)


def _column_kinds(layout: ParquetLayout) -> dict[str, str]:
    """Column -> ``media`` | ``string`` | ``binary`` | ``number`` | ``json``."""
    kinds = dict.fromkeys(layout.columns, "json")
    kinds.update(dict.fromkeys(layout.numeric, "number"))
    kinds.update(dict.fromkeys(layout.binary, "binary"))
    kinds.update(dict.fromkeys(layout.strings, "string"))
    kinds.update(dict.fromkeys(layout.media_columns, "media"))
    return kinds
