"""Worker faults as one fpipe error: errors as values from workers, a watchdog on torch's iterator.

torch's DataLoader re-raises a worker's exception as ``exc_type(message)`` (fpipe errors keep
their type through that, but lose their attributes), reports a killed worker as a
``ConnectionResetError`` or a ``RuntimeError`` depending on timing, raises a second
``RuntimeError`` from its SIGCHLD handler wherever the main thread happens to be (the user's
``except`` block included), and with ``timeout=0`` waits forever for a hung worker. Here:

- a worker returns its exception as a value (:class:`RemoteFailure`: the exception, which
  pickles with its attributes, and its traceback text); the main process re-raises it with the
  worker's traceback as ``__cause__``;
- :func:`iterate` drives torch's iterator in short waits, so a worker that died is reported
  within about ``poll_s`` and one that produced nothing for ``timeout`` seconds is reported as
  hung: one :class:`WorkerError` naming the worker, its pid, the step and keys of the recipe
  it was materializing and the sample it was on (:class:`WorkerMarks`). The workers are shut
  down before it is raised, and the iterator's worker pids are taken out of torch's SIGCHLD
  check, so nothing else is raised later;
- a result that cannot be pickled back to the main process (a batch class defined inside a
  function, a lambda in a field) would make torch's queue feeder thread print a traceback and
  drop it, and the main process wait forever: :func:`run_in_worker` tries it first
  (:func:`fpipe.loader._send.check_sendable`) and returns the failure;
- a limit of the process or the system reached, in a worker or here (no file descriptor left
  for a pipe, torch's "Too many open files"), is one
  :class:`~fpipe.core.errors.ResourceLimitError` naming the limit
  (:mod:`fpipe.core.resource_limits`), never a worker fault to recover from.

This module is the one place that reads private attributes of torch's multiprocessing iterator
(``_workers``, ``_task_info``, ``_rcvd_idx``, ``_worker_pids_set``, ``_workers_done_event``,
``_shutdown_workers``);
``tests/loader/test_worker_faults.py`` checks the behaviour they support.
"""

from __future__ import annotations

import bdb
import contextlib
import dataclasses
import multiprocessing
import os
import signal
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import torch.utils.data

from fpipe.core.errors import FpipeError, MaterializeError, WorkerError
from fpipe.core.resource_limits import resource_limit_error
from fpipe.encode import batch_slots
from fpipe.loader._recovery import out_of_memory
from fpipe.loader._send import check_sendable
from fpipe.materialize.materializer import show_keys

__all__ = [
    "RemoteFailure",
    "RemoteTraceback",
    "WorkerMarks",
    "from_workers",
    "iterate",
    "remote_failure",
    "run_in_worker",
]

#: Longest single wait on the workers' result queue: a dead worker is noticed this fast.
POLL_S = 0.5
_TORCH_TIMEOUT = "DataLoader timed out"


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker process (shown as its ``__cause__``).
    ``out_of_memory``: the worker's exception was a failed allocation (a MemoryError)."""

    out_of_memory = False

    def __str__(self) -> str:
        return "\n" + str(self.args[0]) if self.args else ""


@dataclasses.dataclass
class RemoteFailure:
    """What a worker returns instead of a batch when materializing raised."""

    error: FpipeError
    traceback: str
    out_of_memory: bool = False

    def reraise(self):
        """Raise the worker's exception here, its worker traceback as the cause."""
        cause = RemoteTraceback(self.traceback)
        cause.out_of_memory = self.out_of_memory
        raise self.error from cause


def remote_failure(err: Exception) -> RemoteFailure:
    """``err`` as a value to send back to the main process (a non-fpipe exception first
    wrapped in a :class:`MaterializeError`), with its traceback text."""
    text = "".join(traceback.format_exception(err))
    limit = resource_limit_error(err, "while materializing in a DataLoader worker")
    if limit is not None:  # the process's limit, not the data's fault: nothing to blame
        return RemoteFailure(limit, text)
    oom = out_of_memory(err)
    if getattr(err, "__fpipe_from_error_handler__", False) and check_sendable(err) is None:
        return RemoteFailure(err, text, oom)  # type: ignore[arg-type]  # the user's own
    if not isinstance(err, FpipeError):
        err = MaterializeError(
            f"materializing raised {type(err).__name__}: {err}",
            hook="materialize",
            original=type(err).__name__,
            traceback=text,
        )
    return RemoteFailure(err, text, oom)


