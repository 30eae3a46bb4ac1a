"""Read-ahead: the byte ranges of samples a worker will read in the next steps, fetched before
it needs them, within a byte budget.

The loader knows which recipes a worker will materialize next (the plan decided them from
metadata), so the worker can start their ranged reads several steps early; a slow read then
finishes while earlier batches are still being made, and the batch that needs it does not wait.
This module holds what a worker process has read ahead: one :class:`Window` per loader pool in
this process (a thread pool's threads share theirs), each bounded by its byte budget.

- A file layer that can read asynchronously (:class:`~fpipe.storage.read.remote.RemoteFiles`:
  object storage) returns one future per range from ``read_ahead(ranges)``; the reader that
  later asks for the same range takes the future (:func:`take`) instead of sending a request,
  so a range read ahead is read once. One that only advises the kernel (local and network file
  systems: ``posix_fadvise(WILLNEED)``) returns None per range; those are kept only to count
  the budget and are let go when their step is behind.
- The budget counts the bytes of every range started and not yet taken or let go, in flight
  or held: it is never exceeded (a range larger than the whole budget is not read ahead).
  Ranges are started in step order; the rest wait until taken ranges free the budget.
- Read-ahead holds no loader state: the bytes read ahead are the bytes a direct read gives,
  and a window only ever holds ranges of recipes still to come.

The counters of this process's reads (``io_counters``) are taken by the worker after each
recipe and summed in the loader's ``stats().io``.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
from collections.abc import Sequence
from typing import Any

from fpipe.core.fork_locks import fork_safe_lock

__all__ = [
    "SLOW_READ_S",
    "Window",
    "close",
    "count",
    "peak",
    "reading_with",
    "take",
    "take_io_counters",
    "window",
]

#: A read that took this long counts as slow (an object store's ranged GET takes 10-100 ms).
SLOW_READ_S = 0.5
#: Windows kept per process (one per loader pool; the least recently used is let go: a pool
#: that ended without closing its window, say a persistent worker's previous iteration).
MAX_WINDOWS = 4

Range = tuple[str, int, int]  # (path, offset, size)

_LOCK = fork_safe_lock(globals(), "_LOCK")
_COUNTERS: collections.Counter[str] = collections.Counter()
_PEAKS: dict[str, int] = {}
_WINDOWS: collections.OrderedDict[Any, Window] = collections.OrderedDict()


def _forked() -> None:
    """A forked child starts its counters and windows afresh (its lock: fork_safe_lock)."""
    _COUNTERS.clear()
    _PEAKS.clear()
    _WINDOWS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def count(**amounts: int) -> None:
    """Add to this process's read counters (``requests=1, bytes_read=n``...)."""
    with _LOCK:
        _COUNTERS.update(amounts)


def peak(name: str, value: int) -> None:
    """Raise this process's high-water mark ``name`` to ``value``."""
    with _LOCK:
        if value > _PEAKS.get(name, 0):
            _PEAKS[name] = value


def take_io_counters() -> dict[str, int]:
    """This process's read counters since the last call (summed by the loader), and its
    high-water marks (``*_peak_bytes``, kept as the loader's maximum)."""
    with _LOCK:
        out = {k: v for k, v in _COUNTERS.items() if v}
        out.update(_PEAKS)
        _COUNTERS.clear()
        _PEAKS.clear()
    return out


class _Entry:
    __slots__ = ("future", "live", "size", "step")

    def __init__(self, step: int, size: int, future):
        self.step, self.size, self.future = step, size, future
        self.live = True  # started, and not yet taken or let go


