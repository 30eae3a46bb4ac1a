"""Energon's batches of a validation pass on one rank: each worker batches its own part.

Under Energon's split (:mod:`fpipe.plan.worker_split`) each of a rank's workers reads its own
contiguous part and makes batches of it, the last one short, and the loader takes one batch of
each worker in turn, skipping workers that have ended. A rank with 4 workers and 35 samples in
batches of 8 therefore gets 8, 8, 8, 8, 1, 1, 1 (7 batches, where one reader would make 5).
:func:`worker_batches` is that order of the rank's samples as a view, and the sizes of its
batches as a :class:`~fpipe.plan.batch_schedule.BatchSchedule` for :func:`fpipe.plan.batch`: the
plan stays a pure function of the topology (``num_workers`` of the dataset's worker config, not
of the loader), so the loader's own workers still do not change the batches.
"""

from __future__ import annotations

import numpy as np

from fpipe.core.records import Config
from fpipe.core.stage import View
from fpipe.plan.batch_schedule import BatchSchedule
from fpipe.plan.worker_split import _rank_worker_counts

__all__ = ["WorkerBatchesConfig", "worker_batch_layout", "worker_batches"]


def worker_batch_layout(
    n: int, *, rank: int, world_size: int, workers: int, batch_size: int
) -> tuple[np.ndarray, list[int]]:
    """(positions of ``n`` samples in the order rank ``rank``'s loader yields them, the size of
    each batch), under Energon's split and per-worker batching (see the module doc).

    >>> order, sizes = worker_batch_layout(35, rank=0, world_size=1, workers=4, batch_size=8)
    >>> sizes
    [8, 8, 8, 8, 1, 1, 1]
    """
    counts = _rank_worker_counts(n, rank, world_size, workers, 0)
    start = int(counts[0])
    chunks: list[list[tuple[int, int]]] = []  # per worker: its batches as (start, size)
    for count in counts[1:].tolist():
        chunks.append(
            [(start + i, min(batch_size, count - i)) for i in range(0, count, batch_size)]
        )
        start += count
    order: list[np.ndarray] = []
    sizes: list[int] = []
    for turn in range(max((len(c) for c in chunks), default=0)):
        for worker in chunks:
            if turn < len(worker):
                lo, size = worker[turn]
                order.append(np.arange(lo, lo + size, dtype=np.int64))
                sizes.append(size)
    positions = np.concatenate(order) if order else np.zeros(0, dtype=np.int64)
    return positions, sizes


class WorkerBatchesConfig(Config, frozen=True):
    """Rank ``rank`` of ``world_size`` with ``workers`` workers, each batching its own part in
    batches of ``batch_size``."""

    rank: int
    world_size: int
    workers: int
    batch_size: int


def worker_batches(
    view: View, *, rank: int, world_size: int, workers: int, batch_size: int,
    name: str = "worker_batches",
) -> tuple[View, BatchSchedule, int]:  # fmt: skip
    """(the rank's samples of ``view`` in the order of Energon's per-worker batches, the
    per-rank batch schedule that cuts them into those batches, the number of batches); see the
    module doc."""
    positions, sizes = worker_batch_layout(
        view.size, rank=rank, world_size=world_size, workers=workers, batch_size=batch_size
    )
    inner = view.gather
    config = WorkerBatchesConfig(
        rank=rank, world_size=world_size, workers=max(1, workers), batch_size=batch_size
    )

    def gather(root, epoch, at):
        return inner(root, epoch, positions[np.asarray(at, dtype=np.int64)])

    steps: list[int] = []
    merged: list[int] = []
    for step, size in enumerate(sizes or [batch_size]):
        if not merged or merged[-1] != size:
            steps.append(step)
            merged.append(size)
    schedule = BatchSchedule(steps=tuple(steps), sizes=tuple(merged))
    out = View(name=name, config=config, size=len(positions), gather=gather, inputs=(view,))
    return out, schedule, len(sizes)
