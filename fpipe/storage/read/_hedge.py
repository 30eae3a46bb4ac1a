"""Hedged reads: a ranged GET that takes longer than most recent ones gets a second, identical
request, and whichever answers first is used; the other is cancelled.

One slow request in twenty is normal on a shared object store (a busy disk, a slow replica, a
lost packet), and a batch waits for its slowest sample. A second request for the same range
usually lands elsewhere and answers in the ordinary time, so the batch no longer follows the
tail. The bytes are the same (same object, same range; the tar reader checks its headers as
for any read), so what the loader delivers does not change.

Bounded: at most one hedge per read, only after ``warmup`` latencies are known, and at most
``max_fraction`` of the reads hedged (a token bucket: each read adds ``max_fraction`` of a
token, a hedge takes one, so hedges never exceed ``max_fraction`` x reads). The threshold is the
``quantile`` of the last ``window`` latencies, and at least ``min_delay_s``. A hedged read
records the latency of the request that answered, measured from its own start: a stuck
request's time is not known and does not raise the threshold.

Everything here runs on the I/O loop's thread (no locks); the counts also go to the process's
read counters (:func:`fpipe.storage.read.read_ahead.take_io_counters`).
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
from collections.abc import Awaitable, Callable

from fpipe.storage.read.read_ahead import count

__all__ = ["Hedger"]

#: Recent latencies the threshold is taken from, and how many are needed before any hedge.
WINDOW = 200
WARMUP = 20


class Hedger:
    """The hedging policy of one reader in one process, and its counters.

    ``reads``: reads started through :meth:`read`; ``hedges``: second requests sent;
    ``hedge_wins``: reads the second request answered first.
    """

    def __init__(
        self, *, quantile: float, max_fraction: float, min_delay_s: float, warmup: int = WARMUP
    ):
        self.quantile = quantile
        self.max_fraction = max_fraction
        self.min_delay_s = min_delay_s
        self.warmup = warmup
        self.latencies: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self._burst = max(1.0, max_fraction * WINDOW)
        self._tokens = 0.0
        self._threshold: float | None = None
        self.reads = 0
        self.hedges = 0
        self.hedge_wins = 0

    def delay(self) -> float | None:
        """Seconds after which a read is hedged (None: not enough latencies known yet)."""
        if len(self.latencies) < self.warmup:
            return None
        if self._threshold is None:
            ordered = sorted(self.latencies)
            at = min(len(ordered) - 1, math.ceil(self.quantile * len(ordered)) - 1)
            self._threshold = max(self.min_delay_s, ordered[max(0, at)])
        return self._threshold

    def record(self, seconds: float) -> None:
        self.latencies.append(seconds)
        self._threshold = None

    def observed(self, seconds: float) -> None:
        """A read made outside :meth:`read` (read ahead, never hedged itself): its latency
        counts in the threshold, and it earns its share of hedges."""
        self.reads += 1
        self._tokens = min(self._burst, self._tokens + self.max_fraction)
        self.record(seconds)

    def spend(self) -> bool:
        """Whether the cap allows one more hedge now (counted in ``hedges`` if so): for a
        read that was read ahead and is late."""
        if self._take_token():
            self.hedges += 1
            count(hedges=1)
            return True
        return False

    def won(self) -> None:
        """Count a read the second request answered first."""
        self.hedge_wins += 1
        count(hedge_wins=1)

    def _take_token(self) -> bool:
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    async def read(self, fetch: Callable[[], Awaitable[bytes]]) -> bytes:
        """``await fetch()``, hedged: a second ``fetch()`` if the first is still running after
        :meth:`delay` and the cap allows; the first to succeed wins, the other is cancelled.
        Raises the first request's error only when no request succeeded."""
        self.reads += 1
        self._tokens = min(self._burst, self._tokens + self.max_fraction)
        delay = self.delay()
        first = asyncio.ensure_future(_timed(fetch))
        tasks = {first}
        try:
            if delay is not None:
                done, _ = await asyncio.wait(tasks, timeout=delay)
                if not done and self.spend():
                    tasks.add(asyncio.ensure_future(_timed(fetch)))
            error: BaseException | None = None
            while tasks:
                done, tasks = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in sorted(done, key=lambda t: t is not first):  # the first on a tie
                    if task.exception() is None:
                        data, seconds = task.result()
                        self.record(seconds)
                        if task is not first:
                            self.won()
                        return data
                    if error is None or task is first:
                        error = task.exception()
            assert error is not None
            raise error
        finally:
            for task in tasks:  # the loser (or both, if this read was cancelled)
                task.cancel()


async def _timed(fetch: Callable[[], Awaitable[bytes]]) -> tuple[bytes, float]:
    start = time.monotonic()
    data = await fetch()
    return data, time.monotonic() - start