class Window:
    """What one loader pool has read ahead in this process, within ``budget`` bytes."""

    def __init__(self, budget: int):
        self.budget = budget
        self.held = 0  #: bytes of ranges started and not yet taken or let go
        #: per range, what was started for it, by step (a range two steps read is read twice,
        #: as direct reads would)
        self._entries: dict[Range, list[_Entry]] = {}
        #: the same entries by step (taken ones stay until their step is let go), so that
        #: letting go of a step costs its own ranges, not every range held
        self._steps: dict[int, list[tuple[Range, _Entry]]] = {}
        self._queued: collections.deque[tuple[int, Any, Range]] = collections.deque()
        # reentrant: a read that ends as it is let go calls _release at once, in this thread
        self._lock = threading.RLock()

    def add(self, step: int, files: Any, ranges: Sequence[Range]) -> None:
        """Read ``ranges`` of step ``step`` ahead through ``files`` (its ``read_ahead``), as
        far as the budget allows now; the rest when it does."""
        with self._lock:
            self._queued.extend((step, files, r) for r in ranges if r[2] > 0)
        self.pump()

    def let_go(self, before: int) -> None:
        """Forget what was read ahead for steps before ``before`` and not taken (a recipe
        already materialized read it directly, or a restore moved the loader elsewhere)."""
        dropped = 0
        with self._lock:
            if any(q[0] < before for q in self._queued):  # usually empty
                self._queued = collections.deque(q for q in self._queued if q[0] >= before)
            for step in [s for s in self._steps if s < before]:
                for key, entry in self._steps.pop(step):
                    if not entry.live:
                        continue  # taken
                    entry.live = False
                    entries = self._entries[key]
                    entries.remove(entry)
                    if not entries:
                        del self._entries[key]
                    dropped += self._drop(entry)
        if dropped:
            count(read_ahead_dropped=dropped)
        self.pump()

    def _drop(self, entry: _Entry) -> int:
        """Release an entry nobody will take: its bytes count until its read ends."""
        fut = entry.future
        if fut is None or fut.cancel() or fut.done():
            self.held -= entry.size
            return fut is not None
        fut.add_done_callback(lambda _f, n=entry.size: self._release(n))
        return 1

    def _release(self, size: int) -> None:
        with self._lock:
            self.held -= size
        self.pump()

    def take(self, key: Range):
        """The future of range ``key`` if it was read ahead (it is then no longer held)."""
        with self._lock:
            entries = self._entries.get(key)
            if not entries or entries[0].future is None:
                return None
            entry = entries.pop(0)
            entry.live = False
            if not entries:
                del self._entries[key]
            self.held -= entry.size
        self.pump()
        return entry.future

    def pump(self) -> None:
        """Start queued ranges, in step order, while the budget allows."""
        starts: dict[int, tuple[Any, list[tuple[int, Range]]]] = {}
        with self._lock:
            while self._queued:
                step, files, r = self._queued[0]
                if r[2] > self.budget:
                    self._queued.popleft()  # never fits
                    continue
                if self.held + r[2] > self.budget:
                    break
                self._queued.popleft()
                self.held += r[2]
                entry = _Entry(step, r[2], None)
                self._entries.setdefault(r, []).append(entry)
                self._steps.setdefault(step, []).append((r, entry))
                starts.setdefault(id(files), (files, []))[1].append((entry, r))
            held = self.held
        if not starts:
            return
        peak("read_ahead_peak_bytes", held)
        for files, todo in starts.values():
            futures = files.read_ahead([r for _, r in todo])
            count(read_ahead_ranges=len(todo), read_ahead_bytes=sum(r[2] for _, r in todo))
            with self._lock:
                for (entry, _), fut in zip(todo, futures):
                    if entry.live:
                        entry.future = fut
                    elif fut is not None:  # let go while starting: nobody takes it
                        fut.cancel()


def window(token: Any, budget: int) -> Window:
    """This process's window of the loader pool ``token`` (made on first use)."""
    with _LOCK:
        got = _WINDOWS.get(token)
        if got is not None:
            # in use: a live pool's window is not the one let go when a fifth pool starts
            _WINDOWS.move_to_end(token)
        else:
            got = _WINDOWS[token] = Window(budget)
            while len(_WINDOWS) > MAX_WINDOWS:
                _, old = _WINDOWS.popitem(last=False)
                threading.Thread(target=old.let_go, args=(1 << 62,), daemon=True).start()
        return got


def close(token: Any) -> None:
    """Let go of everything the window of pool ``token`` holds in this process (the pool
    ended)."""
    with _LOCK:
        got = _WINDOWS.pop(token, None)
    if got is not None:
        got.let_go(1 << 62)


_CURRENT = threading.local()


@contextlib.contextmanager
def reading_with(win: Window | None):
    """Reads in this thread take what ``win`` read ahead (a task of its pool runs here)."""
    before = getattr(_CURRENT, "window", None)
    _CURRENT.window = win
    try:
        yield
    finally:
        _CURRENT.window = before


def take(key: Range):
    """The future of range ``key`` if the window of the task this thread runs read it ahead
    (:func:`reading_with`), else None."""
    win = getattr(_CURRENT, "window", None)
    return None if win is None else win.take(key)
