"""A cache pool that prefetches files to a local folder in background threads (Energon's
``FileStoreCachePool``).

``get_lazy(store, name)`` queues a read of the file; a thread reads it and writes it to the
pool's folder once the folder has room (``max_cache_size_gbytes``, ``max_cache_count``). The
``Lazy``'s ``get`` then reads the local copy, or, when the read is still queued or waiting for
room, reads the store directly (the queued read then moves to the end of the queue while other
references still want it). References to the same file share one read and one local copy,
which is deleted when the last reference has read it or been dropped.

Which references exist is decided by the cookers, and what a reference reads is a pure
function of its store and name: the pool changes when bytes are read, never which.
``method="pickle"`` keeps the decoded value instead of the bytes, as does :meth:`to_cache`:
fpipe's pool lives in one worker process, so such values stay in that process's memory
(counted against the pool's limits by the size of the bytes they were decoded from) rather
than being pickled to disk: nothing is ever unpickled.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from fpipe.core.errors import ConfigError
from fpipe.materialize.lazy import CachePool, FileStore, Lazy
from fpipe.samples.source_info import SourceInfo, add_source_info

__all__ = ["CacheFileLazy", "FileCacheLazy", "FileStoreCachePool"]


@dataclasses.dataclass(eq=False)
class _Entry:
    """One queued or cached file, shared by every reference to it."""

    ds: FileStore
    fname: str
    send_to_cache_future: Future | None = None
    refcount: int = 1
    data_size: int = 0  #: bytes reserved in the folder (0 until the read has finished)
    require_data_now: bool = False  #: a reference is waiting: stop waiting for room
    cache_path: Path | None = None
    source_info: SourceInfo | None = None
    value: Any = None  #: method="pickle": the decoded value, held in memory
    held: bool = False  #: the prefetch finished and the copy (file or value) is there


@dataclasses.dataclass(eq=False)
class FileCacheLazy(Lazy[Any]):
    """A reference to a file the pool prefetches (``entry``: the shared read)."""

    entry: _Entry | None = None
    _data: tuple[Any, SourceInfo] | None = None

    def get(self, sample: Any = None) -> Any:
        if self._data is None:
            self._data = self.pool._get_data(self.ds, self.fname, self.entry)
        add_source_info(sample, self._data[1])
        return self._data[0]

    def __del__(self) -> None:
        pool = getattr(self, "pool", None)
        if pool is not None and self._data is None:
            with pool._lock:  # never read: give the shared entry up
                pool._release((self.ds.get_path(), self.fname))


@dataclasses.dataclass(eq=False)
class CacheFileLazy(Lazy[Any]):
    """A value handed to the pool (:meth:`FileStoreCachePool.to_cache`), given back by
    ``get`` (the pool of one worker process holds it in memory)."""

    _data: Any = None

    def get(self, sample: Any = None) -> Any:
        return self._data

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: Any) -> bool:
        return self is other


class FileStoreCachePool(CachePool):
    """Prefetches files to ``parent_cache_dir`` (a fresh folder inside it per pool) with
    ``num_workers`` threads; at most ``max_cache_size_gbytes`` and ``max_cache_count`` files
    are held. ``method``: ``"raw"`` keeps the bytes (decoded when read), ``"pickle"`` the
    decoded value. :meth:`close` stops the threads and deletes the folder."""

    def __init__(
        self,
        *,
        parent_cache_dir: Any = None,
        num_workers: int = 8,
        max_cache_size_gbytes: float = 1024,
        max_cache_count: int = 10_000_000,
        method: Literal["raw", "pickle"] = "raw",
    ):
        if method not in ("raw", "pickle"):
            raise ConfigError(
                f"FileStoreCachePool: method must be 'raw' or 'pickle', not {method!r}"
            )
        parent = Path(parent_cache_dir) if parent_cache_dir is not None else None
        if parent is not None:
            parent.mkdir(parents=True, exist_ok=True)
        self.parent_cache_dir = parent
        self.cache_dir = Path(tempfile.mkdtemp(prefix="cache_", dir=parent)).resolve()
        self.num_workers = num_workers
        self.method = method
        self.max_cache_size = int(max_cache_size_gbytes * 1024**3)
        self.max_cache_count = max_cache_count
        self.current_cache_size = 0
        self.current_cache_count = 0
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._lock = threading.RLock()
        self._room = threading.Condition(self._lock)
        self._closing = False
        self._threads = ThreadPoolExecutor(num_workers, thread_name_prefix="fpipe-cache")

    # -- references -------------------------------------------------------------------------

    def get(self, ds: FileStore, fname: str, sample: Any = None) -> Any:
        """File ``fname`` of ``ds``, read now without the cache."""
        return ds.get(fname, sample)

    def get_lazy(self, ds: FileStore, fname: str) -> FileCacheLazy:
        """A reference to file ``fname`` of ``ds``, whose read is queued now."""
        key = (ds.get_path(), fname)
        with self._lock:
            if self._closing:
                raise RuntimeError("FileStoreCachePool: the pool is closed")
            entry = self._entries.get(key)
            if entry is not None:
                entry.refcount += 1
            else:
                entry = self._entries[key] = _Entry(ds=ds, fname=fname)
                entry.send_to_cache_future = self._threads.submit(self._prefetch, entry)
        return FileCacheLazy(ds=ds, fname=fname, pool=self, entry=entry)

    def to_cache(self, data: Any, name: str) -> CacheFileLazy:
        """A reference that gives ``data`` back (held in memory, never serialized)."""
        return CacheFileLazy(ds=None, fname=name, pool=self, _data=data)

    def close(self) -> None:
        """Stop the threads (queued reads are dropped) and delete the folder."""
        with self._lock:
            self._closing = True
            for entry in self._entries.values():
                if entry.send_to_cache_future is not None:
                    entry.send_to_cache_future.cancel()
            self._room.notify_all()
        self._threads.shutdown(wait=True)
        with self._lock:
            self._entries.clear()
        shutil.rmtree(self.cache_dir, ignore_errors=True)

    # -- the background read ----------------------------------------------------------------

    def _prefetch(self, entry: _Entry) -> bool:
        """Read ``entry``'s file and write it to the folder once there is room; False when a
        reference asked for it first (or the pool closes): the reference reads it itself."""
        with self._lock:
            if self._closing:
                return False
        data, entry.source_info = entry.ds._get_raw(entry.fname)
        size = len(data)
        with self._lock:
            entry.data_size = size
            while (
                self.current_cache_count + 1 > self.max_cache_count
                or self.current_cache_size + size > self.max_cache_size
            ):
                self._room.wait()
                if entry.require_data_now or self._closing:
                    return False
            if self._closing or entry.refcount <= 0:
                return False
            self.current_cache_size += size
            self.current_cache_count += 1
        path = self.cache_dir / _file_name(entry.ds.get_path(), entry.fname)
        try:
            if self.method == "raw":
                path.write_bytes(data)
            else:  # the decoded value, kept in this process
                value = entry.ds._decode_raw(data, fname=entry.fname)
        except BaseException:
            with self._lock:
                self.current_cache_size -= size
                self.current_cache_count -= 1
                self._room.notify_all()
            raise
        with self._lock:
            if self.method == "raw":
                entry.cache_path = path
            else:
                entry.value = value
            entry.held = True
        return True

    def _get_data(self, ds: FileStore, fname: str, entry: _Entry) -> tuple[Any, SourceInfo]:
        """What a reference's ``get`` reads: the local copy when the prefetch wrote it, else
        the store directly; the reference is then given up."""
        key = (ds.get_path(), fname)
        with self._lock:
            cached = False
            try:
                if entry.send_to_cache_future.cancel():  # still queued: read it ourselves
                    try:
                        return ds[fname]
                    finally:
                        self._release(key)
                entry.require_data_now = True
                self._room.notify_all()
                self._lock.release()  # let the prefetch finish or give up
                try:
                    cached = entry.send_to_cache_future.result()
                    return self._read_local(entry) if cached else ds[fname]
                finally:
                    self._lock.acquire()
                    entry.require_data_now = False
                    self._release(key)
            finally:
                if entry.refcount > 0 and not cached:  # others still want it: queue it again
                    entry.send_to_cache_future = self._threads.submit(self._prefetch, entry)

    def _read_local(self, entry: _Entry) -> tuple[Any, SourceInfo]:
        assert entry.held and entry.source_info is not None
        if self.method == "raw":
            assert entry.cache_path is not None
            raw = entry.cache_path.read_bytes()
            return entry.ds._decode_raw(raw, fname=entry.fname), entry.source_info
        return entry.value, entry.source_info

    def _release(self, key: tuple[str, str]) -> None:
        """One reference fewer to ``key`` (the lock held); the last one deletes the copy."""
        entry = self._entries.get(key)
        if entry is None:
            return
        entry.refcount -= 1
        if entry.refcount > 0:
            return
        del self._entries[key]
        if entry.held:
            if entry.cache_path is not None:
                entry.cache_path.unlink(missing_ok=True)
            entry.cache_path, entry.value, entry.held = None, None, False
            self.current_cache_size -= entry.data_size
            self.current_cache_count -= 1
            self._room.notify_all()

    def __repr__(self) -> str:
        return (
            f"FileStoreCachePool(cache_dir={str(self.cache_dir)!r}, method={self.method!r}, "
            f"cached={self.current_cache_count} files / {self.current_cache_size} bytes)"
        )


def _file_name(store: str, fname: str) -> str:
    """The local copy's name: a digest of the store and file names (no path from data)."""
    digest = hashlib.sha256(f"{store}\0{fname}".encode()).hexdigest()
    return digest[:40]
