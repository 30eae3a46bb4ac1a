"""Self-healing workers: a worker that dies, hangs or runs out of memory is replaced, and what
was in flight is materialized again from the plan.

The loader knows the plan state after every recipe it handed out (its ``pending`` deque), and
materializing is a pure function of the recipe. So when the worker pool fails (a process
killed by a signal or the OOM killer, a native crash, nothing produced for ``timeout``
seconds, a ``MemoryError``), :meth:`Healer.results` shuts the pool down, starts a new one whose
plan sampler begins at the plan state after the last result delivered, and goes on: the batches
the consumer receives are those of an uninterrupted run, in order, and the loader's state never
saw the fault.

A sample that faults twice (the worker marks which sample it is on, see
:class:`fpipe.loader._workers.WorkerMarks`) follows the error policy: ``skip`` leaves it out of
its batch and counts it as skipped; ``raise`` raises a :class:`BadSampleError` naming it. A
recipe that faults twice outside any sample (a batch hook, a worker that cannot start) raises
its :class:`WorkerError`. So a poison file cannot loop forever.

Recipes travel to workers as *tasks*: the recipe's bytes, or ``(bytes, excluded positions)``
once a sample of it has been skipped, or ``(bytes, excluded positions, read-ahead hint)``
(:class:`fpipe.materialize.read_ahead.ReadAheadHint`).
"""

from __future__ import annotations

import collections
import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any

from fpipe.core.errors import BadSampleError, ErrorPolicy, WorkerError
from fpipe.materialize.materializer import MaterializedBatch, Materializer, show_keys
from fpipe.materialize.mix import member_at
from fpipe.materialize.read_ahead import read_ahead
from fpipe.materialize.recipe_codec import decode_recipe
from fpipe.storage.read.read_ahead import reading_with, take_io_counters

__all__ = ["Healer", "out_of_memory", "run_task"]

log = logging.getLogger("fpipe.loader")

#: Faults of one sample (or of one recipe outside any sample) before the error policy decides.
MAX_FAULTS = 2


def run_task(
    materializer: Materializer, task: Any, mark: Callable[[int, int], None] | None = None
) -> MaterializedBatch:
    """Materialize a task: recipe bytes, ``(recipe bytes, positions to leave out)``, or that and
    a read-ahead hint (started first). ``mark(step, position)`` is told which sample is being
    materialized (-1: none). The result carries this process's read counters since the last
    task (``io``)."""
    hint = None
    if isinstance(task, bytes):
        data, exclude = task, ()
    elif len(task) == 3:
        data, exclude, hint = task
    else:
        data, exclude = task
    recipe = decode_recipe(data)
    window = None if hint is None else read_ahead(materializer, hint, recipe.step)
    with reading_with(window):
        if mark is None:
            result = materializer(recipe, exclude=frozenset(exclude))
        else:
            mark(recipe.step, -1)
            at_step = functools.partial(mark, recipe.step)
            result = materializer(recipe, exclude=frozenset(exclude), mark=at_step)
    result.io = take_io_counters()
    return result


def out_of_memory(err: BaseException | None) -> bool:
    """Whether ``err`` (or what caused it) is an allocation that failed: ``MemoryError``
    (numpy's too), torch's CPU allocator error, or a worker's failure flagged so."""
    for _ in range(8):  # the cause chain, bounded
        if err is None:
            return False
        if isinstance(err, MemoryError) or getattr(err, "out_of_memory", False):
            return True
        if isinstance(err, RuntimeError) and "can't allocate memory" in str(err):
            return True
        err = err.__cause__ or err.__context__
    return False


