"""The loader's iteration: the plan feeds recipes to a pool of workers, and their results come
back in plan order as batches, each advancing the loader's state.

The pool is torch's DataLoader (no workers, or worker processes; its "indices" are encoded
recipes from :class:`PlanSampler`) or fpipe's thread pool (:mod:`fpipe.loader.threads`); with
``recover_workers``, a failed pool is replaced (:mod:`fpipe.loader._recovery`).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import itertools
import weakref
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import msgspec
import torch.utils.data

from fpipe.encode import batch_slots
from fpipe.loader._group_batches import GroupBatcher
from fpipe.loader._pack_batches import PackBatcher
from fpipe.loader._read_ahead import Horizon
from fpipe.loader._recipe_batches import recipe_batches
from fpipe.loader._recovery import run_task
from fpipe.loader._stats import add_io
from fpipe.loader._worker_memory import worker_started
from fpipe.loader._workers import POLL_S, RemoteFailure, WorkerMarks, iterate, run_in_worker
from fpipe.loader.state import LoaderState, state_epoch
from fpipe.loader.steering import planned_recipes
from fpipe.loader.threads import iterate_threads
from fpipe.loader.watchdog import WatchdogDataset, watch_task, worker_watchdog
from fpipe.materialize.materializer import Materializer
from fpipe.materialize.recipe_codec import encode_recipe
from fpipe.plan.skip import next_recipe
from fpipe.storage.read.read_ahead import close as close_window
from fpipe.storage.read.read_ahead import take_io_counters

if TYPE_CHECKING:  # the loader calls these with itself
    from fpipe.loader.dataloader import Loader

__all__ = [
    "PlanSampler",
    "RecipeDataset",
    "group_batcher",
    "horizon",
    "identity",
    "iterate_batches",
    "pack_batcher",
    "pool",
    "pool_results",
    "torch_loader",
    "worker_context",
]


def identity(x):
    return x


class RecipeDataset(torch.utils.data.Dataset):
    """Map-style dataset whose "index" is an encoded recipe (a task of
    :func:`fpipe.loader._recovery.run_task`); ``marks``: where workers say which sample they
    are on; ``slots``: the shared-memory slots worker processes send batches in
    (:mod:`fpipe.encode.batch_slots`)."""

    def __init__(
        self,
        materializer: Materializer,
        marks: WorkerMarks | None = None,
        slots: batch_slots.SlotConfig | None = None,
        watchdog: WatchdogDataset | None = None,
    ):
        self.materializer, self.marks, self.slots = materializer, marks, slots
        #: watches each task in a worker process (fpipe.loader.watchdog); None: not watched
        self.watchdog = watchdog

    def __getitem__(self, task):
        mark = None if self.marks is None else self.marks.writer()
        in_worker = torch.utils.data.get_worker_info() is not None
        if self.slots is not None and in_worker:
            batch_slots.begin_task(self.slots)
        run = lambda: run_task(self.materializer, task, mark)  # noqa: E731
        if self.watchdog is not None and in_worker:  # (the loop watches num_workers=0 itself)
            watchdog = self.watchdog
            result = run_in_worker(lambda: watch_task(watchdog, run))
        else:
            result = run_in_worker(run)
        if isinstance(result, RemoteFailure):
            batch_slots.release_unsent()
        return result


class PlanSampler:
    """Iterates the plan from a start state; records (state after, epoch) per recipe sent.
    ``excluded``: step -> positions of that recipe to leave out (samples that killed their
    worker twice). ``horizon``: the read-ahead hints sent with each task
    (:mod:`fpipe.loader._read_ahead`; None: none)."""

    def __init__(
        self, plan, start, pending: collections.deque, excluded=None, skip=(), changes=(),
        horizon=None,
    ):  # fmt: skip
        self.plan, self.start, self.pending, self.skip = plan, start, pending, skip
        self.excluded: dict = {} if excluded is None else excluded
        #: online weight changes scheduled for later steps (fpipe.loader.steering)
        self.changes = tuple(changes)
        self.horizon = horizon

    def _recipes(self):
        """``(state after, recipe)`` in plan order, then ``(end state, None)``: steps in a skip
        range are planned (metadata only) and passed over; with scheduled weight changes, each
        is applied to the state before its step, so the state recorded after a recipe already
        holds the changes of the next step (as a seek to it does)."""
        if self.changes:
            yield from planned_recipes(self.plan, self.start, self.skip, self.changes)
            return
        state = self.start
        while True:
            state, recipe, _ = next_recipe(self.plan, state, self.skip)
            yield state, recipe
            if recipe is None:
                return

    def __iter__(self):
        recipes = self._recipes()
        # (state after, recipe or None at the end, its bytes): planned ahead of the task sent
        planned: collections.deque = collections.deque()
        for k in itertools.count():
            reach = 0 if self.horizon is None else self.horizon.needed(k)
            while len(planned) <= reach and (not planned or planned[-1][1] is not None):
                state, recipe = next(recipes)
                planned.append((state, recipe, None if recipe is None else encode_recipe(recipe)))
            after, recipe, data = planned.popleft()
            if recipe is None:
                # The end-of-stream state holds the final drop counts (a dropped remainder).
                self.pending.append((after, None, None))
                return
            epoch = int(recipe.refs.epoch.max()) if len(recipe.refs) else 0
            self.pending.append((after, epoch, recipe))
            excluded = self.excluded.get(recipe.step)
            if self.horizon is not None:
                upcoming = [data, *(p[2] for p in planned)]
                yield (data, tuple(excluded or ()), self.horizon.hint(k, upcoming))
            else:
                yield data if not excluded else (data, excluded)


def _sampler(loader: Loader, pending, start, excluded, horizon=None) -> PlanSampler:
    from fpipe.loader._steering import pending_changes

    changes = pending_changes(loader, start)
    return PlanSampler(loader.plan, start, pending, excluded, loader._state.skip, changes, horizon)


#: Loops over a loader not closed yet. A loop left open at interpreter exit would be closed by
#: the interpreter's last collection, after modules are torn down, where shutting its workers
#: down fails ("Exception ignored in ... 'NoneType' object is not callable"); an exit hook
#: closes them first, while everything is still whole.
_OPEN_LOOPS: weakref.WeakSet = weakref.WeakSet()


def closed_at_exit(loop: Generator[Any, None, None]) -> Generator[Any, None, None]:
    """``loop``, closed at interpreter exit if nothing closed it before."""
    _OPEN_LOOPS.add(loop)
    return loop


@atexit.register  # registered after torch's own hooks (imported above): runs before them
def _close_open_loops() -> None:
    for loop in list(_OPEN_LOOPS):
        with contextlib.suppress(Exception):  # a loop running in another thread, say
            loop.close()


def iterate_batches(loader: Loader) -> Generator[Any, None, None]:
    """Batches from the loader's state to the end of the stream (restarting from a state
    loaded during iteration)."""
    encoder = loader.dataset.materializer.task_encoder
    pin = loader.pin_memory and torch.cuda.is_available()
    while True:
        generation = loader._generation
        pending: collections.deque = collections.deque()
        restarted = False
        packer = pack_batcher(loader)
        grouper = group_batcher(loader)
        # a generator encode_batch: batches of the first recipe delivered before (a restore)
        taken = 0 if packer is not None or grouper is not None else loader._state.packs_taken
        results = pool_results(loader, pending)
        for result in results:
            if loader._generation != generation:
                restarted = True  # load_state_dict during iteration: start over from it
                break
            plan_state, epoch, recipe = pending.popleft()
            add_io(loader._io, result.io)
            if grouper is not None:  # grouped batching: the groups' batches, in plan order
                for batch, state in grouper.feed(recipe, result, plan_state, epoch, loader._state):
                    loader._state = state
                    yield encoder.pin_memory(batch) if pin else batch
                continue
            if packer is not None:  # a packing buffer: batches of packs across buffers
                for batch, state in packer.feed(result, plan_state, epoch, loader._state):
                    loader._state = state
                    yield encoder.pin_memory(batch) if pin else batch
                continue
            s = loader._state
            if result.batches is not None:  # a generator encode_batch: several batches
                own = state_epoch(loader.plan, plan_state, max(s.epoch, epoch))
                for batch, state in recipe_batches(result, plan_state, own, s, taken):
                    loader._state = state
                    if batch is not None:
                        yield encoder.pin_memory(batch) if pin else batch
                taken = 0
                continue
            taken = 0
            loader._state = LoaderState(
                plan_state,
                s.batches + 1,
                s.samples + result.num_samples,
                s.skipped + result.skipped,
                state_epoch(loader.plan, plan_state, max(s.epoch, epoch)),
                skip=s.skip,
            )
            if result.batch is None:
                continue  # every sample of the batch was skipped by the error policy
            yield encoder.pin_memory(result.batch) if pin else result.batch
        results.close()  # shuts the workers down now (on a restart, too)
        # a state loaded (or weights set) after the last batch, before the stream's end was
        # seen: start over from it, not end with the end state of the stream before it
        restarted = restarted or loader._generation != generation
        if not restarted:
            while pending:  # the end marker, once every batch has been taken
                plan_state, epoch, _ = pending.popleft()
                ender = grouper if grouper is not None else packer
                if epoch is None and ender is not None:
                    for batch, state in ender.finish(plan_state, loader._state):
                        loader._state = state
                        if batch is not None:
                            yield encoder.pin_memory(batch) if pin else batch
                elif epoch is None:
                    loader._state = msgspec.structs.replace(loader._state, plan=plan_state)
            return


def pack_batcher(loader: Loader) -> PackBatcher | None:
    """With a packing buffer, what makes batches of packs (None otherwise)."""
    ds = loader.dataset
    if not getattr(ds, "packing_buffer_size", None):
        return None
    return PackBatcher(ds.materializer.task_encoder, ds.batch_size, ds.drop_last, loader._state)


def group_batcher(loader: Loader) -> GroupBatcher | None:
    """With grouped batching (``batch_group_criterion``), what groups the encoded samples into
    batches (None otherwise); kept on the loader, so a loop that goes on from the last batch
    of the one before keeps its groups in memory instead of materializing them again."""
    ds = loader.dataset
    if not getattr(ds, "group_batches", False):
        return None
    grouper = loader._grouper
    if grouper is None:
        grouper = loader._grouper = GroupBatcher(ds, loader._state)
    else:
        grouper.resume(loader._state)
    return grouper


def pool_results(loader: Loader, pending: collections.deque):
    """Materialized results in plan order, from the loader's state on; with
    ``recover_workers``, a failed worker pool is replaced (fpipe.loader._recovery)."""
    if loader._healer is None:
        return pool(loader, pending, loader._state.plan, None)
    healer = loader._healer
    open_pool = lambda start: pool(loader, pending, start, healer.excluded)  # noqa: E731
    return healer.results(open_pool, pending, loader._state.plan)


def pool(loader: Loader, pending: collections.deque, start, excluded):
    """Materialized results in plan order from plan state ``start``: torch's DataLoader (no
    workers, or worker processes), fpipe's thread pool or Ray actors; ``pending`` gets each
    recipe's plan state. What the pool read ahead in this process is let go when it ends."""
    recipe_at = lambda ahead: pending[ahead][2]  # noqa: E731
    if loader.worker_mode == "ray" and loader.num_workers > 0:
        from fpipe.loader._ray_workers import iterate_ray  # Ray is an optional extra

        return iterate_ray(loader, _sampler(loader, pending, start, excluded), recipe_at=recipe_at)
    take_io_counters()  # reads of this process before the pool started are not its own
    ahead = horizon(loader)
    sampler = _sampler(loader, pending, start, excluded, ahead)
    if loader.worker_mode == "thread" and loader.num_workers > 0:
        results = iterate_threads(
            sampler,
            loader.dataset.materializer,
            num_threads=loader.num_workers,
            in_flight=loader.num_workers * loader.prefetch_factor,
            timeout=loader.timeout,
            recipe_at=recipe_at,
            describe=loader._describe,
        )
    else:
        results = iterate(
            torch_loader(loader, sampler),
            timeout=loader.timeout,
            recipe_at=recipe_at,
            describe=loader._describe,
        )
    return results if ahead is None else _closing(results, ahead.token)


