"""The loader's watchdog (Energon's ``watchdog_timeout_seconds``): a batch that takes too long
to build prints the stack where it is stuck and calls the trigger.

With ``num_workers=0`` the batches are built in the thread that iterates the loader: reading,
decoding, ``encode_sample``, ``batch``, ``encode_batch`` and the loader's own packing and
grouping hooks. So each ``next()`` of the loop is watched (:func:`watch_batches`), as Energon's
``Watchdog.watch_iter`` watches its dataset's: the time the consumer spends between batches is
not counted. With worker processes, each worker watches the batches it builds
(:func:`watch_task`), as Energon's workers do; the main process's ``timeout`` still decides
when a worker counts as hung. (Thread and Ray workers are not watched: ``timeout`` only.)
One timer thread per loop (or worker process) sleeps until the deadline of the batch being
built; arming and disarming it per batch is a lock and a few assignments (about 2 µs; no
thread wake-up while batches come faster than the timeout).

When a batch is late, the timer thread prints the stuck thread's stack to stderr and calls
:meth:`WatchdogDataset._watchdog_trigger` (Energon's name and behaviour: a ``RuntimeWarning``,
or with ``fail_on_timeout=True`` a ``TimeoutError``). Energon then ends the process; fpipe
raises a :class:`~fpipe.core.errors.WorkerError` (reason ``"timed out"``) in the loop instead,
as for a hung worker: it is delivered into the stuck code as soon as that runs Python again (a
call blocked in C, a ``time.sleep`` or a read, first returns), and the loader's state is the
one after the last batch taken, so iterating again or ``load_state_dict`` resumes exactly.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Generator
from time import perf_counter
from typing import TYPE_CHECKING, Any

from fpipe.core.errors import WorkerError

if TYPE_CHECKING:
    from fpipe.loader.dataloader import Loader

__all__ = ["WatchdogDataset", "watch_batches", "watch_task"]


class WatchdogDataset:
    """The watchdog over a dataset's batches (Energon's name and signature); what
    ``get_loader(watchdog_timeout_seconds=...)`` builds, and what it accepts in place of the
    dataset.

    Args:
      dataset: the dataset whose batches are watched.
      worker_config: Energon's; must be the dataset's (it has no other effect).
      timeout_seconds: seconds one batch may take to build (None: no watchdog).
      initial_timeout_seconds: for the first batch of a loop (None: ``timeout_seconds``).
      fail_on_timeout: raise instead of warning (see :meth:`_watchdog_trigger`).
    """

    def __init__(
        self,
        dataset: Any,
        worker_config: Any = None,
        timeout_seconds: float | None = 60,
        initial_timeout_seconds: float | None = None,
        fail_on_timeout: bool = False,
    ):
        self.dataset, self.worker_config = dataset, worker_config
        self.timeout_seconds = timeout_seconds
        self.initial_timeout_seconds = initial_timeout_seconds
        self.fail_on_timeout = fail_on_timeout

    def _watchdog_trigger(self) -> None:
        """Called (in the watchdog's thread) when a batch is late: Energon's warning, or its
        ``TimeoutError`` with ``fail_on_timeout`` (fpipe then stops the loop)."""
        message = (
            f"Watchdog triggered. Sample processing took longer than {self.timeout_seconds} "
            "seconds."
        )
        if self.fail_on_timeout:
            raise TimeoutError(message)
        warnings.warn(message, RuntimeWarning, stacklevel=2)

    def config(self) -> Any:
        """Energon's: the watchdog changes no sample, so this is the dataset's description."""
        return self.dataset.config()

    def __len__(self) -> int:
        return len(self.dataset)

    def __getstate__(self) -> dict:
        """Sent to worker processes without the dataset (they watch, the loader plans)."""
        return {**self.__dict__, "dataset": None}

    def __repr__(self) -> str:
        return f"WatchdogDataset(dataset={self.dataset!r}, timeout_seconds={self.timeout_seconds})"


class _Interrupt(BaseException):
    """Raised into the stuck thread with ``fail_on_timeout`` (a BaseException, so that an
    ``except Exception`` of user code or of the error policy does not take it for a bad
    sample); the loop turns it into a WorkerError."""


class _Timer:
    """A daemon thread that fires when the thread it watches stays armed past its deadline.

    ``arm()`` / ``disarm()`` are called around each watched ``next()``. The thread sleeps until
    the deadline it last saw; a later deadline set meanwhile sends it back to sleep, so it wakes
    at most once per timeout while batches come on time, and is notified only when armed from
    idle or with an earlier deadline (the first batch's timeout may be longer)."""

    def __init__(self, watchdog: WatchdogDataset, where: str):
        self.watchdog, self.where = watchdog, where
        self.timeout = float(watchdog.timeout_seconds or 0)
        initial = watchdog.initial_timeout_seconds
        self.next_timeout = self.timeout if initial is None else float(initial)
        self.cv = threading.Condition()
        self.arms = 0  # arms so far: each arm's number (a late fire never hits a later one)
        self.current = 0  # the arm in force (0: disarmed)
        self.step: int | None = None  # the step it builds, for the message
        self.seconds = 0.0  # its timeout, for the message
        self.thread_id = 0  # the thread it watches
        self.deadline: float | None = None  # when it fires (None: not to fire)
        self.wake_at: float | None = None  # when the timer thread wakes (None: when told)
        self.firing = 0  # the arm whose timeout is being handled (0: none)
        self.failure: tuple[int, BaseException] | None = None  # (arm, what the trigger raised)
        self.stopped = False
        self.thread = threading.Thread(target=self._run, name="fpipe-watchdog", daemon=True)
        self.thread.start()

    def arm(self, step: int | None = None) -> int:
        with self.cv:
            self.arms += 1
            self.current, self.step, self.thread_id = self.arms, step, threading.get_ident()
            self.seconds = self.next_timeout
            self.deadline = perf_counter() + self.seconds
            self.next_timeout = self.timeout
            if self.wake_at is None or self.deadline < self.wake_at:
                self.cv.notify()
            return self.arms

    def disarm(self, arm: int) -> BaseException | None:
        """Stop watching; what the trigger raised for ``arm`` (waiting for a trigger that is
        running now), else None."""
        with self.cv:
            if self.current == arm:
                self.current, self.deadline = 0, None
            while self.firing == arm:
                self.cv.wait()
            if self.failure is not None and self.failure[0] == arm:
                return self.failure[1]
            return None

    def stop(self) -> None:
        with self.cv:
            self.stopped, self.current, self.deadline = True, 0, None
            self.cv.notify()
        if self.thread is not threading.current_thread():
            self.thread.join()

    def _run(self) -> None:
        while True:
            with self.cv:
                while not self.stopped:
                    self.wake_at = self.deadline
                    if self.deadline is None:
                        self.cv.wait()
                        continue
                    remaining = self.deadline - perf_counter()
                    if remaining <= 0:
                        break
                    self.cv.wait(remaining)
                if self.stopped:
                    return
                arm, thread_id = self.current, self.thread_id
                step = "a batch" if self.step is None else f"step {self.step}"
                header = (
                    f"fpipe watchdog: {step} has taken more than {self.seconds:g} s to build "
                    f"{self.where} (watchdog_timeout_seconds; pid {os.getpid()})."
                )
                self.deadline, self.firing = None, arm
            try:
                self._fire(arm, thread_id, header)
            finally:
                with self.cv:
                    self.firing = 0
                    self.cv.notify_all()

    def _fire(self, arm: int, thread_id: int, header: str) -> None:
        print_stack(thread_id, header)
        try:
            self.watchdog._watchdog_trigger()  # looked up now: a patched trigger is called
        except Exception as err:  # noqa: BLE001 - the trigger asks to stop the loop
            with self.cv:
                self.failure = (arm, err)
                if self.current == arm:  # still in the batch: stop it there
                    _raise_in(thread_id, _Interrupt)


def print_stack(thread_id: int, header: str) -> None:
    """``header`` and the stack of thread ``thread_id``, innermost call last, on stderr."""
    frame = sys._current_frames().get(thread_id)
    stack = "".join(traceback.format_stack(frame)) if frame is not None else "  (not running)\n"
    name = next((t.name for t in threading.enumerate() if t.ident == thread_id), thread_id)
    sys.stderr.write(f"{header}\nStack of thread {name!r} (most recent call last):\n{stack}")
    sys.stderr.flush()


def _raise_in(thread_id: int, exc_type: type[BaseException]) -> None:
    """Raise ``exc_type`` in thread ``thread_id`` when it next runs Python code."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc_type)
    )


def watch_batches(
    loader: Loader, batches: Generator[Any, None, None]
) -> Generator[Any, None, None]:
    """``batches`` (the loader's loop), each ``next()`` watched when the loader has a watchdog
    and builds its batches in this thread (``num_workers=0``); else ``batches`` itself."""
    watchdog = getattr(loader, "watchdog", None)
    if watchdog is None or not watchdog.timeout_seconds or loader.num_workers > 0:
        return batches
    return _watched(loader, watchdog, batches)


def _watched(loader: Loader, watchdog: WatchdogDataset, batches: Generator) -> Generator:
    timer = _Timer(watchdog, "in the loop (num_workers=0)")
    try:
        while True:
            before = loader._state
            arm = timer.arm(before.batches)
            try:
                try:
                    batch = next(batches)
                finally:
                    failure = timer.disarm(arm)
            except StopIteration:
                return
            except _Interrupt:
                failure = timer.disarm(arm)
            if failure is not None:
                # nothing of this step was delivered: the state is the one after the last batch
                loader._state, loader._grouper = before, None
                raise WorkerError(
                    f"step {before.batches} took more than {timer.seconds:g} s to build in the "
                    "loop (watchdog_timeout_seconds with fail_on_timeout, num_workers=0); its "
                    "stack was printed when the time ran out. The loader's state is the one "
                    "after the last batch taken: iterate again or load_state_dict() to resume "
                    "exactly.",
                    pid=os.getpid(),
                    reason="timed out",
                    step=before.batches,
                ) from failure
            yield batch
    finally:
        timer.stop()


#: A worker process's timer (one per process: its tasks run one at a time).
_WORKER_TIMER: _Timer | None = None


def watch_task(watchdog: WatchdogDataset, task: Callable[[], Any]) -> Any:
    """``task()`` in a DataLoader worker process, watched as the loop watches its batches: a
    task late by ``timeout_seconds`` prints the worker's stack and calls the trigger there;
    what the trigger raised becomes a WorkerError (sent to the main process as the task's
    failure)."""
    global _WORKER_TIMER
    timer = _WORKER_TIMER
    if timer is None or timer.watchdog is not watchdog:
        timer = _WORKER_TIMER = _Timer(watchdog, "in a DataLoader worker process")
    arm = timer.arm()
    try:
        try:
            result = task()
        finally:
            failure = timer.disarm(arm)
    except _Interrupt:
        failure = timer.disarm(arm)
    if failure is not None:
        raise WorkerError(
            f"a DataLoader worker (pid {os.getpid()}) took more than {timer.seconds:g} s to "
            "build a batch (watchdog_timeout_seconds with fail_on_timeout); its stack was "
            "printed when the time ran out. The loader's state is the one after the last batch "
            "taken: iterate again or load_state_dict() to resume exactly.",
            pid=os.getpid(),
            reason="timed out",
        ) from failure
    return result


def worker_watchdog(loader: Loader) -> WatchdogDataset | None:
    """The watchdog a process worker pool sends its workers (None: none)."""
    watchdog = getattr(loader, "watchdog", None)
    if watchdog is None or not watchdog.timeout_seconds or loader.num_workers == 0:
        return None
    return watchdog
