"""Deferred reads of auxiliary files (Energon's ``Lazy`` and cache pools), on fpipe's
materialize tier.

A cooker declared ``@cooker(need_cache=True)`` gets a ``cache`` keyword: a :class:`CachePool`
whose ``get_lazy(store, name)`` returns a :class:`Lazy` reference to file ``name`` of a file
store. The reference is read when ``lazy.get(sample)`` is called (in ``postencode_sample``,
``pack_selected_samples`` ...), inside the same worker. A read is a pure function of the
reference (the store is read-only, names are confined to it), so the bytes a ``Lazy`` gives do
not depend on the number of workers, on which worker resolves it, or on a restore: only the
plan decides which samples are cooked, and the reference is rebuilt with the sample.

The stores themselves are :class:`FileStore` objects: the metadataset's ``aux:`` stores and a
cooker's ``primary`` (:mod:`fpipe.materialize._aux`), or any subclass (``__getitem__`` and
``get_path``). :class:`DecodeFileStore` decodes what an inner store reads,
:class:`SystemFileStore` reads a local folder, :class:`PrimaryFileStore` names files of the
current sample by ``.member``. :class:`NoCachePool` defers the read and caches nothing (what a
need_cache cooker gets in fpipe's workers); ``FileStoreCachePool``
(:mod:`fpipe.materialize.file_cache_pool`) prefetches to a local folder.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from fpipe.samples.source_info import SourceInfo, add_source_info
from fpipe.storage.read.file_store import FolderFiles

__all__ = [
    "CachePool",
    "DecodeFileStore",
    "DirectLazy",
    "FileStore",
    "FileStoreDecoder",
    "Lazy",
    "MockLazy",
    "NoCachePool",
    "PrimaryFileStore",
    "SystemFileStore",
]

T = TypeVar("T")


class FileStore(Generic[T]):
    """Files by name (Energon's ``FileStore``): ``store[name]`` is ``(data, SourceInfo)``.

    Subclasses define ``__getitem__`` and ``get_path``; ``_get_raw`` / ``_decode_raw`` split a
    read into the undecoded bytes and their decoding (a cache pool keeps the bytes)."""

    def __getitem__(self, name: str) -> tuple[T, SourceInfo]:
        raise NotImplementedError(f"{type(self).__name__} defines no __getitem__")

    def _get_raw(self, name: str) -> tuple[Any, SourceInfo]:
        """The undecoded data of ``name`` and its source (here: as ``store[name]``)."""
        return self[name]

    def _decode_raw(self, data: Any, **kwargs: Any) -> Any:
        """``data`` from :meth:`_get_raw` decoded as ``store[name]`` would give it."""
        del kwargs
        return data

    def get(self, name: str, sample: Any = None) -> Any:
        """The data of file ``name``; its source is added to ``sample``'s ``__sources__``."""
        data, info = self[name]
        add_source_info(sample, info)
        return data

    def get_path(self) -> str:
        """The store's folder or dataset path."""
        raise NotImplementedError(f"{type(self).__name__} defines no get_path")

    def get_media_metadata(self, name: str) -> Any:
        """The stored media metadata of file ``name``."""
        raise NotImplementedError(f"{type(self).__name__} has no media metadata")


class FileStoreWrapper(FileStore[T]):
    """A store over another store (decoding, key prefixes)."""

    def __init__(self, inner: FileStore):
        self._inner = inner

    def __getitem__(self, name: str) -> tuple[T, SourceInfo]:
        return self._inner[name]

    def _get_raw(self, name: str) -> tuple[Any, SourceInfo]:
        return self._inner._get_raw(name)

    def _decode_raw(self, data: Any, **kwargs: Any) -> Any:
        return self._inner._decode_raw(data, **kwargs)

    def get_path(self) -> str:
        return self._inner.get_path()

    def get_media_metadata(self, name: str) -> Any:
        return self._inner.get_media_metadata(name)


class FileStoreDecoder:
    """Decodes a file's bytes by its name (a ``SampleDecoder`` is one)."""

    def decode(self, fname: str, data: bytes) -> Any:
        """The decoded value of file ``fname``."""
        raise NotImplementedError


class DecodeFileStore(FileStoreWrapper[Any]):
    """``inner``'s files decoded by ``decoder.decode(name, data)``."""

    def __init__(self, inner: FileStore, *, decoder: Any):
        super().__init__(inner)
        self.decoder = decoder

    def __getitem__(self, name: str) -> tuple[Any, SourceInfo]:
        data, info = self._inner[name]
        return self.decoder.decode(name, data), info

    def _decode_raw(self, data: Any, **kwargs: Any) -> Any:
        return self.decoder.decode(kwargs["fname"], self._inner._decode_raw(data, **kwargs))

    def __repr__(self) -> str:
        return f"DecodeFileStore(inner={self._inner!r}, decoder={self.decoder!r})"


class PrimaryFileStore(FileStoreWrapper[T]):
    """``inner`` where a name starting with ``.`` means a member of the current sample
    (``.txt`` is ``<current key>.txt``)."""

    def __init__(self, inner: FileStore, current_key: str):
        super().__init__(inner)
        self._current_key = current_key

    def _name(self, name: str) -> str:
        return f"{self._current_key}{name}" if name.startswith(".") else name

    def __getitem__(self, name: str) -> tuple[T, SourceInfo]:
        return self._inner[self._name(name)]

    def get(self, name: str, sample: Any = None) -> Any:
        return self._inner.get(self._name(name), sample)

    def get_media_metadata(self, name: str) -> Any:
        return self._inner.get_media_metadata(self._name(name))


class SystemFileStore(FileStore[bytes]):
    """The files of a local folder, read by relative name; names cannot leave the folder
    (no absolute path, no ``..``, no link leading out). Without ``base_dir``, names are
    absolute paths (the caller's own paths, never names from sample data)."""

    def __init__(self, base_dir: Any = None):
        self.base_dir = None if base_dir is None else str(base_dir)

    def __getitem__(self, name: str) -> tuple[bytes, SourceInfo]:
        if self.base_dir is None:
            data = Path(name).read_bytes()
        else:
            data, _ = FolderFiles(self.base_dir).read(name)
        root = self.base_dir or ""
        return data, SourceInfo(dataset_path=root, index=name, shard_name=root, file_names=(name,))

    def get_path(self) -> str:
        return str(self.base_dir)

    def __repr__(self) -> str:
        return f"SystemFileStore(base_dir={self.base_dir!r})"


@dataclasses.dataclass(eq=False)
class Lazy(Generic[T]):
    """A reference to file ``fname`` of store ``ds``, read by :meth:`get`. ``Lazy[str]`` names
    the type a field will hold once read. Two references are equal when they name the same
    file of the same store."""

    ds: Any
    fname: str
    pool: Any

    def get(self, sample: Any = None) -> T:
        """The data, now; its source is added to ``sample``'s ``__sources__``."""
        raise NotImplementedError

    def __hash__(self) -> int:
        return hash((id(self.ds), self.fname))

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Lazy) and self.ds is other.ds and self.fname == other.fname