def _closing(results, token):
    try:
        yield from results
    finally:
        results.close()
        close_window(token)


def horizon(loader: Loader) -> Horizon | None:
    """The read-ahead hints of a new worker pool of ``loader`` (None: read-ahead off)."""
    budget, n = loader.read_ahead_bytes, loader.num_workers
    if not budget or not loader.read_ahead_steps:
        return None
    if loader.worker_mode == "thread" and n > 0:  # one window for the threads, tasks in flight
        return Horizon(loader.read_ahead_steps, budget * n, 1, n * loader.prefetch_factor)
    return Horizon(loader.read_ahead_steps, budget, n)


def torch_loader(loader: Loader, sampler: PlanSampler):
    kwargs: dict = {}
    marks = slots = None
    if loader.num_workers > 0:
        context = worker_context(loader)
        kwargs = dict(
            prefetch_factor=loader.prefetch_factor,
            # short waits: fpipe.loader._workers.iterate applies loader.timeout itself
            timeout=min(POLL_S, loader.timeout) if loader.timeout else POLL_S,
            multiprocessing_context=context,
            worker_init_fn=worker_started,  # the worker's allocator keeps freed batches
        )
        marks = WorkerMarks(loader.num_workers, context)
        _preload_worker_modules()
        # the batches a worker may have in flight, the one it builds, and one spare
        slots = batch_slots.new_config(loader.prefetch_factor + 2)
    return torch.utils.data.DataLoader(
        RecipeDataset(loader.dataset.materializer, marks, slots, worker_watchdog(loader)),
        batch_size=None,
        sampler=sampler,
        num_workers=loader.num_workers,
        collate_fn=identity,
        **kwargs,
    )


def _preload_worker_modules() -> None:
    """Import here, before the worker processes are forked, what their first batch would import
    lazily (the default ``TaskEncoder.batch``'s collate): every forked worker inherits it,
    instead of each importing it again on the first batch's path."""
    from fpipe.encode import collate_samples  # noqa: F401  (imports the collate module)


def worker_context(loader: Loader):
    if loader.multiprocessing_context is not None:
        return loader.multiprocessing_context
    from fpipe.storage.paths import is_url

    sources = loader.dataset.materializer.sources
    paths = [s.path for s in sources] + [p.source.path for s in sources for p in s.join]
    if any(is_url(p) for p in paths):
        # Object storage: obstore's runtime does not survive fork. The fork server imports
        # torch and the materializer once; each worker is then a cheap fork of it.
        import multiprocessing

        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(
            ["torch", "fpipe.materialize.materializer", "fpipe.storage", "fpipe.encode._collate"]
        )
        return ctx
    return None
