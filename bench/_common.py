"""Helpers shared by the benchmarks in ``bench/`` (not a test module, not collected by pytest).

Holds the issue-2 six-stage plan (the same pipeline as ``tests/helpers.six_stage``, repeated here
so the benchmarks do not import the test suite), a fast way to reach its state after a million
steps, and small timing helpers that report medians.
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

from fpipe.core import Lifted, Pipeline, chain  # noqa: E402
from fpipe.plan import (  # noqa: E402
    BatchState,
    batch,
    distribute,
    filter_refs,
    repeat,
    samples,
    slice_shuffle,
    window_shuffle,
)

__all__ = [
    "advance",
    "fast_forward",
    "machine_line",
    "median_time",
    "six_stage",
]


def six_stage(
    num_samples: int = 100_000,
    window: int = 10_000,
    batch_size: int = 32,
    world_size: int = 1,
    rank: int = 0,
    seed: int = 1,
    slice_size: int = 100,
) -> Pipeline:
    """The issue's 6-stage plan: slice shuffle, repeat, window shuffle, filter, distribute, batch.

    Identical to ``tests/helpers.six_stage`` (a filter on a synthetic ``tokens`` column keeps
    90% of the refs).
    """
    tokens = (np.arange(num_samples) * 7919) % 1000
    view = slice_shuffle(samples(num_samples, columns={"tokens": tokens}), slice_size)
    src = chain(
        repeat(view, None),
        window_shuffle(window),
        filter_refs("tokens", "<", 900),
        distribute(batch_size * world_size, rank=rank, world_size=world_size),
        batch(batch_size),
    )
    return Pipeline(src, seed=seed)


def advance(p: Pipeline, steps: int, state: Any = None) -> Any:
    """The state after pulling ``steps`` more batches one at a time (the real run)."""
    state = p.init() if state is None else state
    nxt = p.next
    for _ in range(steps):
        state, out = nxt(state, 1)
        if not len(out):
            raise RuntimeError("stream ended")
    return state


def fast_forward(p: Pipeline, steps: int) -> Any:
    """The state of a :func:`six_stage` pipeline after ``steps`` batches, reached quickly.

    The stream under ``distribute`` (repeat -> window shuffle -> filter) is pulled in large
    chunks, then the distribute and batch states are put at that global-batch boundary. This is
    ``tests/core/test_snapshot.py::fast_forward``; ``test_fast_forward_matches`` there checks it
    against the real run, and the plan benchmark checks it again at a small step.
    """
    state = p.init()
    batch_lift = state
    dist_lift = batch_lift.up
    inner = dist_lift.up
    gbs = p.source.parts[-2][1].global_batch_size
    need = steps * gbs
    inner_next = p.source.upstream.upstream.next  # the stream under distribute
    while need:
        inner, chunk = inner_next(inner, min(need, 1 << 20))
        if not len(chunk):
            raise RuntimeError("stream ended")
        need -= len(chunk)
    bs = batch_lift.st
    return Lifted(Lifted(inner, dist_lift.st, 0), BatchState(bs.key, steps, bs.dropped), 0)


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
