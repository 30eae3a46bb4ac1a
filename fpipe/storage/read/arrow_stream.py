"""Arrow IPC *stream* files (what ``datasets.Dataset.save_to_disk`` writes) read like Parquet.

A stream file is a schema message followed by record batches, with no footer to seek by. At
``fpipe prepare`` :class:`ArrowStreamFile` walks the messages once (headers only: the file is
memory-mapped, so batch bodies are not read) and records each record batch's byte offset; the
index keeps it per row (``parquet/batch_offset.npy``). A reader then memory-maps the file and
decodes only the batch a row lives in: :meth:`ArrowStreamFile.read_row_group` with that
offset reads one message, zero-copy. A record batch plays the part of a Parquet row group, so
:class:`~fpipe.storage.read.parquet.ParquetReader` and the Parquet prepare use this class where
they would use a :class:`pyarrow.parquet.ParquetFile`; the ``"parquet"`` layout with
``format: arrow`` says so. Local files only (a memory map).
"""

from __future__ import annotations

__all__ = ["ARROW_SUFFIX", "ArrowStreamFile"]

ARROW_SUFFIX = ".arrow"


class _BatchMeta:
    def __init__(self, num_rows: int):
        self.num_rows = num_rows


class _StreamMeta:
    """The part of :class:`pyarrow.parquet.FileMetaData` the Parquet prepare uses."""

    def __init__(self, rows: list[int]):
        self._rows = rows
        self.num_row_groups = len(rows)
        self.num_rows = sum(rows)

    def row_group(self, k: int) -> _BatchMeta:
        return _BatchMeta(self._rows[k])


class ArrowStreamFile:
    """A memory-mapped Arrow IPC stream file with the reading interface of a
    :class:`pyarrow.parquet.ParquetFile` (``schema_arrow``, ``metadata.num_row_groups``,
    ``metadata.row_group(k).num_rows``, ``read_row_group``), record batches as row groups.

    Args:
      path: a local file.
      scan: walk the messages now to find every batch's offset and row count (at prepare);
        a reader that knows a batch's offset from the index passes ``scan=False``.

    Raises whatever pyarrow raises for a file that is not an Arrow stream or is truncated
    (callers report it with the file and row).
    """

    def __init__(self, path: str, *, scan: bool = True):
        import pyarrow as pa
        import pyarrow.ipc as ipc

        self.path = path
        self._map = pa.memory_map(path)
        try:
            self._whole = self._map.read_buffer()  # the file as one buffer, not copied
            self.schema_arrow = ipc.open_stream(self._whole).schema
            self.batch_offsets: list[int] = []
            self._rows: list[int] = []
            #: why the scan stopped before the end of the file (truncated...), or None
            self.broken: str | None = None
            if scan:
                self._scan()
        except BaseException:
            self._map.close()
            raise

    def _scan(self) -> None:
        """Offsets and row counts of every record batch. A truncated or garbled message
        ends the scan: ``broken`` then says why and the batches before it are kept."""
        import pyarrow.ipc as ipc

        from fpipe.core.errors import error_text

        self._map.seek(0)
        messages = ipc.MessageReader.open_stream(self._map)
        while True:
            pos = self._map.tell()
            try:
                msg = messages.read_next_message()
            except StopIteration:
                break
            except Exception as e:  # noqa: BLE001 - pyarrow's errors: say where it broke
                self.broken = (
                    f"record batch {len(self._rows)} at byte {pos} unreadable "
                    f"({type(e).__name__}: {error_text(e)})"
                )
                break
            if msg.type == "dictionary batch":
                raise ValueError("dictionary-encoded columns are not supported")
            if msg.type != "record batch":
                continue
            self.batch_offsets.append(pos)
            self._rows.append(ipc.read_record_batch(msg, self.schema_arrow).num_rows)

    @property
    def metadata(self) -> _StreamMeta:
        """Row counts of the batches found by the scan."""
        return _StreamMeta(self._rows)

    def read_row_group(self, k: int, columns: list[str] | None = None, *, offset: int = -1):
        """Record batch ``k`` (the one at byte ``offset`` when given) as a validated
        :class:`pyarrow.Table` of ``columns`` (all when None)."""
        import pyarrow as pa
        import pyarrow.ipc as ipc

        if offset < 0:
            offset = self.batch_offsets[k]
        if not 0 <= offset < self._whole.size:
            raise ValueError(f"byte {offset} is past the end of the file ({self._whole.size})")
        msg = ipc.read_message(pa.BufferReader(self._whole.slice(offset)))  # no shared position
        if msg.type != "record batch":
            raise ValueError(f"byte {offset} holds a {msg.type} message, not a record batch")
        batch = ipc.read_record_batch(msg, self.schema_arrow)
        batch.validate(full=True)  # the map is the file: check offsets before reading values
        table = pa.Table.from_batches([batch])
        return table.select(columns) if columns is not None else table

    def close(self) -> None:
        """Unmap the file."""
        self._map.close()
