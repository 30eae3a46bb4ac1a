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

This is the policy; the requests are sent by :mod:`fpipe.storage.read._gets`, which watches the
reads in flight and asks :meth:`Hedger.delay` and :meth:`Hedger.spend`. Everything here runs
on the I/O loop's thread (no locks); the counts also go to the process's read counters
(:func:`fpipe.storage.read.read_ahead.take_io_counters`).
"""

from __future__ import annotations

import collections
import math

from fpipe.storage.read.read_ahead import count

__all__ = ["Hedger"]

#: Recent latencies the threshold is taken from, and how many are needed before any hedge.
WINDOW = 200
WARMUP = 20
#: The threshold is taken again after this many new latencies (not at every read: sorting the
#: window per read cost more than the read's own bookkeeping).
REFRESH = 16


class Hedger:
    """The hedging policy of one reader in one process, and its counters.

    ``reads``: reads counted (:meth:`started`, :meth:`observed`); ``hedges``: second requests sent;
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
        self._new = 0  # latencies recorded since the threshold was taken
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
        """A read's latency (of the request that answered, from its own start)."""
        self.latencies.append(seconds)
        self._new += 1
        if self._new >= REFRESH or len(self.latencies) <= self.warmup:
            self._threshold = None
            self._new = 0

    def started(self) -> None:
        """A read that may be hedged started: it earns its share of hedges."""
        self.reads += 1
        self._tokens = min(self._burst, self._tokens + self.max_fraction)

    def observed(self, seconds: float) -> None:
        """A read that is not hedged itself (read ahead) ended: its latency counts in the
        threshold, and it earns its share of hedges."""
        self.started()
        self.record(seconds)

    def spend(self) -> bool:
        """Whether the cap allows one more hedge now (counted in ``hedges`` if so)."""
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
