"""Datasets on object storage: ``s3://``, ``gs://``, ``az://`` (and ``file://``) URLs, and
``msc://PROFILE/path`` (a multi-storage-client profile, resolved by :mod:`fpipe.storage.msc`).

All protocol work is done by `obstore <https://developmentseed.org/obstore>`_ (Rust's
``object_store``): this module only names objects, asks for byte ranges and keeps one store per
process. See ``docs/remote.md`` (use) and ``docs/design/remote_storage.md`` (why obstore).

- :class:`RemoteFiles` has :class:`~fpipe.storage.read.reader.FileCache`'s ``pread`` interface, so
  the tar reader reads a bucket as it reads a disk: one ranged GET per sample (a sample's
  members are contiguous in its shard). :meth:`RemoteFiles.prefetch` fetches the ranges of a
  whole recipe concurrently (at most ``concurrency`` requests in flight), and the reads that
  follow are served from what it fetched.
- :meth:`RemoteFiles.read_ahead` starts the ranges of the steps a worker will make next
  (:mod:`fpipe.storage.read.read_ahead`); :meth:`RemoteFiles.prefetch` takes those instead of
  sending their GETs again, and a read that needs one still in flight is hedged below.
- A ranged GET slower than most recent ones is *hedged*: a second identical request is sent
  and the first answer wins (bounded: one hedge per read, at most ``hedge_max_fraction`` of the
  reads; see ``_hedge.py``). The bytes are the same, so the output is too.
- Transient errors (5xx, timeouts, dropped connections) are retried by obstore with bounded
  exponential backoff (:class:`StorageOptions`); what still fails surfaces as ``OSError``
  (``FileNotFoundError`` for a missing object), which the readers turn into a
  :class:`~fpipe.core.errors.BadSampleError` under the loader's error policy.
- obstore runs a tokio runtime, which does not survive ``fork``: a store is created lazily in
  the process that uses it, fpipe's loader starts workers with ``forkserver`` for remote
  datasets, and a forked child that reaches a store inherited from its parent gets a clear
  error instead of a hang.

Credentials and endpoints come from the usual environment variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ENDPOINT_URL``, ``AWS_ALLOW_HTTP``,
``GOOGLE_SERVICE_ACCOUNT``, ``AZURE_STORAGE_ACCOUNT_NAME``...) or from
``StorageOptions.config``.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

from fpipe.core.fork_locks import fork_safe_lock
from fpipe.storage.objects import (
    StorageOptions,
    import_obstore,
    list_objects,
    open_store,
    read_object,
    write_object,
)
from fpipe.storage.read import coalesce, read_ahead
from fpipe.storage.read._gets import Get, Gets, RangeFuture
from fpipe.storage.read._hedge import Hedger
from fpipe.storage.read.tar.index import READ_GAP

__all__ = [
    "RemoteFiles",
    "StorageOptions",
    "list_objects",
    "open_store",
    "read_object",
    "write_object",
]


class _IOLoop:
    """A per-process asyncio loop in a daemon thread: ranged GETs run there while the caller
    decodes the samples already fetched."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.pid = os.getpid()
        threading.Thread(target=self.loop.run_forever, name="fpipe-io", daemon=True).start()


_LOOP: _IOLoop | None = None
#: One loop per process: every reader's GETs are kept on it without locks (``_gets.py``), and
#: thread workers reach it together at their first reads.
_LOOP_LOCK = fork_safe_lock(globals(), "_LOOP_LOCK")


def _io_loop() -> asyncio.AbstractEventLoop:
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None or _LOOP.pid != os.getpid():  # threads do not survive fork
            _LOOP = _IOLoop()
        return _LOOP.loop


#: Readers are used from several threads at once (thread workers, the read-ahead pool): their
#: counts of reads (``requests += n`` would lose one thread's) and the making of a reader's
#: GETs in a process (two threads making them at once made two, one counted nowhere) hold
#: it. One for all readers: it is held for an addition, once per batch of ranges.
_READER_LOCK = fork_safe_lock(globals(), "_READER_LOCK")


