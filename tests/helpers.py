"""Pipelines shared by tests and benchmarks."""

import numpy as np

from fpipe.core import Pipeline, chain
from fpipe.plan import (
    batch,
    distribute,
    filter_refs,
    repeat,
    samples,
    slice_shuffle,
    window_shuffle,
)


def six_stage(
    num_samples=100_000,
    window=10_000,
    batch_size=32,
    world_size=1,
    rank=0,
    seed=1,
    slice_size=100,
    num_epochs=None,
):
    """The issue's 6-stage plan: slice shuffle, repeat, window shuffle, filter, distribute,
    batch."""
    tokens = (np.arange(num_samples) * 7919) % 1000
    view = slice_shuffle(samples(num_samples, columns={"tokens": tokens}), slice_size)
    src = chain(
        repeat(view, num_epochs),
        window_shuffle(window),
        filter_refs("tokens", "<", 900),
        distribute(batch_size * world_size, rank=rank, world_size=world_size),
        batch(batch_size),
    )
    return Pipeline(src, seed=seed)
