"""Energon's split of a dataset to ranks: the rank's part is what its workers would read.

Energon shards a dataset over its *global workers* (``max(1, num_workers) * world_size``): each
gets ``n // G`` samples, and the ``n % G`` left over go one each to workers in a fixed order that
spreads them evenly (halves interleaved recursively: for 16 workers 0, 8, 4, 12, 2, ...), shifted
by a ``rotation`` (in a blend, the samples of the datasets before this one) so that blended small
datasets do not all favour the same workers. Worker parts are contiguous in index order and rank
``r`` reads the parts of workers ``[r * W, (r + 1) * W)``: its own contiguous range, which may be
empty. :func:`worker_split` is that range as a view, for ``distribution="energon"``; the rest of
the rank's plan is as in per-rank mode (:func:`fpipe.plan.distribute.per_rank`). Every sample is
in exactly one rank's part.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.core.records import Config
from fpipe.core.stage import View
from fpipe.plan.distribute import PER_RANK_HINT

__all__ = [
    "WorkerSplitConfig",
    "energon_repeat_count",
    "remainder_order",
    "worker_range",
    "worker_split",
    "worker_starts",
]


def remainder_order(n: int) -> list[int]:
    """The order in which ``n`` workers get one of the samples left over: the first half's
    order and the second half's interleaved (recursively), so any prefix is spread evenly.

    >>> remainder_order(8)
    [0, 4, 2, 6, 1, 5, 3, 7]
    """

    def order(items: list[int]) -> list[int]:
        if len(items) <= 2:
            return items
        first, second = order(items[: len(items) // 2]), order(items[len(items) // 2 :])
        out = []
        for i in range(len(second)):  # the second half is the longer one (or as long)
            if i < len(first):
                out.append(first[i])
            out.append(second[i])
        return out

    return order(list(range(n)))


def worker_range(
    n: int, *, rank: int, world_size: int, workers: int, rotation: int = 0
) -> tuple[int, int]:
    """``[lo, hi)``: the positions of ``n`` samples that rank ``rank`` reads under Energon's
    split over ``max(1, workers) * world_size`` global workers (see the module doc).

    >>> [worker_range(55, rank=r, world_size=3, workers=5) for r in range(3)]
    [(0, 19), (19, 38), (38, 55)]
    """
    counts = _rank_worker_counts(n, rank, world_size, workers, rotation)
    lo = int(counts[0])
    return lo, lo + int(counts[1:].sum())


def worker_starts(
    n: int, *, rank: int, world_size: int, workers: int, rotation: int = 0
) -> list[int]:
    """Where each worker's part starts inside rank ``rank``'s part (positions of the part,
    the first 0; a worker with no sample repeats its neighbour's start): Energon reads each
    worker's part on its own, so no slice crosses these.

    >>> worker_starts(55, rank=0, world_size=3, workers=5)
    [0, 4, 8, 12, 16]
    """
    counts = _rank_worker_counts(n, rank, world_size, workers, rotation)
    return [0, *np.cumsum(counts[1:-1]).tolist()]


def energon_repeat_count(
    n: int, repeats: float, *, rank: int, world_size: int, workers: int, rotation: int = 0
) -> int:
    """Samples that rank ``rank`` reads from ``n`` samples repeated ``repeats`` times under
    Energon's split: each of its workers reads ``int(part * repeats)`` of its own part
    (Energon's ``RepeatDataset`` counts per worker, so a fractional ``repeats`` rounds down
    on every worker, not once for the rank).

    >>> energon_repeat_count(55, 1.5, rank=0, world_size=2, workers=2, rotation=55)
    40
    """
    counts = _rank_worker_counts(n, rank, world_size, workers, rotation)
    return sum(int(int(c) * repeats) for c in counts[1:].tolist())


def _rank_worker_counts(
    n: int, rank: int, world_size: int, workers: int, rotation: int
) -> np.ndarray:
    """[samples of the workers before rank ``rank``, then each of its workers' samples]
    under Energon's split of ``n`` samples over ``max(1, workers) * world_size`` workers."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ConfigError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
    per_rank = max(1, workers)
    total = per_rank * world_size
    base, extra = divmod(n, total)
    counts = np.full(total, base, dtype=np.int64)
    for j, worker in enumerate(remainder_order(total)):
        if (j - rotation) % total < extra:
            counts[worker] += 1
    before = counts[: rank * per_rank].sum()
    return np.concatenate([[before], counts[rank * per_rank : (rank + 1) * per_rank]])


class WorkerSplitConfig(Config, frozen=True):
    """Rank ``rank`` of ``world_size`` reads its workers' part (``workers`` per rank) of the
    samples, Energon's split (``rotation``: its remainder shift). Nothing is declared
    compatible: the part, and so the state, depends on every field."""

    mismatch_hint: ClassVar[str] = PER_RANK_HINT

    rank: int
    world_size: int
    workers: int
    rotation: int = 0


def worker_split(
    view: View, *, rank: int, world_size: int, workers: int, rotation: int = 0,
    name: str = "worker_split",
) -> View:  # fmt: skip
    """The part of ``view`` that rank ``rank`` reads under Energon's split (see the module
    doc); it may be empty. Build the rest of the rank's plan on top of it.

    Example:
        >>> from fpipe.plan.source import samples
        >>> v = worker_split(samples(55), rank=2, world_size=3, workers=5)
        >>> v.size, v.gather(0, 0, np.arange(2)).index.tolist()
        (17, [38, 39])
    """
    lo, hi = worker_range(
        view.size, rank=rank, world_size=world_size, workers=workers, rotation=rotation
    )
    inner = view.gather
    config = WorkerSplitConfig(rank=rank, world_size=world_size, workers=max(1, workers),
                               rotation=rotation % (max(1, workers) * world_size))  # fmt: skip

    def gather(root, epoch, positions):
        return inner(root, epoch, np.asarray(positions, dtype=np.int64) + lo)

    return View(name=name, config=config, size=hi - lo, gather=gather, inputs=(view,))
