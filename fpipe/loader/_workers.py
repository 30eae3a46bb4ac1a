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

The parts are modules of their own: :mod:`fpipe.loader._remote_failure` (failures as values,
whose names are importable from here too), :mod:`fpipe.loader._worker_watch` (naming the
worker, recipe and sample of a fault) and :mod:`fpipe.loader._torch_pool` (torch's iterator
handled from outside). These three and this module are the only places that read private
attributes of torch's multiprocessing iterator (``_workers``, ``_task_info``, ``_rcvd_idx``,
``_worker_pids_set``, ``_workers_done_event``, ``_shutdown_workers``);
``tests/loader/test_worker_faults.py`` checks the behaviour they support.
"""

from __future__ import annotations

import bdb
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch.utils.data

from fpipe.core.resource_limits import resource_limit_error
from fpipe.encode import batch_slots
from fpipe.loader._remote_failure import (
    RemoteFailure,
    RemoteTraceback,
    remote_failure,
    run_in_worker,
)
from fpipe.loader._torch_pool import (
    _dead_workers,
    _detach_from_sigchld,
    _shut_down_half_started,
    _shutdown,
    _unlock_done_event,
)
from fpipe.loader._worker_watch import WorkerMarks, _Watch

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