@dataclasses.dataclass(eq=False)
class DirectLazy(Lazy[T]):
    """Read from the store on the first :meth:`get`, then kept."""

    _data: tuple[Any, SourceInfo] | None = None

    def get(self, sample: Any = None) -> T:
        if self._data is None:
            self._data = self.ds[self.fname]
        add_source_info(sample, self._data[1])
        return self._data[0]


@dataclasses.dataclass(eq=False, init=False)
class MockLazy(Lazy[T]):
    """A ``Lazy`` whose data is ``get_fn(fname)`` (no store, no source added)."""

    get_fn: Callable[[str], Any]

    def __init__(self, fname: str, get_fn: Callable[[str], Any]):
        self.ds, self.fname, self.pool, self.get_fn = None, fname, None, get_fn

    def get(self, sample: Any = None) -> T:
        return self.get_fn(self.fname)

    def __hash__(self) -> int:
        return hash((self.fname, self.get_fn))

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, MockLazy)
            and self.fname == other.fname
            and self.get_fn == other.get_fn
        )

    def __repr__(self) -> str:
        return f"MockLazy(fname={self.fname!r}, get_fn={self.get_fn!r})"


class CachePool:
    """Where a ``need_cache`` cooker gets its :class:`Lazy` references from."""

    def get(self, ds: FileStore, fname: str, sample: Any = None) -> Any:
        """File ``fname`` of ``ds``, read now (its source added to ``sample``)."""
        raise NotImplementedError

    def get_lazy(self, ds: FileStore, fname: str) -> Lazy:
        """A reference to file ``fname`` of ``ds``, read when its ``get`` is called."""
        raise NotImplementedError

    def to_cache(self, data: Any, name: str) -> Lazy:
        """``data`` kept aside, returned by the ``Lazy``'s ``get``."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the pool's resources."""


class NoCachePool(CachePool):
    """Defers reads and caches nothing: a ``Lazy`` reads its file from the store when asked."""

    def get(self, ds: FileStore, fname: str, sample: Any = None) -> Any:
        return ds.get(fname, sample)

    def get_lazy(self, ds: FileStore, fname: str) -> DirectLazy:
        return DirectLazy(ds=ds, fname=fname, pool=self)

    def to_cache(self, data: Any, name: str) -> MockLazy:
        return MockLazy(fname=name, get_fn=lambda _name: data)