def run_in_worker(fn: Callable[[], Any]) -> Any:
    """``fn()``; in a DataLoader worker, an exception is returned as a :class:`RemoteFailure`
    (a non-fpipe exception first wrapped in a :class:`MaterializeError`), and so is a result
    that cannot be pickled back (:func:`check_sendable`)."""
    if torch.utils.data.get_worker_info() is None:
        return fn()
    try:
        result = fn()
    except Exception as err:  # noqa: BLE001 - every failure travels back as a value
        return remote_failure(err)
    unsendable = check_sendable(result)
    if unsendable is not None:
        return RemoteFailure(unsendable, unsendable.traceback)
    return result


class WorkerMarks:
    """Which recipe (step) and which sample of it (position, -1: none) each worker process is
    on: a small shared array the workers write and the main process reads when one dies or
    hangs, to name the sample (and leave it out if it does so again)."""

    def __init__(self, num_workers: int, context: Any = None):
        ctx = multiprocessing.get_context(context) if isinstance(context, str) else context
        ctx = ctx if ctx is not None else multiprocessing
        self.array = ctx.RawArray("q", 2 * max(num_workers, 1))
        for i in range(len(self.array)):
            self.array[i] = -1

    def writer(self) -> Callable[[int, int], None] | None:
        """In a worker: ``mark(step, position)`` writing this worker's slot (None elsewhere)."""
        info = torch.utils.data.get_worker_info()
        if info is None:
            return None
        array, slot = self.array, 2 * info.id

        def mark(step: int, position: int) -> None:
            array[slot], array[slot + 1] = step, position

        return mark

    def read(self, worker: int) -> tuple[int, int]:
        """``(step, position)`` worker ``worker`` marked last (-1: none)."""
        if not 0 <= 2 * worker < len(self.array):
            return -1, -1
        return self.array[2 * worker], self.array[2 * worker + 1]


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


def _exit_text(code: int | None) -> str:
    if code is None:
        return "exited"
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class _Watch:
    """Which recipe each of torch's task indices is, to name what a failed worker was doing."""

    def __init__(self, it, num_workers: int, recipe_at: Callable[[int], Any], describe, marks=None):
        self.it, self.num_workers = it, num_workers
        self.recipe_at, self.describe = recipe_at, describe
        self.marks: WorkerMarks | None = marks

    def _worker_of(self, idx: int) -> int:
        info = getattr(self.it, "_task_info", {}).get(idx)
        return info[0] if info else idx % self.num_workers

    def _first_task_of(self, worker: int) -> int | None:
        tasks = getattr(self.it, "_task_info", {})
        mine = [i for i, info in tasks.items() if len(info) == 1 and info[0] == worker]
        return min(mine) if mine else None

    def _recipe_of_step(self, step: int) -> Any:
        """The recipe in flight whose step is ``step`` (None if none is)."""
        for ahead in range(1 << 16):
            try:
                recipe = self.recipe_at(ahead)
            except IndexError:
                return None
            if recipe is not None and recipe.step == step:
                return recipe
        return None

    def error(self, what: str, dead, awaited: int, cause: BaseException | None) -> WorkerError:
        """The error naming the worker that died (``dead``), else the one with the awaited task.
        ``what`` says what that worker did, for the message (a dead worker's exit replaces it);
        ``cause``: the exception raised receiving a batch. Its reason: ``"died"`` with a dead
        worker, else ``"failed"`` with a ``cause``, else ``"timed out"``."""
        if dead:
            worker, proc = dead[0]
            idx = self._first_task_of(worker)
            what = f"{_exit_text(proc.exitcode)}"
        else:
            worker = self._worker_of(awaited)
            workers = getattr(self.it, "_workers", ())
            proc = workers[worker] if worker < len(workers) else None
            idx = awaited
        marked_step, position = (-1, -1) if self.marks is None else self.marks.read(worker)
        try:
            # the recipe the worker marked (a dead worker may have sent results not yet read)
            recipe = self._recipe_of_step(marked_step) if marked_step >= 0 else None
            if recipe is None:
                recipe = self.recipe_at(0 if idx is None else idx - awaited)
            step, keys = self.describe(recipe)
        except Exception:  # noqa: BLE001 - naming the recipe must not hide the fault
            step, keys = None, ()
        if step is None or marked_step != step or not 0 <= position < len(keys):
            position = None  # between samples, in a batch hook, or on another recipe
        shown = show_keys(keys)
        pid = getattr(proc, "pid", None)
        doing = f"step {step} (samples {shown})" if step is not None else "no recipe"
        if position is not None:
            doing += f", on sample {keys[position]!r} (position {position})"
        detail = f" [{type(cause).__name__}: {cause}]" if cause is not None else ""
        return WorkerError(
            f"DataLoader worker {worker} (pid {pid}) {what} while materializing {doing}.{detail} "
            "The loader's state is the one after the last batch taken: iterate again or "
            "load_state_dict() to resume exactly.",
            worker=worker,
            pid=pid,
            # a failure raised with no worker dead: its batch could not be received
            reason="died" if dead else ("failed" if cause is not None else "timed out"),
            step=step,
            keys=tuple(keys),
            position=position,
        )


