"""torch's multiprocessing DataLoader iterator, handled from outside: its SIGCHLD check, its
workers' done-event, its shutdown and its dead workers.

torch raises a second ``RuntimeError`` from its SIGCHLD handler wherever the main thread is,
waits forever on a done-event lock a killed worker held, and leaves the workers of an iterator
whose start failed running. :func:`fpipe.loader._workers.iterate` takes its pool out of the
SIGCHLD check (:func:`_detach_from_sigchld`), reads and sets the done-event without its lock
(:class:`_DoneEventWithoutLock`) and shuts the pool down itself (:func:`_shutdown`,
:func:`_shut_down_half_started`). Reads private attributes of the iterator (``_workers``,
``_worker_pids_set``, ``_workers_done_event``, ``_shutdown_workers``);
``tests/loader/test_worker_faults.py`` checks the behaviour they support.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any


def _detach_from_sigchld(it) -> None:
    """Stop torch's SIGCHLD handler from raising for this iterator's workers (a dead worker is
    reported by :func:`iterate` instead, at a defined point, once)."""
    if getattr(it, "_worker_pids_set", False):
        from torch.utils.data._utils import signal_handling

        signal_handling._remove_worker_pids(id(it))
        it._worker_pids_set = False


class _DoneEventWithoutLock:
    """The main process's handle on torch's done-event for its workers, read and set without
    the event's lock.

    Workers take that lock in ``done_event.is_set()`` between tasks, and a worker killed there
    (by the OOM killer, a user's ``kill -9``) leaves it held for good: torch's main process
    would then wait forever in the ``is_set()`` of its dead-worker check and in the ``set()``
    of its shutdown. torch's way out, its SIGCHLD handler raising in the main thread, is not
    armed for fpipe's iterators (:func:`_detach_from_sigchld`) and cannot reach a loop run in
    another thread. The event's state is its semaphore, which a dead holder cannot block: the
    main process reads and sets that directly. (Workers never ``wait()`` on the condition, so
    there is no one to notify.)"""

    def __init__(self, event: Any):
        # kept: under spawn and forkserver, a semaphore whose last handle here is collected is
        # unlinked, and a worker still starting could no longer open the event's lock
        self.event = event
        self.flag = event._flag  # multiprocessing.synchronize.Event's state

    def is_set(self) -> bool:
        if self.flag.acquire(False):
            self.flag.release()
            return True
        return False

    def set(self) -> None:
        if not self.is_set():
            self.flag.release()


def _unlock_done_event(it) -> None:
    """Give torch's iterator a :class:`_DoneEventWithoutLock` (once its workers have theirs)."""
    event = getattr(it, "_workers_done_event", None)
    if event is not None and hasattr(event, "_flag"):
        it._workers_done_event = _DoneEventWithoutLock(event)


def _shutdown(it, *, kill: bool) -> None:
    """Shut the iterator's workers down; with ``kill``, or when a worker was killed by a
    signal, terminate them first (a hung or broken pool, or workers left waiting for the lock
    a killed one held, would otherwise cost torch's 5 s join per worker)."""
    workers = list(getattr(it, "_workers", ()))
    if kill or any(w.exitcode is not None and w.exitcode < 0 for w in workers):
        for w in workers:
            if w.is_alive():
                w.terminate()
        for w in workers:
            w.join(timeout=2.0)
    shutdown = getattr(it, "_shutdown_workers", None)
    if shutdown is not None:
        with contextlib.suppress(Exception):  # the pool is being abandoned after a fault
            shutdown()


def _shut_down_half_started(err: BaseException) -> None:
    """Shut down the workers of torch's iterator whose start raised ``err`` (a worker that
    could not be started: no descriptor left for its pipe, say). Else the workers it started
    would run until the process exits, and its ``__del__`` would print an AttributeError
    about the attributes it never set."""
    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

    tb = err.__traceback__
    while tb is not None:
        it = tb.tb_frame.f_locals.get("self")
        if isinstance(it, _MultiProcessingDataLoaderIter):
            _shutdown(it, kill=True)
            it._shutdown = True  # (set once its queue was made): its __del__ does nothing
            return
        tb = tb.tb_next


def _dead_workers(it, wait_s: float) -> list[tuple[int, Any]]:
    """(worker id, process) of workers that exited, waiting up to ``wait_s`` for one to show
    (a broken connection can be seen a moment before the process is reaped)."""
    deadline = time.monotonic() + wait_s
    while True:
        dead = [(i, w) for i, w in enumerate(getattr(it, "_workers", ())) if w.exitcode is not None]
        if dead or time.monotonic() >= deadline:
            return dead
        time.sleep(0.02)
