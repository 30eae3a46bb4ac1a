"""Which recipe and sample each DataLoader worker is on, and the error naming a failed one.

Workers write their step and sample position to a small shared array (:class:`WorkerMarks`);
when one dies, hangs or fails, :class:`_Watch` reads it with torch's task bookkeeping
(``_task_info``, ``_workers`` of the iterator) and builds one
:class:`~fpipe.core.errors.WorkerError` naming the worker, its pid, the step and keys of the
recipe it was materializing and the sample it was on.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable
from typing import Any

import torch.utils.data

from fpipe.core.errors import WorkerError
from fpipe.materialize.materializer import show_keys

__all__ = ["WorkerMarks"]


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
