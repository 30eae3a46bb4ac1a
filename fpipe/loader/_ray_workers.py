"""Ray actor workers (``worker_mode="ray"``): recipes materialized by Ray actors, on any node
of a Ray cluster.

The plan runs in the training process as in every mode; each recipe (a few hundred bytes)
goes to one of the loader's ``num_workers`` actors, round robin, ``prefetch_factor`` recipes
ahead per actor, and the results are taken in plan order. So the batches, the snapshots and
resume are those of process workers: the loader's state is the plan state after the last batch
taken, whatever the actors were doing.

An actor is a process on a cluster node that runs the same pure ``recipe -> batch`` function
as a worker process (:func:`fpipe.loader._recovery.run_task`) on its recipes, one at a time
and in the order they were sent (:mod:`fpipe.loader._ray_actor`). The materializer travels once
per loader through Ray's object store (its opener and paths: datasets are opened in the actor,
once); an actor keeps the last few materializers it was sent, so train and validation loaders
(or a loader iterated again) reuse the actors and their opened datasets. Idle actors stay in
this process's pool (:mod:`fpipe.loader._ray_pool`), per set of actor options, until
:func:`release_ray_actors` or the end of the process (Ray ends the actors of a driver that
exits).

An actor on this process's node collates each batch into one of its shared-memory slots and
returns only where the tensors lie (:mod:`fpipe.encode.batch_slots`, as worker processes do):
the batch is handed over where it lies, and the slot is reused once the consumer has dropped
the batch. Other results (an actor on another node, a batch that found no free slot) come back
through Ray's object store, their tensors out of band and read here where they lie
(:mod:`fpipe.loader._ray_batches`); those made on other nodes are moved here ahead of their
turn (:func:`_fetch_ahead`).

Faults: an exception raised while materializing comes back as a value
(:class:`~fpipe.loader._workers.RemoteFailure`) and is re-raised here with its type and
attributes. An actor that dies (killed, its node lost, Ray's out-of-memory killer) or produces
nothing for ``timeout`` seconds is ended and replaced, and the fault is one
:class:`~fpipe.core.WorkerError`; with ``recover_workers`` the loader's
:class:`~fpipe.loader._recovery.Healer` materializes the recipes in flight again, as for worker
processes. A dead actor cannot say which sample it was on, so a recipe that faulted once is run
again with *marks*: the actor reports each sample it starts to a small marks actor (one round
trip per sample, for that recipe only), and a second fault names the sample, which then follows
the error policy.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from fpipe.core.errors import WorkerError
from fpipe.loader._ray_actor import MaterializeActor
from fpipe.loader._ray_pool import (
    _POOL,
    _Actor,
    actors_in_use,
    connect,
    end_actor,
    import_ray,
    release_ray_actors,
)
from fpipe.loader._workers import RemoteFailure
from fpipe.materialize.materializer import show_keys
from fpipe.materialize.recipe_codec import decode_recipe

if TYPE_CHECKING:  # the loader calls this with itself
    from fpipe.loader.dataloader import Loader

#: the actor class and the pool's functions are importable from here, the mode's entry point
__all__ = ["MaterializeActor", "actors_in_use", "import_ray", "iterate_ray", "release_ray_actors"]

#: Seconds a new actor may take to be placed on a node and start (a busy cluster queues it).
ACTOR_START_S = 120.0
#: Numbers the loader's passes: an actor frees the slots of results an earlier pass left unread.
_PASSES = itertools.count()
#: Times a recipe is sent again to an actor Ray reported unavailable (a connection that failed
#: for a moment: the actor may be fine) before that counts as a fault.
UNAVAILABLE_RETRIES = 2


def iterate_ray(loader: Loader, recipes: Iterable[Any], *, recipe_at) -> Iterator[Any]:
    """Materialized results of ``recipes`` (tasks of
    :func:`~fpipe.loader._recovery.run_task`) in order, by the loader's ``num_workers`` actors;
    a fault is one :class:`WorkerError` (the failed actor is ended and replaced first).

    Args:
      loader: gives the actors' count, options, prefetch depth, ``timeout`` and the recipes
        that faulted before (its healer's), which run with marks.
      recipe_at: the recipe ``ahead`` tasks after the next one awaited (0: the awaited one).
    """
    ray, options = connect(loader.ray_options)
    key, actors = _POOL.borrow(ray, options, loader.num_workers)
    actors = _POOL.replace_dead(ray, options, actors)
    shipped = [_POOL.ship(ray, loader.dataset.materializer)]
    _POOL.size_store(ray)
    healer = loader._healer
    marked = {step for step, _ in healer.faults} if healer is not None else set()
    marks = _POOL.marks_actor(ray) if marked else None
    here = ray.get_runtime_context().get_node_id()
    loader_pass = next(_PASSES)
    slot_count = max(loader.prefetch_factor, 1) + 2  # in flight, and what the consumer holds
    source = iter(recipes)
    #: (result ref, actor index, task, whether it runs with marks, sends left when unavailable)
    waiting: collections.deque[list] = collections.deque()
    sent = 0

    def send(i: int, task: Any, with_marks: bool) -> Any:
        actor = actors[i]
        mark = (marks, actor.slot) if with_marks else None
        actor.sent += 1
        config = _POOL.slots_for(actor, slot_count)  # used by an actor on this node only
        slots = None if config is None else (config, here, loader_pass)
        return actor.handle.run.remote(shipped, task, mark, actor.sent - 1, slots)

    def submit() -> None:
        nonlocal sent
        for task in source:
            i = sent % len(actors)
            sent += 1
            with_marks = bool(marked) and _step_of(task) in marked
            waiting.append([send(i, task, with_marks), i, task, with_marks, UNAVAILABLE_RETRIES])
            return

    try:
        for _ in range(len(actors) * max(loader.prefetch_factor, 1)):
            submit()
        while waiting:
            ref, i, task, with_marks, retries = waiting[0]
            _fetch_ahead(ray, waiting, actors, here)
            try:
                result = _await(ray, ref, actors[i], loader.timeout)
            except _Fault as fault:
                if isinstance(fault.cause, ray.exceptions.ActorUnavailableError) and retries:
                    waiting[0] = [send(i, task, with_marks), i, task, with_marks, retries - 1]
                    continue  # pure: running it again is safe; a dead actor says so next
                actor = actors[i]
                actors[i] = _POOL.new_actor(ray, options)  # the failed one is not given back
                _POOL.discard(actor)
                end_actor(ray, actor)
                raise _error(ray, fault, i, actor, marks, recipe_at(0), loader) from fault.cause
            waiting.popleft()
            submit()
            if isinstance(result, RemoteFailure):
                result.reraise()
            yield result
    finally:
        # The recipes still queued for an abandoned pass are left to run (pure, a few per actor;
        # their results are dropped with ``waiting``): ray.cancel of a queued actor task leaves
        # a gap in the actor's task sequence, and Ray then holds every later task of this
        # process for that actor until its reorder timeout (30 s) before skipping the gap.
        _POOL.give_back(key, actors)


def _fetch_ahead(ray, waiting: collections.deque, actors: list[_Actor], here: str) -> None:
    """Start moving the results behind the next one to this node, where an actor on another
    node made them: Ray pulls an object from another node only once it is asked for, so
    results taken one by one would each wait for their transfer. Only the results ready now
    are pulled (asking for one not made yet is forgotten), so this is asked again each batch."""
    behind = [w[0] for w in itertools.islice(waiting, 1, None) if actors[w[1]].node != here]
    if behind:
        with contextlib.suppress(ray.exceptions.RayError):
            ray.wait(behind, num_returns=len(behind), timeout=0, fetch_local=True)


def _step_of(task: Any) -> int:
    data = task if isinstance(task, bytes) else task[0]
    return decode_recipe(data).step


class _Fault(Exception):
    def __init__(self, what: str, reason: str, cause: BaseException | None = None):
        super().__init__(what)
        self.what, self.reason, self.cause = what, reason, cause


def _await(ray, ref: Any, actor: _Actor, timeout: float) -> Any:
    """The result of ``ref``, or a _Fault: the actor died, did not start, or produced nothing
    for ``timeout`` seconds."""
    exceptions = ray.exceptions
    try:
        if actor.pid is None:  # a new actor: placing and starting it may take a while
            try:
                actor.pid, actor.node = ray.get(actor.started, timeout=max(ACTOR_START_S, timeout))
            except exceptions.GetTimeoutError:
                raise _Fault(
                    f"did not start within {max(ACTOR_START_S, timeout):g} s (does the cluster "
                    "have a node with the resources asked for in ray_options?)",
                    "timed out",
                ) from None
        return ray.get(ref, timeout=timeout or None)
    except exceptions.GetTimeoutError:
        raise _Fault(f"produced nothing for {timeout:g} s (timeout)", "timed out") from None
    except exceptions.OutOfMemoryError as err:
        raise _Fault("was ended by Ray's out-of-memory monitor", "out of memory", err) from err
    except exceptions.RayError as err:  # the actor died, its node was lost, its result lost
        raise _Fault(f"died ({type(err).__name__})", "died", err) from err


def _error(ray, fault: _Fault, i: int, actor: _Actor, marks, recipe, loader) -> WorkerError:
    """The WorkerError for ``fault`` of actor ``i``, naming the recipe and, when the recipe
    ran with marks, the sample it was on."""
    try:
        step, keys = loader._describe(recipe)
    except Exception:  # noqa: BLE001 - naming the recipe must not hide the fault
        step, keys = None, ()
    position = None
    if marks is not None and step is not None:
        with contextlib.suppress(Exception):
            marked_step, at = ray.get(marks.read.remote(actor.slot), timeout=10)
            if marked_step == step and 0 <= at < len(keys):
                position = at
    doing = f"step {step} (samples {show_keys(keys)})" if step is not None else "no recipe"
    if position is not None:
        doing += f", on sample {keys[position]!r} (position {position})"
    node = f", node {actor.node[:12]}" if actor.node else ""
    return WorkerError(
        f"Ray actor {i} (pid {actor.pid}{node}) {fault.what} while materializing {doing}. "
        "The loader's state is the one after the last batch taken: iterate again or "
        "load_state_dict() to resume exactly.",
        worker=i,
        pid=actor.pid,
        reason=fault.reason,
        step=step,
        keys=tuple(keys),
        position=position,
    )
