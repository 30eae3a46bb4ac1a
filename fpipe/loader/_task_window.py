"""Worker processes that take the next task as they free up, and their results back in order.

torch's DataLoader gives task ``k`` to worker ``k mod N`` and delivers in order. When one worker
runs slower than the other for a while (a virtual CPU shared with a noisy neighbour, an SMT
sibling busy, a run of large images), the fast one finishes its ``prefetch_factor`` tasks and
waits: the pool runs at ``N`` times the slowest worker's rate, where independent loops would
run at the sum of their rates (``bench/worker_turns.py`` measures the difference).

Here torch hands a task to any worker with room (its ``in_order=False``), each numbered in the
order the plan handed it out (:class:`TaskWindow`), and :func:`fpipe.loader._workers.iterate`
puts the results back in that order. Which worker materializes a recipe changes nothing in
it: the batches, their order and the loader's state are those of in-order delivery.

The window bounds what runs ahead: no task is handed out ``limit`` or more past the first
result not yet delivered (:func:`window_size`: the ``num_workers * prefetch_factor`` of torch's
in-order delivery, and half a task more per worker), so the results held for reordering stay a
few batches, even while one worker hangs. Each worker process gets :data:`REORDER_SLOTS` more
shared-memory slots for them (:mod:`fpipe.encode.batch_slots`): with two workers, a worker's
batches in flight, held for reordering and held by the consumer always find a slot.

torch hands a task out only when it receives a result; after results are delivered from the
reorder buffer, :func:`refill` asks it to hand out the tasks the window allows again (torch's
private ``_try_put_index``).

Worker processes that read ahead (object storage: :mod:`fpipe.loader._read_ahead`) keep torch's
fixed turns, since each reads the recipes it will get.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterable, Iterator
from typing import Any

import torch.utils.data

__all__ = ["REORDER_SLOTS", "TaskWindow", "refill", "takes_tasks_as_free", "window_size"]

#: Shared-memory slots a worker process gets beyond ``prefetch_factor + 2`` for its batches held
#: for reordering: what one of two workers can hold while the other has the awaited recipe.
REORDER_SLOTS = 2


def window_size(num_workers: int, prefetch_factor: int) -> int:
    """Recipes handed out past the first not delivered: torch's ``num_workers *
    prefetch_factor`` and half a recipe more per worker (at least one). With no more than
    torch's count, a worker that holds the awaited recipe and one queued leaves the others
    only their own ``prefetch_factor`` each, much as in turns; the extra lets a faster worker
    go on while it waits, and costs the slots of :data:`REORDER_SLOTS`.

    >>> window_size(2, 2), window_size(8, 2)
    (5, 20)
    """
    return num_workers * prefetch_factor + max(1, (num_workers + 1) // 2)


@functools.cache
def takes_tasks_as_free() -> bool:
    """Whether this torch's DataLoader can hand tasks to any worker with room (``in_order``,
    torch 2.6 and later) and hand them out when asked (:func:`refill`)."""
    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

    return "in_order" in inspect.signature(
        torch.utils.data.DataLoader.__init__
    ).parameters and hasattr(_MultiProcessingDataLoaderIter, "_try_put_index")


class TaskWindow:
    """The plan sampler's tasks as ``(number, task)``, numbered from 0 in the order handed out;
    none is handed out ``limit`` or more past ``delivered`` (the number of the first result not
    yet delivered): torch is told "no task now" (``StopIteration`` from ``__next__``, after
    which it asks again) until :func:`refill` or its next result.

    >>> window = TaskWindow(["a", "b", "c"], limit=2)
    >>> tasks = iter(window)
    >>> next(tasks), next(tasks)
    ((0, 'a'), (1, 'b'))
    >>> next(tasks, "none now")
    'none now'
    >>> window.delivered = 1
    >>> next(tasks), next(tasks, "the end")
    ((2, 'c'), 'the end')
    """

    def __init__(self, sampler: Iterable[Any], limit: int):
        self.sampler, self.limit = sampler, max(1, limit)
        self.delivered = 0
        self.handed_out = 0
        self._tasks: Iterator[Any] | None = None

    def __iter__(self) -> TaskWindow:
        if self._tasks is None:  # one pass: torch's iterator asks once, a loop may ask again
            self._tasks = iter(self.sampler)
        return self

    def __next__(self) -> tuple[int, Any]:
        if self.handed_out >= self.delivered + self.limit or self._tasks is None:
            raise StopIteration  # for now: the window is full
        task = next(self._tasks)  # the end of the plan: for good
        self.handed_out += 1
        return self.handed_out - 1, task


def refill(it: Any) -> None:
    """Have torch's iterator ``it`` hand out the tasks its workers have room for and its
    :class:`TaskWindow` allows (torch does so by itself only when it receives a result)."""
    room = it._prefetch_factor * it._num_workers
    while it._tasks_outstanding < room:
        sent = it._send_idx
        it._try_put_index()
        if it._send_idx == sent:  # the window is full, or the plan has ended
            return
