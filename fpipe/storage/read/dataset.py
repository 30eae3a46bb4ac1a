"""The one dataset class: :class:`Dataset` over an index record, its arrays and a reader.

:func:`~fpipe.storage.read.layouts.open_dataset` opens any dataset fpipe reads, one layout each (see
:mod:`fpipe.storage.read.record`):

=============  ==========================================  =====================================
layout         index record from                           reader
=============  ==========================================  =====================================
``"tar"``      ``DIR/.fpipe/info.yaml`` (``fpipe prepare``)  :class:`~.tar_reader.TarReader`
``"energon"``  ``DIR/.nv-meta`` (``energon prepare``)        :class:`~.energon.EnergonReader`
``"table"``    ``.fpipe/info.yaml`` of a prepared table, or  :class:`~.tables.TableReader`
               the ``.jsonl`` / ``.csv`` file itself
``"parquet"``  ``DIR/.fpipe/info.yaml`` (Parquet files)      :class:`~.parquet.ParquetReader`
=============  ==========================================  =====================================

and ``"megatron"``: ``prefix.idx`` / ``prefix.bin`` (Megatron's indexed corpora, no fpipe index),
read by :class:`~.megatron_dataset.MegatronReader`.

Everything but the bytes of a sample (length, columns, aliases, splits, keys, audio/video
metadata) is answered by :class:`Dataset` from the record and the arrays; the reader turns a
sample index into its key and its raw members. Objects are cheap to build, hold no open file
across ``fork`` or pickling (only the path and open arguments are pickled), and never decide
order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.decode.limits import DecodeLimits
from fpipe.storage.config.dataset_yaml import (
    DatasetConfig,
    SplitConfig,
    is_config_file_name,
    load_dataset_config,
    load_split_config,
)
from fpipe.storage.paths import contained, is_url
from fpipe.storage.read._split_indices import as_indices, split_samples
from fpipe.storage.read.av_meta import AVIndex
from fpipe.storage.read.reader import FileCache, read_each
from fpipe.storage.read.record import ArrayStore, IndexRecord
from fpipe.storage.read.tables import TableReader

__all__ = ["Dataset", "Reader"]


class Reader(Protocol):
    """What a layout provides: keys and raw members of sample ``i`` (``0 <= i < len``).

    ``read(i, exts)`` may leave out members whose extension is not in ``exts`` (a hint: a
    reader may return more)."""

    def key(self, i: int) -> str: ...

    def read(
        self, i: int, exts: frozenset[str] | None = None, limits: DecodeLimits | None = None
    ) -> dict[str, bytes]: ...

    def av_names(self, field: str, i: int) -> tuple[str, ...]: ...


class Dataset:
    """Random access to the samples of one dataset, whatever its layout.

    Build it with :func:`open_dataset`. Attributes: ``path``, ``record``
    (:class:`~fpipe.storage.read.record.IndexRecord`), ``config`` (dataset.yaml), ``split``
    (split.yaml or None), ``reader`` (the layout's reader).
    """

    def __init__(
        self,
        path: str,
        record: IndexRecord,
        config: DatasetConfig,
        split: SplitConfig | None,
        arrays: ArrayStore,
        reader: Reader,
        files: FileCache,
        *,
        where: str,
        open_args: dict[str, Any],
        reopen: Callable[..., Dataset],
    ):
        self.path = path
        self.record = record
        self.config = config
        self.split = split
        self.reader = reader
        self._array = arrays
        self._files = files
        self._where = where  #: split file named in errors
        self._open_args = open_args
        self._reopen = reopen  #: the opener that built this dataset (open_dataset)
        self._key_index: dict[str, int] | None = None
        self._av: AVIndex | None = None

    # pickling carries the opener and its arguments only: no descriptors, no mapped arrays
    def __reduce__(self) -> tuple[Any, ...]:
        return functools.partial(self._reopen, **self._open_args), (self.path,)

    def __repr__(self) -> str:
        return (
            f"Dataset({self.path!r}, layout={self.record.layout!r}, "
            f"samples={len(self)}, shards={len(self.record.shards)})"
        )

    def __len__(self) -> int:
        return self.record.num_samples

    def _check(self, i: int) -> int:
        i = int(i)
        if not 0 <= i < self.record.num_samples:
            raise IndexError(f"sample index {i} out of range for {len(self)} samples")
        return i

    @property
    def layout(self) -> str:
        """``"tar"``, ``"energon"``, ``"table"``, ``"parquet"`` or ``"megatron"``."""
        return self.record.layout

    @property
    def shards(self) -> tuple[str, ...]:
        """Shard paths relative to :attr:`path`, in shard-id order (empty for tables)."""
        return tuple(self.record.shard_names)

    @property
    def column_names(self) -> tuple[str, ...]:
        """Metadata columns: ``shard_id`` (tar layouts), ``bytes``, ``<field>.<stat>``, user
        columns, aliases (``width`` / ``height``)."""
        head = ("shard_id",) if self.record.shards else ()
        return (*head, *self.record.columns, *self.record.aliases)

    def column(self, name: str) -> np.ndarray:
        """Values of column ``name`` for every sample (memory-mapped when prepared, read-only;
        a compact tar index gives an array-like read on access: ``col[indices]``,
        ``np.asarray(col)``)."""
        own = getattr(self.reader, "index_column", None)  # the tar index's layout decides
        if name == "shard_id" and self.record.shards:
            got = own("shard_id") if own is not None else None
            return self._array("shard_id.npy") if got is None else got
        name = self.record.aliases.get(name, name)
        if name not in self.record.columns:
            hint = " (run `fpipe prepare` for metadata columns)" if self.layout == "energon" else ""
            raise KeyError(f"{self.path}: no column {name!r}; columns: {self.column_names}{hint}")
        got = own(name) if own is not None else None
        return self._array(f"columns/{name}.npy") if got is None else got

    @property
    def split_names(self) -> tuple[str, ...]:
        """Split names from split.yaml (empty when there is none)."""
        return tuple(self.split.split_parts) if self.split else ()

    def split_indices(
        self, name: str, split_config: str | None = None, *, dataset_config: str | None = None
    ) -> np.ndarray:
        """Sample indices of split ``name`` (all samples without a split). ``split_config``:
        another split file of the dataset to read instead of ``split.yaml`` (Energon's
        override: a file name in ``.nv-meta/``, or in ``.fpipe/``). The dataset config read
        (``dataset_config``, see :meth:`dataset_config`; None: dataset.yaml) may name the split
        file itself (its ``split_config:``), which wins, as in Energon."""
        return as_indices(self.split_samples(name, split_config, dataset_config=dataset_config))

    def split_samples(
        self, name: str, split_config: str | None = None, *, dataset_config: str | None = None
    ) -> range | np.ndarray:
        """:meth:`split_indices`, as a ``range`` where they are one run of indices (what a
        plan's view of them takes without building the array)."""
        own = self.dataset_config(dataset_config).split_config
        split_config = own or split_config
        if isinstance(self.reader, TableReader):
            if split_config is not None:
                raise ConfigError(f"{self.path}: split_config applies to sharded datasets")
            return self.reader.split_indices(name)
        split, where = self.split, self._where
        if split_config is not None:
            path = self._index_file(split_config, "split_config")
            split, where = load_split_config(path), str(path)
        return split_samples(split, name, self.record, self.index_of_key, where)

    def dataset_config(self, name: str | None) -> DatasetConfig:
        """The dataset config file ``name`` of this dataset's ``.nv-meta/`` (or ``.fpipe/``)
        folder, read as data (Energon's ``dataset_config=``: another dataset.yaml of the same
        shards); None: :attr:`config` (``dataset.yaml``)."""
        if name is None:
            return self.config
        return load_dataset_config(self._index_file(name, "dataset_config"))

    def _index_file(self, name: str, key: str) -> Path:
        """The path of file ``name`` in this dataset's ``.nv-meta/`` (or ``.fpipe/``) folder,
        which must exist; ``key`` names the option in errors."""
        if is_url(self.path) or not is_config_file_name(name):
            raise ConfigError(
                f"{self.path}: {key} {name!r} must be a file name in the dataset's "
                ".nv-meta/ (or .fpipe/) folder of a local dataset"
            )
        for folder in (".nv-meta", ".fpipe"):
            path = Path(self.path) / folder / name
            if path.is_file():  # a link out of the dataset folder is refused, unread
                contained(self.path, f"{folder}/{name}", where=self.path, what=key)
                return path
        raise ConfigError(
            f"{self.path}: {key} {name!r}: there is no .nv-meta/{name} or .fpipe/{name}"
        )

    def key(self, i: int) -> str:
        """The sample's key: ``"<shard stem>/<member key>"`` (WebDataset's ``__key__``) for
        shards, ``"<table stem>/<row number>"`` for tables."""
        return self.reader.key(self._check(i))

    def index_of_key(self, key: str) -> int | None:
        """Index of the sample with this key, or None (builds a dict on first use)."""
        if self._key_index is None:
            self._key_index = {self.reader.key(i): i for i in range(len(self))}
        return self._key_index.get(key)

    def read(
        self,
        i: int,
        exts: frozenset[str] | None = None,
        *,
        limits: DecodeLimits | None = None,
    ) -> dict[str, bytes]:
        """Raw member bytes of sample ``i`` by extension (``.gz`` members decompressed).

        ``exts``: the members the caller will use (a compiled field map's ``extensions``);
        readers may then skip the others (the tar reader does: fewer bytes read). None: all.
        ``limits``: the :class:`fpipe.decode.DecodeLimits` whose ``max_inflated_bytes`` bounds
        ``.gz`` members (None: the defaults); the loader passes its own.
        """
        return self.reader.read(self._check(i), exts, limits)

    def read_many(
        self,
        indices,
        exts: frozenset[str] | None = None,
        *,
        limits: DecodeLimits | None = None,
    ) -> list[tuple[str, Any]]:
        """``(key, members)`` of each sample of ``indices``: what :meth:`key` and :meth:`read`
        (with ``limits``) give, for a whole batch at once (the tar layout gathers its index
        lookups with numpy).

        A sample whose key or read raises holds the exception in place of its members (and
        ``"#<index>"`` as its key): the caller raises it when it comes to that sample, so one
        bad sample does not stop the others from being read.

        Example:
          >>> ds.read_many([0, 1], frozenset({"txt"}))          # doctest: +SKIP
          [('shard-0/000', {'txt': b'a cat'}), ('shard-0/001', {'txt': b'a dog'})]
        """
        idx = np.asarray(indices, dtype=np.int64)
        fn = getattr(self.reader, "read_many", None)
        if fn is not None and bool(((idx >= 0) & (idx < len(self))).all()):
            return fn(idx, exts, limits)
        return read_each(idx.tolist(), lambda i: (self.key(i), self.read(i, exts, limits=limits)))

    def prefetch(self, indices, exts: frozenset[str] | None = None) -> None:
        """Start fetching samples ``indices`` for the :meth:`read` calls that follow.

        A no-op on local files; on object storage the ranges are fetched concurrently (see
        :mod:`fpipe.storage.read.remote`). Errors surface in the matching :meth:`read`.
        """
        fn = getattr(self.reader, "prefetch", None)
        if fn is None:
            return
        # a batch's indices checked at once; one out of range is named as _check names it
        if (
            isinstance(indices, np.ndarray)
            and indices.dtype.kind in "iu"
            and bool(((indices >= 0) & (indices < self.record.num_samples)).all())
        ):
            fn(indices.tolist(), exts)
            return
        fn([self._check(i) for i in indices], exts)

    def read_ahead(self, indices, exts: frozenset[str] | None = None):
        """``(files, ranges)``: what reads samples ``indices`` and the ``(path, offset, size)``
        ranges it will be asked for, for a read-ahead window
        (:mod:`fpipe.storage.read.read_ahead`); None when the layout reads otherwise."""
        fn = getattr(self.reader, "read_ahead", None)
        if fn is None:
            return None
        return fn([self._check(i) for i in indices], exts)

    def decode_exts(self, i: int) -> dict[str, str]:
        """How members of sample ``i`` are decoded when they are not decoded by their own
        name: ``{member: extension}`` (a table's typed columns, see
        :meth:`~fpipe.storage.read.tables.TableReader.decode_exts`; empty for tar layouts)."""
        fn = getattr(self.reader, "decode_exts", None)
        return {} if fn is None else fn(self._check(i))

    def row_object(self, i: int) -> dict[str, Any] | None:
        """Sample ``i`` of a JSONL table as its JSON object (see
        :meth:`~fpipe.storage.read.tables.TableReader.row_object`); None for other layouts."""
        fn = getattr(self.reader, "row_object", None)
        return None if fn is None else fn(self._check(i))

    def av_metadata(self, i: int) -> dict[str, Any]:
        """Audio/video stream metadata stored by ``fpipe prepare`` for sample ``i``, by the key
        :meth:`read` returns the media under: ``{"mp4": AVMetadata}`` (empty when nothing was
        probed). See :mod:`fpipe.storage.read.av_meta`."""
        fields = self.record.av_fields
        if not fields:
            return {}
        i = self._check(i)
        if self._av is None:
            self._av = AVIndex(fields, self._array, self.column)
        out: dict[str, Any] = {}
        for field in fields:
            names = [n for n in self.reader.av_names(field, i) if n not in out]
            meta = self._av.metadata(field, i) if names else None
            if meta is not None:
                out.update(dict.fromkeys(names, meta))
        return out

    def close(self) -> None:
        """Close open shard files of this process (reopened on the next read)."""
        self._files.close()
