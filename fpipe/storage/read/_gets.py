"""Ranged GETs on a process's I/O loop, with a few Python calls per GET and hedging per batch.

:class:`~fpipe.storage.read.remote.RemoteFiles` hands a batch of ranges here with one wake-up
of the I/O loop (:meth:`Gets.submit`); each GET is then one obstore call whose answer sets the
reader's future from a done callback. There is no asyncio task, semaphore or wait per GET: on
two cores shared with decoding, that machinery cost about as much CPU per GET as obstore's own
HTTP work. What the per-GET coroutines did is done here per batch:

- Limits in flight: two lanes, one for reads needed now (``concurrency``) and one for reads
  ahead (4 x ``concurrency``); a lane starts queued ranges as earlier GETs end.
- Hedging (:mod:`fpipe.storage.read._hedge` decides when and how often): each read needed now
  (a direct read, or a read ahead that a reader waits for) is watched from then on; one timer
  for all of them fires at the earliest deadline and sends a second request for each read
  still unanswered past the hedge delay, while the cap allows. The first answer wins and the
  other request is cancelled; an error is reported only when no request succeeded (the
  first request's error).

Everything except :meth:`Gets.submit` and :meth:`Gets.needed_now` runs on the I/O loop's
thread (no locks).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import time
from collections.abc import Callable
from typing import Any

from fpipe.storage.read import read_ahead
from fpipe.storage.read._hedge import Hedger

__all__ = ["Gets", "RangeFuture"]


class RangeFuture(concurrent.futures.Future):
    """The bytes of one range, or the ``OSError`` its GET ended with (as a result, so that the
    reader raises it in its own thread). ``ahead``: read ahead (a read-ahead window holds it,
    so a later prefetch must not cancel it); ``slow``: its GET took at least
    :data:`~fpipe.storage.read.read_ahead.SLOW_READ_S`; ``started``: when it was asked for."""

    def __init__(self, get: Get):
        super().__init__()
        self.get = get
        self.ahead = get.ahead
        self.slow = False
        self.started = time.monotonic()


class Get:
    """One range to read: where, which lane, its requests in flight (two when hedged)."""

    __slots__ = (
        "ahead", "deadline", "error", "future", "hedged", "launched", "name", "off", "path",
        "requests", "size", "slot", "started", "store",
    )  # fmt: skip

    def __init__(self, store: Any, name: str, path: str, off: int, size: int, ahead: bool):
        self.store, self.name, self.path, self.off, self.size = store, name, path, off, size
        self.ahead = ahead
        self.future = RangeFuture(self)
        self.requests: list = []
        self.error: BaseException | None = None
        self.launched = self.hedged = False
        #: the Gets whose lane this read holds a place in while its requests run: not always
        #: the one that answers it (thread workers take each other's reads ahead, and the
        #: reader's own Gets hedges one it waits for)
        self.slot: Gets | None = None
        self.started = self.deadline = 0.0


class Gets:
    """This process's GETs of one :class:`RemoteFiles` (made on its I/O loop's process).

    ``request(store, name, offset, size)`` starts one ranged GET and returns an awaitable of its
    bytes (obstore's ``get_range_async``); ``as_error(path, exception)`` makes the ``OSError``
    a reader raises.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        request: Callable[[Any, str, int, int], Any],
        as_error: Callable[[str, BaseException], OSError],
        concurrency: int,
        hedger: Hedger | None,
    ):
        self.loop = loop
        self.hedger = hedger
        self.bytes_read = 0
        self._request = request
        self._as_error = as_error
        self._limit = {False: concurrency, True: 4 * concurrency}
        self._busy = {False: 0, True: 0}
        self._queue: dict[bool, collections.deque[Get]] = {
            False: collections.deque(),
            True: collections.deque(),
        }
        self._watched: collections.deque[Get] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None

    # -- any thread

    def submit(self, gets: list[Get]) -> None:
        """Start ``gets`` (one wake-up of the loop for all of them)."""
        self.loop.call_soon_threadsafe(self._enqueue, gets)

    def needed_now(self, get: Get) -> None:
        """A reader waits for ``get``, read ahead and not answered yet: start it now if it was
        still queued, and hedge it as a direct read from now on."""
        self.loop.call_soon_threadsafe(self._needed_now, get)

    # -- the loop's thread

    def _enqueue(self, gets: list[Get]) -> None:
        lanes = set()
        for get in gets:
            self._queue[get.ahead].append(get)
            lanes.add(get.ahead)
        for lane in lanes:
            self._pump(lane)

    def _pump(self, lane: bool) -> None:
        queue, limit = self._queue[lane], self._limit[lane]
        now = time.monotonic()
        while queue and self._busy[lane] < limit:
            get = queue.popleft()
            if get.launched or not get.future.set_running_or_notify_cancel():
                continue  # started as a read needed now, or let go before it started
            self._busy[lane] += 1
            get.slot, get.launched = self, True
            get.started = now
            self._send(get, False)
            if not lane:
                if self.hedger is not None:
                    self.hedger.started()
                self._watch(get, now)

    def _needed_now(self, get: Get) -> None:
        if get.future.done():
            return
        now = time.monotonic()
        if not get.launched:
            if not get.future.set_running_or_notify_cancel():
                return
            get.launched = True
            get.started = now
            self._send(get, False)
        self._watch(get, now)

    def _send(self, get: Get, hedge: bool) -> None:
        try:
            request = asyncio.ensure_future(self._request(get.store, get.name, get.off, get.size))
        except Exception as e:  # noqa: BLE001 - the reader gets it as its read's error
            self._failed(get, hedge, e)
            return
        get.requests.append(request)
        request.add_done_callback(functools.partial(self._answered, get, time.monotonic(), hedge))

    def _answered(self, get: Get, start: float, hedge: bool, request) -> None:
        """A request of ``get`` ended. The reader waits on ``get.future`` without a timeout,
        so whatever goes wrong here still answers it."""
        try:
            self._answer(get, start, hedge, request)
        except BaseException as e:  # noqa: BLE001 - handed to the reader, never lost
            self._finish(get, self._as_error(get.path, e))
            raise

    def _answer(self, get: Get, start: float, hedge: bool, request) -> None:
        if request in get.requests:
            get.requests.remove(request)
        if get.future.done() or request.cancelled():
            return  # the other request answered first
        try:
            data = bytes(request.result())
        except Exception as e:  # noqa: BLE001 - the reader gets it as its read's error
            self._failed(get, hedge, e)
            return
        seconds = time.monotonic() - start
        for other in get.requests:
            other.cancel()
        h = self.hedger
        if h is not None:
            if hedge:
                h.won()
            if not get.ahead:
                h.record(seconds)  # the answering request's time, from its own start
            elif not hedge:
                h.observed(seconds)  # a read ahead: its time, and its share of hedges
        self.bytes_read += len(data)
        if get.ahead:
            get.future.slow = seconds >= read_ahead.SLOW_READ_S
            read_ahead.count(bytes_read=len(data))
        else:
            slow = time.monotonic() - get.started >= read_ahead.SLOW_READ_S
            read_ahead.count(bytes_read=len(data), slow_reads=slow)
        self._finish(get, data)

    def _failed(self, get: Get, hedge: bool, error: BaseException) -> None:
        if not hedge or get.error is None:
            get.error = error  # the first request's error is the one reported
        if get.requests:
            return  # the other request may still succeed
        self._finish(get, self._as_error(get.path, get.error))

    def _finish(self, get: Get, result: Any) -> None:
        if not get.future.done():
            get.future.set_result(result)
        owner = get.slot
        if owner is not None:
            get.slot = None
            owner._busy[get.ahead] -= 1
            owner._pump(get.ahead)

    def _watch(self, get: Get, now: float) -> None:
        """Hedge ``get`` if it is still unanswered after the hedge delay from ``now``."""
        h = self.hedger
        delay = None if h is None else h.delay()
        if delay is None:
            return  # not enough latencies known yet (or hedging off)
        get.deadline = now + delay
        self._watched.append(get)
        if self._timer is None:
            self._timer = self.loop.call_at(self.loop.time() + delay, self._due)

    def _due(self) -> None:
        """The timer: a second request for each watched read past its deadline (while the cap
        allows; one per read), then the timer again for the next deadline."""
        self._timer = None
        now = time.monotonic()
        watched, h = self._watched, self.hedger
        while watched:
            get = watched[0]
            if get.future.done() or get.hedged:
                watched.popleft()
                continue
            if get.deadline > now:
                break
            watched.popleft()
            if h is not None and h.spend():
                get.hedged = True
                self._send(get, True)
        if watched:
            left = max(0.0, watched[0].deadline - now)
            self._timer = self.loop.call_at(self.loop.time() + left, self._due)
