"""Positional reads of byte ranges with a bounded, fork-safe cache of open files.

Reads use ``os.pread`` (no shared file position), so one descriptor serves any order of
requests. Descriptors are opened lazily and belong to the process that opened them: when the
cache notices a new process id (a forked DataLoader worker) it forgets the inherited ones
(closing them in the child only) and opens its own. Pickling a :class:`FileCache` carries no
descriptors either. Consecutive samples are consecutive byte ranges of one file, so reading
them in order stays sequential on disk and the kernel's read-ahead applies.

Threads of one process share its caches' bound, so one thread's open may evict a descriptor
another thread is reading. A read therefore leases its descriptor, and one evicted while
leased is closed only after its reads end (by the cache operation that follows): closed under
a read, its number could be given to the next file opened, and the read would return that
file's bytes.
"""

from __future__ import annotations

import contextlib
import os
import weakref
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from fpipe.core.errors import BadSampleError
from fpipe.core.fork_locks import fork_safe_lock
from fpipe.decode.extensions import is_gz, strip_gz
from fpipe.decode.limits import DEFAULT_LIMITS, DecodeLimits, gunzip
from fpipe.storage.read.coalesce import LOCAL_BUDGET

__all__ = ["FileCache", "gunzip_member", "members_to_dict", "read_each"]


#: This process's id, set again in the child of each fork: a cache compares it with the id it
#: opened its descriptors in, where asking the kernel for the id on every read would cost a
#: system call per read.
_PID = os.getpid()


def _forked() -> None:
    global _PID
    _PID = os.getpid()
    _LRU.clear()  # the parent's descriptors: each cache closes its copies when it notices
    _BUSY.clear()  # read by the parent's threads, not this child's
    _close(_DEFERRED)  # copies no cache holds any more
    _DEFERRED.clear()


#: Descriptors all caches of this process hold together. Each dataset has its own cache, so a
#: blend of 10,000 datasets would otherwise keep up to 10,000 x ``max_open`` files open in
#: every worker; past this many, the least recently used descriptor of any cache is closed.
PROCESS_MAX_OPEN = 256
_LRU: OrderedDict[tuple[int, str], weakref.ref] = OrderedDict()  #: (id(cache), path) -> cache
#: Per open descriptor, one entry per read using it (:meth:`FileCache._fd`). A list, not a
#: count: ``append`` and ``pop`` are atomic, so a read gives its lease back without the lock.
_BUSY: dict[int, list[None]] = {}
#: Descriptors taken out of their cache while read: closed under the lock by a cache operation
#: after their reads end (:func:`_sweep`), not by the read, which holds no lock when it ends.
_DEFERRED: set[int] = set()
#: Guards ``_LRU``, leases, ``_DEFERRED`` and every cache's descriptors. Reentrant: a cache
#: collected while it is held (a garbage collection inside) closes itself under it.
_LRU_LOCK = fork_safe_lock(globals(), "_LRU_LOCK", reentrant=True)


os.register_at_fork(after_in_child=_forked)


