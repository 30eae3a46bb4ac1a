"""Helpers shared by the benchmarks in ``bench/`` (not a test module, not collected by pytest).

Re-exports the issue-2 six-stage plan and its fast-forward from ``tests/helpers.py`` (one copy,
checked against a real run by ``tests/core/test_snapshot.py::test_fast_forward_matches``), and
small timing helpers that report medians.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fpipe.core import Pipeline  # noqa: E402
from tests.helpers import fast_forward, six_stage  # noqa: E402

__all__ = [
    "advance",
    "fast_forward",
    "machine_line",
    "median_time",
    "six_stage",
    "warm_files",
]


def advance(p: Pipeline, steps: int, state: Any = None) -> Any:
    """The state after pulling ``steps`` more batches one at a time (the real run)."""
    state = p.init() if state is None else state
    nxt = p.next
    for _ in range(steps):
        state, out = nxt(state, 1)
        if not len(out):
            raise RuntimeError("stream ended")
    return state


def median_time(fn: Callable[[], Any], reps: int, setup: Callable[[], Any] | None = None) -> float:
    """Median wall time of ``fn(setup())`` (or ``fn()``) over ``reps`` calls, in seconds.

    ``setup`` runs outside the timed region before every call; its result is passed to ``fn``.
    """
    times = []
    clock = time.perf_counter
    for _ in range(reps):
        if setup is None:
            t0 = clock()
            fn()
        else:
            arg = setup()
            t0 = clock()
            fn(arg)
        times.append(clock() - t0)
    return statistics.median(times)


def machine_line() -> str:
    """One line naming the Python, numpy and machine the figures come from."""
    return (
        f"python {platform.python_version()}, numpy {np.__version__}, "
        f"{platform.machine()}, {os.cpu_count()} cpus ({platform.processor() or 'unknown cpu'})"
    )


def warm_files(*roots: str | os.PathLike, keep: Callable[[Path], bool] | None = None) -> None:
    """Read every file under ``roots`` (those ``keep`` keeps), untimed, so that the runs that
    follow find them in the page cache. Once at the start of a benchmark is not enough where the
    system pages out what was not touched for a while (the benchmark machine's DAMON
    ``pageout`` scheme takes page-cache pages idle for about 60 s): the loaders that read at
    random (fpipe, Grain, SPDL) would then wait on the disk where sequential readers (the bare
    loop, WebDataset) have the kernel's read-ahead."""
    for root in roots:
        for p in sorted(Path(root).rglob("*")):
            if p.is_file() and (keep is None or keep(p)):
                with open(p, "rb") as f:
                    while f.read(1 << 24):
                        pass