class Healer:
    """Recovery from worker faults for one loader: counts, and the samples left out."""

    def __init__(self, materializer: Materializer):
        self.materializer = materializer
        #: pool restarts so far, and by reason ("died", "timed out", "out of memory")
        self.recoveries = 0
        self.by_reason: collections.Counter[str] = collections.Counter()
        #: faults seen per (step, position in the recipe or None)
        self.faults: collections.Counter[tuple] = collections.Counter()
        #: step -> positions left out of that recipe (samples that faulted twice)
        self.excluded: dict[int, frozenset[int]] = {}
        #: step -> the error raised in place of its batch (error_policy="raise")
        self.poisoned: dict[int, BadSampleError] = {}

    def results(
        self,
        open_pool: Callable[[Any], Iterator[Any]],
        pending: collections.deque,
        start: Any,
    ) -> Iterator[Any]:
        """What ``open_pool(start)`` yields, with faults recovered. ``open_pool(state)``
        materializes the plan from ``state`` on, appending ``(state after, epoch, recipe)`` to
        ``pending`` for each recipe; the consumer pops ``pending``'s head for each result."""
        restart = start
        results = open_pool(restart)
        try:
            while True:
                try:
                    for result in results:
                        poisoned = self.poisoned.get(getattr(result, "step", None))
                        if poisoned is not None:  # the batches before it are delivered
                            raise poisoned
                        restart = pending[0][0]  # the state after this result's recipe
                        yield result
                    return
                except Exception as err:
                    reason = self._recoverable(err)
                    if reason is None:
                        raise
                    self._recover(err, reason, pending)
                pending.clear()  # the new pool's sampler hands them out again
                results = open_pool(restart)
        finally:
            results.close()

    def _recoverable(self, err: Exception) -> str | None:
        if isinstance(err, BadSampleError):  # the error policy's, a poison sample's included
            return None
        if isinstance(err, WorkerError):
            return err.reason or "died"
        return "out of memory" if out_of_memory(err) else None

    def _recover(self, err: Exception, reason: str, pending: collections.deque) -> None:
        """Count the fault; raise if it is the second of its sample or recipe and the error
        policy says so (else leave the sample out from now on)."""
        recipes = [r for _, _, r in pending if r is not None]
        step = getattr(err, "step", None)
        if step is None and recipes:  # a failure returned by the worker: the awaited recipe
            step = recipes[0].step
        position = getattr(err, "position", None)
        self.faults[step, position] += 1
        recipe = next((r for r in recipes if r.step == step), None)
        keys = () if recipe is None else self.materializer.recipe_keys(recipe)
        on = f" on sample {keys[position]!r}" if recipe is not None and position is not None else ""
        if self.faults[step, position] >= MAX_FAULTS:
            if recipe is None or position is None:
                err.args = (
                    f"{err.args[0] if err.args else err} It failed {MAX_FAULTS} times "
                    "(the loader recovers once per recipe when no sample can be named).",
                )
                raise err
            # a blend of datasets: the recipe's own; a mixed batch: the sample's member's
            member, at = member_at(recipe, position)
            leaf = self.materializer.leaf(member)
            path = str(leaf.sources[int(member.refs.dataset[at])].path)
            what = f"killed its DataLoader worker {MAX_FAULTS} times ({reason})"
            self.excluded[step] = self.excluded.get(step, frozenset()) | {position}
            if leaf.error_policy is ErrorPolicy.RAISE:
                # raised when its step comes up (the workers go on without the sample until
                # then), so the consumer has every batch before it
                poisoned = BadSampleError(
                    path,
                    keys[position],
                    f"{what} at step {step}; fix or remove the file, or use "
                    "error_policy='skip' to leave it out and count it",
                )
                poisoned.__cause__ = err
                self.poisoned.setdefault(step, poisoned)
            else:
                log.warning(
                    "fpipe loader: sample %r of %s %s at step %d: left out and counted as "
                    "skipped (error_policy='skip')", keys[position], path, what, step,
                )  # fmt: skip
        self.recoveries += 1
        self.by_reason[reason] += 1
        log.warning(
            "fpipe loader: worker fault (%s) at step %s%s (samples %s); restarting the workers "
            "and materializing again from step %s (recovery %d). The fault: %s",
            reason, step, on, show_keys(keys), recipes[0].step if recipes else step,
            self.recoveries, err,
        )  # fmt: skip