def _close(fds: Iterable[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _unless_busy(fds: list[int]) -> list[int]:
    """Of descriptors taken out of their cache, those to close now; the others are closed when
    their reads end (:func:`_sweep`). Under ``_LRU_LOCK``."""
    closing = []
    for fd in fds:
        if _BUSY.get(fd):
            _DEFERRED.add(fd)
        else:
            _BUSY.pop(fd, None)
            closing.append(fd)
    return closing


def _sweep() -> list[int]:
    """Deferred descriptors no read uses any more, to close. Under ``_LRU_LOCK``: nothing leases
    them again (no cache holds them), so once free they stay free."""
    free = [fd for fd in _DEFERRED if not _BUSY.get(fd)]
    for fd in free:
        _DEFERRED.discard(fd)
        _BUSY.pop(fd, None)
    return free


def _pread_full(fd: int, offset: int, size: int) -> bytes:
    """``size`` bytes of ``fd`` at ``offset``; fewer only at end of file."""
    data = os.pread(fd, size, offset)
    if len(data) == size or not data:
        return data
    parts = [data]  # pread may return short reads before EOF (network filesystems)
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class FileCache:
    """At most ``max_open`` open read-only files, least recently used closed first (one being
    read when it is evicted: when that read ends)."""

    #: a batch's close ranges within this many bytes are read with one ``pread``
    #: (:mod:`fpipe.storage.read.coalesce`, where the figure was measured)
    merge_budget = LOCAL_BUDGET

    def __init__(self, max_open: int = 64):
        if max_open < 1:
            raise ValueError("max_open must be >= 1")
        self.max_open = max_open
        self._fds: OrderedDict[str, int] = OrderedDict()
        self._pid = os.getpid()

    def __getstate__(self) -> dict:
        return {"max_open": self.max_open}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["max_open"])

    def _forget_inherited(self) -> None:
        """Forked: the descriptors are the parent's copies (under ``_LRU_LOCK``)."""
        _close(self._fds.values())
        self._fds.clear()
        self._pid = os.getpid()

    def _fd(self, path: str) -> int:
        """A descriptor of ``path``, leased: it stays open, whichever thread or cache evicts it,
        until the caller gives it back with ``_BUSY[fd].pop()``."""
        me = (id(self), path)
        with _LRU_LOCK:
            if self._pid != _PID:
                self._forget_inherited()
            fd = self._fds.get(path)
            if fd is not None:
                self._fds.move_to_end(path)
                if me in _LRU:
                    _LRU.move_to_end(me)
                _BUSY[fd].append(None)
                if not _DEFERRED:
                    return fd
                closing = _sweep()
        if fd is None:
            fd, closing = self._open(path, me)
        _close(closing)
        return fd

    def _open(self, path: str, me: tuple[int, str]) -> tuple[int, list[int]]:
        """``path`` opened (outside the lock: an open may wait on a network file system) and
        leased, and the descriptors its place in the bounds evicts, to close."""
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        evicted = []
        with _LRU_LOCK:
            have = self._fds.get(path)
            if have is not None:  # another thread opened it meanwhile
                evicted.append(fd)
                fd = have
            else:
                self._fds[path] = fd
                _BUSY[fd] = []
                while len(self._fds) > self.max_open:
                    old_path, old = self._fds.popitem(last=False)
                    _LRU.pop((id(self), old_path), None)
                    evicted.append(old)
                _LRU[me] = weakref.ref(self)
                while len(_LRU) > PROCESS_MAX_OPEN:  # another cache's least recently used file
                    (_, old_path), ref = _LRU.popitem(last=False)
                    cache = ref()
                    gone = None if cache is None else cache._fds.pop(old_path, None)
                    if gone is not None:
                        evicted.append(gone)
            _BUSY[fd].append(None)
            closing = _unless_busy(evicted)
            if _DEFERRED:
                closing += _sweep()
        return fd, closing

    def pread(self, path: str, offset: int, size: int) -> bytes:
        """``size`` bytes of ``path`` at ``offset``; fewer only at end of file."""
        fd = self._fd(path)
        try:
            return _pread_full(fd, offset, size)
        finally:
            _BUSY[fd].pop()

    def pread_many(self, ranges: Sequence[tuple[str, int, int]]) -> list[bytes | OSError]:
        """Each ``(path, offset, size)`` of ``ranges`` read as :meth:`pread` reads it, or the
        ``OSError`` its read (or its file's open) raised. A file's descriptor is leased once
        for all its ranges, one file at a time: a batch of small samples pays the lease (a
        lock, the bounds' bookkeeping) per file rather than per read."""
        by_path: dict[str, list[int]] = {}
        for k, r in enumerate(ranges):
            by_path.setdefault(r[0], []).append(k)
        out: list[bytes | OSError] = [b""] * len(ranges)
        for path, ks in by_path.items():
            try:
                fd = self._fd(path)
            except OSError as e:
                for k in ks:
                    out[k] = e
                continue
            try:
                for k in ks:
                    _, offset, size = ranges[k]
                    try:
                        out[k] = _pread_full(fd, offset, size)
                    except OSError as e:
                        out[k] = e
            finally:
                _BUSY[fd].pop()
        return out

    def read_ahead(self, ranges) -> list[None]:
        """Ask the kernel to start reading ``(path, offset, size)`` ranges into its page cache
        (``posix_fadvise(WILLNEED)``: asynchronous; the ``pread`` that follows finds them
        there). Nothing is held here, so one None per range; a file that cannot be opened is
        left for the read that needs it to report."""
        advise = getattr(os, "posix_fadvise", None)
        for path, offset, size in ranges:
            if advise is None:
                break
            try:
                fd = self._fd(path)
            except OSError:
                continue
            try:
                advise(fd, offset, size, os.POSIX_FADV_WILLNEED)
            except OSError:
                continue
            finally:
                _BUSY[fd].pop()
        return [None] * len(ranges)

    def close(self) -> None:
        """Close every descriptor this process opened (one being read: when its read ends)."""
        with _LRU_LOCK:
            if self._pid != _PID:
                self._forget_inherited()
                return
            for path in self._fds:
                _LRU.pop((id(self), path), None)
            closing = _unless_busy(list(self._fds.values()))
            self._fds.clear()
            if _DEFERRED:
                closing += _sweep()
        _close(closing)

    def __len__(self) -> int:
        return len(self._fds) if self._pid == os.getpid() else 0

    def __del__(self):
        # at interpreter shutdown module globals (contextlib, os, the LRU lock) may be gone
        try:  # noqa: SIM105
            self.close()
        except Exception:
            pass


def gunzip_member(
    path: str, key: str, ext: str, data: bytes, limits: DecodeLimits | None = None
) -> bytes:
    """Decompress a ``.gz`` member, refusing more than ``limits.max_inflated_bytes`` (None:
    the default limits) of output before producing it; corrupt or oversized data is a
    :class:`BadSampleError` naming it."""
    try:
        return gunzip(data, (limits or DEFAULT_LIMITS).max_inflated_bytes)
    except (OSError, EOFError, zlib.error, ValueError, MemoryError) as e:
        raise BadSampleError(
            path, key, f"corrupt gzip member {ext!r}: {type(e).__name__}: {e}"
        ) from None


def members_to_dict(
    path: str,
    key_fn: Callable[[], str],
    parts: Iterable[tuple[str, bytes]],
    limits: DecodeLimits | None = None,
) -> dict[str, bytes]:
    """Member bytes by extension; ``.gz`` members decompressed under their base extension,
    within ``limits.max_inflated_bytes`` (None: the default limits).

    ``key_fn()`` gives the sample key for error messages (computed only on error). A plain
    member wins over a ``.gz`` one with the same base extension.
    """
    out: dict[str, bytes] = {}
    for ext, data in parts:
        if is_gz(ext):
            base = strip_gz(ext)
            if base not in out:
                out[base] = gunzip_member(path, key_fn(), ext, data, limits)
        else:
            out[ext] = data
    return out


def read_each(
    indices: Iterable[int], read_one: Callable[[int], tuple[str, Any]]
) -> list[tuple[str, Any]]:
    """``read_one(i)`` (a sample's ``(key, members)``) for each of ``indices``, in order; a
    sample whose read raises holds the exception in place of its members, and ``"#<index>"``
    as its key.

    The caller raises the exception when it comes to that sample, so one bad sample does not
    stop the rest of a batch from being read (the contract of ``Dataset.read_many``).

    Example:
      >>> read_each([0, 1], lambda i: ("k", 1 // i))[0][0]
      '#0'
    """
    out: list[tuple[str, Any]] = []
    for i in indices:
        try:
            out.append(read_one(i))
        except Exception as e:  # noqa: BLE001 - raised by the caller, in this sample's turn
            out.append((f"#{i}", e))
    return out
