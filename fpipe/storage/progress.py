"""A dependency-free progress bar on stderr (one line, redrawn at most 10 times a second)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """``Progress(total, "prepare")``; call ``update(done_units, samples)``, then ``close()``."""

    def __init__(self, total: int, label: str, *, enabled: bool = True, out: TextIO | None = None):
        self.total, self.label, self.enabled = total, label, enabled
        self.out = out or sys.stderr
        self.t0 = self._last = time.perf_counter()
        self.done = self.samples = 0

    def update(self, units: int = 1, samples: int = 0) -> None:
        """Count ``units`` more finished shards and ``samples`` more samples."""
        self.done += units
        self.samples += samples
        now = time.perf_counter()
        if self.enabled and (now - self._last >= 0.1 or self.done >= self.total):
            self._last = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        frac = self.done / self.total if self.total else 1.0
        bar = "#" * int(frac * 30)
        rate = self.samples / max(now - self.t0, 1e-9)
        self.out.write(
            f"\r{self.label} [{bar:<30}] {self.done}/{self.total} shards "
            f"{self.samples:,} samples {rate:,.0f}/s"
        )
        self.out.flush()

    def close(self) -> None:
        """Finish the line."""
        if self.enabled:
            self._draw(time.perf_counter())
            self.out.write("\n")
            self.out.flush()
