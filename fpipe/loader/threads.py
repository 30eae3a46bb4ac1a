"""Thread workers: recipes materialized by a pool of threads in the main process.

``get_loader(ds, num_workers=N, worker_mode="thread")`` runs the same pure ``recipe -> batch``
function as the process workers, in N threads of the main process, so a batch is never copied
into shared memory, pickled or received: it is the very tensor the materializer built. This
pays off when materializing is mostly code that releases the GIL (Pillow's JPEG decode and
resize, numpy, torch ops), which is the case for image decoding; Python-heavy task encoders
are better served by processes. Output, snapshots and resume are those of the process mode
and of ``num_workers=0``: results are taken in plan order, whatever thread finished first.

Each thread has its own :class:`~fpipe.materialize.materializer.Materializer` (datasets opened once
per thread, like once per process) and shares the task encoder object, as Grain's thread
workers share their transforms: its hooks run concurrently and must not mutate shared state
(fpipe's hooks are stateless; ``stateless(restore_seeds=True)`` hooks take a lock around the
global generators they seed). The first recipe runs alone on the first thread; the others,
and the recipes ahead, start once the consumer has the first batch, so it does not wait on
their dataset opens (Python work that would share the GIL with it).

Faults: an exception raised while materializing is re-raised in the consumer with its own type
and attributes, as at ``num_workers=0``. A recipe that produced nothing for ``timeout`` seconds
raises one :class:`~fpipe.core.WorkerError` naming the thread, the step, its keys and the
sample the thread was on; a thread cannot be killed, so the stuck one is abandoned (it is a
daemon thread and its result is dropped) and the others stop after their current recipe (a
closed loop waits for that, so no thread is left inside torch or Pillow at exit). With
``recover_workers`` (:mod:`fpipe.loader._recovery`) the loader then starts new threads and
materializes the abandoned recipes again.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from fpipe.core.errors import WorkerError
from fpipe.loader._recovery import run_task
from fpipe.materialize.materializer import Materializer, show_keys

__all__ = ["iterate_threads"]


class _Task(concurrent.futures.Future):
    """One recipe's result, the thread that took it and the sample position it is on (for a
    timeout's message)."""

    thread: int | None = None
    position: int | None = None

    def mark(self, step: int, position: int) -> None:
        self.position = position if position >= 0 else None


def _work(index: int, tasks: queue.SimpleQueue, materializer: Materializer, stop) -> None:
    while True:
        item = tasks.get()
        if item is None or stop.is_set():
            return
        task, recipe_task = item
        if not task.set_running_or_notify_cancel():
            continue
        task.thread = index
        try:
            task.set_result(run_task(materializer, recipe_task, task.mark))
        except BaseException as err:  # noqa: BLE001 - re-raised in the consumer, type and all
            task.set_exception(err)


def _timeout_error(task: _Task, timeout: float, recipe: Any, describe) -> WorkerError:
    try:
        step, keys = describe(recipe)
    except Exception:  # noqa: BLE001 - naming the recipe must not hide the fault
        step, keys = None, ()
    doing = f"step {step} (samples {show_keys(keys)})" if step is not None else "no recipe"
    position = task.position if step is not None and task.position is not None else None
    if position is not None and position < len(keys):
        doing += f", on sample {keys[position]!r} (position {position})"
    else:
        position = None
    who = "a materialize thread" if task.thread is None else f"materialize thread {task.thread}"
    return WorkerError(
        f"{who} (pid {os.getpid()}) produced nothing for {timeout:g} s (timeout) while "
        f"materializing {doing}. The loader's state is the one after the last batch taken: "
        "iterate again or load_state_dict() to resume exactly.",
        worker=task.thread,
        pid=os.getpid(),
        reason="timed out",
        step=step,
        keys=tuple(keys),
        position=position,
    )


def iterate_threads(
    recipes: Iterable[Any],
    materializer: Materializer,
    *,
    num_threads: int,
    in_flight: int,
    timeout: float,
    recipe_at: Callable[[int], Any],
    describe: Callable[[Any], tuple[int | None, tuple[str, ...]]],
) -> Iterator[Any]:
    """Materialized results of ``recipes`` (encoded recipes) in order, ``num_threads`` at a time.

    Args:
      recipes: tasks (encoded recipes, see :func:`fpipe.loader._recovery.run_task`), pulled
        ``in_flight`` ahead of the consumer.
      materializer: copied once per thread (its datasets are opened in each thread).
      in_flight: recipes submitted and not yet taken (at least ``num_threads``).
      timeout: seconds without the awaited result before raising WorkerError (0: never).
      recipe_at: the recipe ``ahead`` tasks after the next one awaited (0: the awaited one).
      describe: ``recipe -> (step, sample keys)`` for messages.
    """
    tasks: queue.SimpleQueue = queue.SimpleQueue()
    stop = threading.Event()
    threads = [
        threading.Thread(
            target=_work,
            args=(i, tasks, materializer.copy(), stop),
            name=f"fpipe-materialize-{i}",
            daemon=True,
        )
        for i in range(num_threads)
    ]
    # The first recipe alone, on one thread: each thread opens its datasets at its first recipe
    # and planning the recipes ahead is Python work too; run together, they share the GIL with
    # the first recipe and delay the first batch by about their sum. The other threads and the
    # recipes ahead start when the consumer has the first batch (see the loop).
    threads[0].start()
    source = iter(recipes)
    waiting: collections.deque[_Task] = collections.deque()

    def submit() -> None:
        for recipe_task in source:
            task = _Task()
            tasks.put((task, recipe_task))
            waiting.append(task)
            return

    stuck = None  # the thread of a recipe that timed out: abandoned
    ended = False  # the recipes ran out or the loop was closed
    try:
        submit()
        first = True
        while waiting:
            task = waiting[0]
            # wait() tells a timeout by its return value: a TimeoutError raised while waiting
            # (by a signal handler, say) is the user's and propagates as it is
            done, _ = concurrent.futures.wait((task,), timeout=timeout or None)
            if not done:
                stuck = task.thread
                raise _timeout_error(task, timeout, recipe_at(0), describe)
            result = task.result()
            waiting.popleft()
            if not first:
                submit()
            yield result
            if first:  # the consumer has the first batch: the other threads, the recipes ahead
                first = False
                for t in threads[1:]:
                    t.start()
                for _ in range(max(in_flight, num_threads)):
                    submit()
        ended = True
    except GeneratorExit:
        ended = True
        raise
    finally:
        stop.set()
        for task in waiting:
            task.cancel()
        for _ in threads:
            tasks.put(None)
        finishing = [t for i, t in enumerate(threads) if i != stuck and t.ident is not None]
        _FINISHING.update(finishing)
        # A closed loop waits for each thread to finish the recipe it is on; an exception (the
        # user's, a timeout) goes on at once and the exit hook waits for them instead.
        if ended:
            _join(finishing, timeout or None)


#: Threads finishing their last recipe after their loop ended. A daemon thread still inside
#: torch or Pillow when the interpreter exits is cut off mid-call, which aborts the process
#: ("terminate called without an active exception"): the exit hook waits for them.
_FINISHING: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
#: Seconds the exit hook waits for them, all together.
EXIT_WAIT_S = 30.0


def _join(threads: Iterable[threading.Thread], timeout: float | None) -> None:
    deadline = None if timeout is None else time.monotonic() + timeout
    for t in threads:
        t.join(None if deadline is None else max(deadline - time.monotonic(), 0))


@atexit.register
def _join_at_exit() -> None:
    _join(list(_FINISHING), EXIT_WAIT_S)