class RemoteFiles:
    """Ranged reads of objects under one URL, with :class:`FileCache`'s ``pread`` signature.

    ``path`` arguments are full URLs (``join_url(root, shard)``), as the readers build them.
    Pickling carries only the root and options: stores are per process.
    """

    def __init__(self, root: str, options: StorageOptions | None = None):
        self.root = root.rstrip("/")
        self.options = options or StorageOptions()
        self._pending: dict[tuple[str, int, int], RangeFuture] = {}
        self._engine: tuple[int, Gets] | None = None
        self._names: tuple[int, dict[str, tuple[Any, str]]] = (os.getpid(), {})
        #: reads started by this process (for benchmarks and tests)
        self.requests = 0
        self._streamed = 0  # bytes of whole objects streamed (open_stream)

    @property
    def bytes_read(self) -> int:
        """Bytes this process received (ranges and streamed objects)."""
        engine = self._engine
        ranges = engine[1].bytes_read if engine is not None and engine[0] == os.getpid() else 0
        return ranges + self._streamed

    def _new_hedger(self) -> Hedger | None:
        o = self.options
        if not o.hedge or o.hedge_max_fraction == 0:
            return None
        return Hedger(
            quantile=o.hedge_quantile,
            max_fraction=o.hedge_max_fraction,
            min_delay_s=o.hedge_min_delay_s,
        )

    def stats(self) -> dict[str, int]:
        """This process's reads of this reader: ``requests`` (reads started), ``bytes_read``,
        ``hedges`` (second requests sent for slow reads) and ``hedge_wins`` (reads the second
        request answered first). GETs sent = requests + hedges (+ obstore's retries)."""
        engine = self._engine
        h = engine[1].hedger if engine is not None and engine[0] == os.getpid() else None
        return {
            "requests": self.requests,
            "bytes_read": self.bytes_read,
            "hedges": 0 if h is None else h.hedges,
            "hedge_wins": 0 if h is None else h.hedge_wins,
        }

    def __getstate__(self) -> dict:
        return {"root": self.root, "options": self.options}

    def __setstate__(self, state: dict) -> None:
        RemoteFiles.__init__(self, state["root"], state["options"])

    def _store_name(self, path: str) -> tuple[Any, str]:
        pid, names = self._names
        got = names.get(path)
        if got is None or pid != os.getpid():  # a new process goes through open_store's check
            if pid != os.getpid():
                names = {}
                self._names = (os.getpid(), names)
            got = names[path] = open_store(path, self.options)
        return got

    def pread(self, path: str, offset: int, size: int) -> bytes:
        """``size`` bytes of the object at ``path`` from ``offset`` (fewer only at its end).

        Waits for the range :meth:`prefetch` started or took from what was read ahead, if it
        did; else one ranged GET. A range read ahead and not answered yet is hedged from now on
        as a direct read; one whose GET failed is read again here, so its error is the one a
        direct read gives, raised by the read that needs it.
        """
        key = (path, offset, size)
        fut = self._pending.pop(key, None)
        if fut is None:
            fut = self._start([key])[key]
        elif fut.ahead:
            if fut.done():  # the read was hidden
                slow = fut.slow
                read_ahead.count(read_ahead_ready=1, slow_reads=slow, slow_reads_hidden=slow)
                got = fut.result()
            else:
                self._gets().needed_now(fut.get)
                got = fut.result()
                late = time.monotonic() - fut.started >= read_ahead.SLOW_READ_S
                read_ahead.count(read_ahead_late=1, slow_reads=late)
            if not isinstance(got, BaseException):
                return got
            read_ahead.count(read_ahead_failed=1)
            fut = self._start([key])[key]
        got = fut.result()
        if isinstance(got, BaseException) and isinstance(fut, _Slice):
            got = self._start([key])[key].result()  # this range's own GET names its error
        if isinstance(got, BaseException):
            raise got
        return got

    def prefetch(self, ranges: Sequence[tuple[str, int, int]]) -> None:
        """Start fetching ``(path, offset, size)`` ranges for the ``pread`` calls that follow.

        The GETs run concurrently in a background loop (at most ``options.concurrency`` in
        flight) while the caller reads, and decodes, the ranges that arrived first; a range
        this process read ahead (:mod:`fpipe.storage.read.read_ahead`) is taken, not read
        again. Replaces what an earlier prefetch left unread. Failures are raised by the
        matching ``pread``.
        """
        for fut in self._pending.values():
            if not fut.ahead:
                fut.cancel()
        todo = []
        pending: dict = {}
        for r in ranges:
            if r[2] > 0 and r not in pending:
                fut = read_ahead.take(r)
                pending[r] = fut
                if fut is None:
                    todo.append(r)
        if todo:
            # close small ranges share one GET (coalesce.groups), each served its own slice
            grouped = coalesce.groups(todo, READ_GAP)
            started = self._start([g.range for g in grouped])
            for g in grouped:
                whole = started[g.range]
                for k in g.members:
                    r = todo[k]
                    pending[r] = whole if len(g.members) == 1 else _Slice(whole, r[1] - g.lo, r[2])
        self._pending = pending

    def read_ahead(self, ranges: Sequence[tuple[str, int, int]]) -> list:
        """Start reading ``ranges`` ahead (the :mod:`~fpipe.storage.read.read_ahead` window of
        a worker calls this): one future per range, whose result is the bytes or the
        ``OSError`` the GET ended with. These GETs are not hedged until a reader waits for
        one, and have their own limit in flight (4 x ``options.concurrency``); their latencies
        count in the hedging threshold."""
        return list(self._start(ranges, ahead=True).values())

    def _start(self, ranges: Sequence[tuple[str, int, int]], ahead: bool = False) -> dict:
        """Futures of ``ranges``, whose GETs start with one wake-up of the I/O loop."""
        # stores are opened here, in the caller's thread: the fork check runs, and each opens once
        gets = [Get(*self._store_name(p), p, off, size, ahead) for p, off, size in ranges]
        with _READER_LOCK:
            self.requests += len(gets)
        read_ahead.count(requests=len(gets))
        self._gets().submit(gets)
        return {(g.path, g.off, g.size): g.future for g in gets}

    def _gets(self) -> Gets:
        """This process's GETs of this reader (made once per process; the hedger starts
        afresh there too: latencies of another process do not apply)."""
        got = self._engine
        if got is None or got[0] != os.getpid():
            with _READER_LOCK:
                got = self._engine
                if got is None or got[0] != os.getpid():
                    o = self.options
                    hedger = self._new_hedger()
                    gets = Gets(_io_loop(), self._request, _as_os_error, o.concurrency, hedger)
                    got = self._engine = (os.getpid(), gets)
        return got[1]

    def _request(self, store, name: str, off: int, size: int):
        return import_obstore().get_range_async(store, name, start=off, length=size)

    def open_stream(self, path: str, chunk: int = 8 << 20):
        """A local temporary copy of the object at ``path``, made by one streamed GET (``fpipe
        prepare`` scans a shard this way: read once, sequentially), and its size.

        The copy is an anonymous temporary file: it disappears when closed.
        """
        store, name = self._store_name(path)
        f = tempfile.TemporaryFile(prefix="fpipe-shard-")  # noqa: SIM115 - returned open
        try:
            for part in import_obstore().get(store, name).stream(min_chunk_size=chunk):
                f.write(part)
        except Exception as e:
            f.close()
            raise _as_os_error(path, e) from None
        size = f.tell()
        with _READER_LOCK:
            self.requests += 1
            self._streamed += size
        f.seek(0)
        return f, size

    def size(self, path: str) -> int:
        """Size of the object at ``path`` in bytes (one HEAD)."""
        store, name = self._store_name(path)
        try:
            return int(import_obstore().head(store, name)["size"])
        except Exception as e:
            raise _as_os_error(path, e) from None

    def close(self) -> None:
        """Drop prefetched data (stores stay open for the process)."""
        for fut in self._pending.values():
            if not fut.ahead:
                fut.cancel()
        self._pending = {}


class _Slice:
    """A range served from the GET of a larger one (:meth:`RemoteFiles.prefetch`): its bytes,
    or the GET's error (the reader then sends the range's own GET)."""

    __slots__ = ("at", "size", "whole")
    ahead = False

    def __init__(self, whole, at: int, size: int):
        self.whole, self.at, self.size = whole, at, size

    def result(self):
        got = self.whole.result()
        return got if isinstance(got, BaseException) else got[self.at : self.at + self.size]

    def done(self) -> bool:
        return self.whole.done()

    def cancel(self) -> bool:
        return self.whole.cancel()


def _as_os_error(path: str, e: BaseException) -> OSError:
    if isinstance(e, FileNotFoundError):
        return FileNotFoundError(f"{path}: no such object")
    if isinstance(e, OSError):
        return e
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return OSError(f"{path}: {msg}")