def _library_dirs() -> tuple[str, ...]:
    """Folders of the code between the wait for a batch and a worker-side failure: the
    standard library (without site-packages), torch, numpy (arrays in batches) and fpipe."""
    import sysconfig

    import numpy

    paths = sysconfig.get_paths()
    site = {os.path.realpath(paths[k]) for k in ("purelib", "platlib")}
    stdlib = os.path.realpath(paths["stdlib"])
    fpipe_dir = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    dirs = [stdlib + os.sep, fpipe_dir + os.sep]
    dirs += [os.path.dirname(os.path.realpath(m.__file__)) + os.sep for m in (torch, numpy)]
    # site-packages may lie under the standard library's folder: it is no part of it
    return tuple(d for d in dirs if d.rstrip(os.sep) not in site)


_LIBRARY_DIRS: tuple[str, ...] | None = None


def from_workers(err: BaseException) -> bool:
    """Whether ``err``, raised out of torch's DataLoader iterator while waiting for a batch, is
    a failure on the workers' side (torch's report of a dead or failed worker, a broken queue,
    a batch that cannot be received) rather than the user's.

    An exception raised in the training process while it waits (a signal handler's, one sent
    by ``_thread.interrupt_main``, a debugger's) is raised in a frame of the user's code, the
    handler, on top of the wait; every frame of a worker-side failure is library code. So the
    exception is the user's when any frame it passed through is not the standard library's,
    torch's, numpy's or fpipe's (a debugger's ``BdbQuit`` always is)."""
    global _LIBRARY_DIRS
    if isinstance(err, bdb.BdbQuit):
        return False
    if _LIBRARY_DIRS is None:
        _LIBRARY_DIRS = _library_dirs()
    tb = err.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not os.path.realpath(filename).startswith(_LIBRARY_DIRS):
            return False
        tb = tb.tb_next
    return True


def iterate(
    dataloader: torch.utils.data.DataLoader,
    *,
    timeout: float,
    recipe_at: Callable[[int], Any],
    describe: Callable[[Any], tuple[int | None, tuple[str, ...]]],
) -> Iterator[Any]:
    """Results of ``dataloader`` in order; worker failures become one fpipe error.

    Args:
      dataloader: built with ``timeout=POLL_S`` when it has workers.
      timeout: seconds without a result before the awaited worker counts as hung (0: never).
      recipe_at: the recipe ``ahead`` tasks after the next one awaited (0: the awaited one).
      describe: ``recipe -> (step, sample keys)`` for messages.
    """
    try:
        it = iter(dataloader)  # starts the worker processes: pipes, queues, a fork each
    except Exception as err:
        _shut_down_half_started(err)
        limit = resource_limit_error(err, "while starting DataLoader workers")
        if limit is None:
            raise
        raise limit from err
    if dataloader.num_workers == 0:
        for result in it:
            if isinstance(result, RemoteFailure):
                result.reraise()
            yield result
        return
    _detach_from_sigchld(it)
    _unlock_done_event(it)
    marks = getattr(dataloader.dataset, "marks", None)
    watch = _Watch(it, dataloader.num_workers, recipe_at, describe, marks)
    taken, failed = 0, False
    try:
        while True:
            since = time.monotonic()
            while True:
                try:
                    result = next(it)
                    break
                except StopIteration:
                    return
                except Exception as err:
                    failed = True  # the pool is shut down at once, whoever raised
                    if not from_workers(err):
                        raise  # the user's (a signal handler's, a debugger's): unchanged
                    limit = resource_limit_error(err, "while receiving a batch from workers")
                    if limit is not None:  # no worker is at fault: none is replaced
                        raise limit from err
                    if not str(err).startswith(_TORCH_TIMEOUT):  # a broken connection, for one
                        raise watch.error("failed", _dead_workers(it, 1.0), taken, err) from err
                    dead = _dead_workers(it, 0.0)
                    if dead or (timeout and time.monotonic() - since >= timeout):
                        raise watch.error(
                            f"produced nothing for {timeout:g} s (timeout)", dead, taken, None
                        ) from None
                    failed = False
            taken += 1
            if isinstance(result, RemoteFailure):
                failed = True
                result.reraise()
            yield result
    finally:
        _shutdown(it, kill=failed)
        slots = getattr(dataloader.dataset, "slots", None)
        if slots is not None:
            batch_slots.detach(slots)
