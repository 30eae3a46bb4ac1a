"""Which recipes each task tells its worker to read ahead (see
:mod:`fpipe.materialize.read_ahead` for the worker's side).

The plan sampler plans ``reach`` recipes past the one it hands out (metadata only; the loader's
state still follows the batches taken, not this). Worker processes get their tasks in turn
(torch's DataLoader gives task ``k`` to worker ``k mod N``), so worker ``w``'s horizon is its
own next ``per_worker`` recipes. Its first task names only itself: the first batch's ranges
are read all at once, and not behind a horizon of other reads. Its second names the whole
horizon, and from then on each task names the one recipe entering it. A pool that
shares one process (threads, or no workers) is one worker seen this way.
A restored or recovered loader starts a new pool, whose horizon starts at the restored step.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Sequence

from fpipe.materialize.read_ahead import ReadAheadHint

__all__ = ["DEFAULT_READ_AHEAD_BYTES", "DEFAULT_READ_AHEAD_STEPS", "Horizon"]

#: Bytes a worker reads ahead and holds at most (datasets on object storage, by default).
DEFAULT_READ_AHEAD_BYTES = 64 << 20
#: Loader steps read ahead (shared among the workers: each reads its own recipes among them).
DEFAULT_READ_AHEAD_STEPS = 64

_POOLS = itertools.count(1)


class Horizon:
    """The read-ahead hints of one worker pool: ``steps`` loader steps ahead, ``budget`` bytes
    per window, over ``workers`` workers taking tasks in turn (1: one shared process, whose
    window keeps ``keep`` steps behind the task it runs, its tasks in flight)."""

    def __init__(self, steps: int, budget: int, workers: int, keep: int = 0):
        self.workers = max(1, workers)
        self.per_worker = max(1, math.ceil(steps / self.workers))
        self.budget, self.keep = budget, keep
        self.token = (os.getpid(), next(_POOLS))

    @property
    def reach(self) -> int:
        """Recipes planned past the task handed out."""
        return self.per_worker * self.workers

    def _opened(self, j: int) -> int:
        """The horizon (own recipes ahead) at a worker's ``j``-th task: none at its first,
        then ``per_worker``."""
        return 0 if j == 0 else self.per_worker

    def needed(self, k: int) -> int:
        """Recipes task ``k``'s hint looks past it (none at a worker's first task: the first
        batches are not delayed by planning ahead)."""
        return self._opened(k // self.workers) * self.workers

    def hint(self, k: int, upcoming: Sequence[bytes | None]) -> ReadAheadHint:
        """The hint of task ``k`` (counted from this pool's first), ``upcoming[j]`` being the
        encoded recipe of task ``k + j`` (None past the end of the stream)."""
        n, j = self.workers, k // self.workers  # j: the worker's own task count
        lo = 0 if j == 0 else self._opened(j - 1)
        named = range(lo * n, self._opened(j) * n + 1, n)
        recipes = tuple(upcoming[i] for i in named if i < len(upcoming) and upcoming[i])
        return ReadAheadHint(self.token, self.budget, self.keep, recipes)  # type: ignore[arg-type]
