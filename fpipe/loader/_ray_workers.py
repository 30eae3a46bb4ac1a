"""Ray actor workers (``worker_mode="ray"``): recipes materialized by Ray actors, on any node
of a Ray cluster.

The plan runs in the training process as in every mode; each recipe (a few hundred bytes)
goes to one of the loader's ``num_workers`` actors, round robin, ``prefetch_factor`` recipes
ahead per actor, and the results are taken in plan order. So the batches, the snapshots and
resume are those of process workers: the loader's state is the plan state after the last batch
taken, whatever the actors were doing.

An actor is a process on a cluster node that runs the same pure ``recipe -> batch`` function
as a worker process (:func:`fpipe.loader._recovery.run_task`). The materializer travels once
per loader through Ray's object store (its opener and paths: datasets are opened in the actor,
once); an actor keeps the last few materializers it was sent, so train and validation loaders
(or a loader iterated again) reuse the actors and their opened datasets. Idle actors stay in
this process's pool, per set of actor options, until :func:`release_ray_actors` or the end of the
process (Ray ends the actors of a driver that exits).

Results come back through Ray's object store, their tensors out of band and read here where
they lie (:mod:`fpipe.loader._ray_batches`); those made on other nodes are moved here ahead of
their turn (:func:`_fetch_ahead`).

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
import dataclasses
import functools
import itertools
import os
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from fpipe.core.errors import ConfigError, WorkerError
from fpipe.loader import _ray_batches
from fpipe.loader._ray_serialize import put_materializer
from fpipe.loader._recovery import run_task
from fpipe.loader._workers import RemoteFailure, remote_failure
from fpipe.materialize.materializer import Materializer, show_keys
from fpipe.materialize.recipe_codec import decode_recipe

if TYPE_CHECKING:  # the loader calls this with itself
    from fpipe.loader.dataloader import Loader

__all__ = ["MaterializeActor", "actors_in_use", "import_ray", "iterate_ray", "release_ray_actors"]

#: Seconds a new actor may take to be placed on a node and start (a busy cluster queues it).
ACTOR_START_S = 120.0
#: Materializers (with their opened datasets) an actor keeps, most recently used first.
MATERIALIZERS_PER_ACTOR = 4
#: Seconds to wait for idle actors to answer a ping before a pass (see _Pool.replace_dead).
PING_S = 1.0
#: Times a recipe is sent again to an actor Ray reported unavailable (a connection that failed
#: for a moment: the actor may be fine) before that counts as a fault.
UNAVAILABLE_RETRIES = 2
#: Seconds an actor waits for a recipe sent before the one it has (see MaterializeActor).
ORDER_WAIT_S = 1.0
#: Actor options applied unless ``ray_options`` names them.
#: ``max_concurrency`` 2: an actor stores a result in the object store (and replies) on one
#: thread while it materializes the next recipe on the other (see :class:`MaterializeActor`).
DEFAULT_ACTOR_OPTIONS: dict[str, Any] = {"num_cpus": 1, "max_restarts": 0, "max_concurrency": 2}


def import_ray():
    """The ``ray`` module, or a ConfigError saying how to install it."""
    try:
        import ray
    except ImportError as err:
        raise ConfigError(
            'worker_mode="ray" needs Ray: pip install "fpipe[ray]" (and start or join a Ray '
            "cluster, see docs/ray.md)"
        ) from err
    return ray


class MaterializeActor:
    """What each Ray actor runs: tasks materialized with the materializers it was sent.

    One task materializes at a time (``_turn``). Ray stores a task's result after the method
    returns, on the task's thread: serializing it, creating the object, copying the tensors'
    bytes in and sealing it, each a round trip to the node's object store. With two threads
    (``max_concurrency=2``) the next recipe, already queued, materializes meanwhile, so the
    store's round trips are off the actor's critical path.

    Recipes materialize in the order they were sent (their ``ticket``, counted per actor by
    the loader): Ray hands queued tasks to the two threads in order, but which thread takes the
    turn first is a race, and the loader blames a dead actor's fault on the recipe it awaits
    from it, the first one sent. A task whose ticket is ahead of the next one expected waits
    for it at most :data:`ORDER_WAIT_S` (a recipe sent again after a lost connection may
    never come)."""

    def __init__(self) -> None:
        self._materializers: collections.OrderedDict[str, Materializer] = collections.OrderedDict()
        self._turn = threading.Condition()
        self._busy = False
        self._next = 0  #: the ticket expected next
        _ray_batches.register()  # tensors go out of band, read where they lie in the store

    def where(self) -> tuple[int, str]:
        """(pid, node id) of this actor: also tells the loader it has started."""
        import ray

        return os.getpid(), ray.get_runtime_context().get_node_id()

    def run(
        self, shipped: list, task: Any, marks: tuple | None = None, ticket: int | None = None
    ) -> Any:
        """Materialize ``task`` with the materializer ``shipped[0]`` (an ObjectRef, in a list so
        that Ray hands it over unresolved); a failure is returned as a RemoteFailure.
        ``marks``: (marks actor, slot) to report each sample started to; ``ticket``: the
        task's place in the order the loader sent this actor's tasks."""
        self._take_turn(ticket)
        try:
            return self._run(shipped, task, marks)
        finally:
            with self._turn:
                self._busy = False
                self._turn.notify_all()

    def _take_turn(self, ticket: int | None) -> None:
        deadline = time.monotonic() + ORDER_WAIT_S
        with self._turn:
            while True:
                early = ticket is not None and ticket > self._next
                left = deadline - time.monotonic()
                if not self._busy and (not early or left <= 0):
                    break
                self._turn.wait(None if self._busy else left)
            self._busy = True
            if ticket is not None:
                self._next = max(self._next, ticket + 1)

    def _run(self, shipped: list, task: Any, marks: tuple | None) -> Any:
        try:
            mark = None
            if marks is not None:
                import ray

                handle, slot = marks

                def mark(step: int, position: int) -> None:
                    ray.get(handle.set.remote(slot, step, position))

            return run_task(self._materializer(shipped[0]), task, mark)
        except Exception as err:  # noqa: BLE001 - every failure travels back as a value
            return remote_failure(err)

    def _materializer(self, ref: Any) -> Materializer:
        key = ref.hex()
        materializer = self._materializers.get(key)
        if materializer is None:
            import ray

            materializer = self._materializers[key] = ray.get(ref)
            while len(self._materializers) > MATERIALIZERS_PER_ACTOR:
                self._materializers.popitem(last=False)
        self._materializers.move_to_end(key)
        return materializer


class MarksActor:
    """Where each actor running a marked recipe is: ``slot -> (step, position)``."""

    def __init__(self) -> None:
        self.marks: dict[str, tuple[int, int]] = {}

    def set(self, slot: str, step: int, position: int) -> None:
        self.marks[slot] = (step, position)

    def read(self, slot: str) -> tuple[int, int]:
        return self.marks.get(slot, (-1, -1))


@dataclasses.dataclass
class _Actor:
    handle: Any
    started: Any  #: ObjectRef of ``where()``
    slot: str  #: the actor's id, its slot in the marks actor
    pid: int | None = None
    node: str | None = None
    sent: int = 0  #: tasks sent to it (the next task's ticket)


class _Pool:
    """This process's idle actors by options, the materializers shipped, the marks actor."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: dict[str, list[_Actor]] = {}
        #: actors lent to a loader now (by id), for :func:`actors_in_use`
        self.lent: dict[str, _Actor] = {}
        self.shipped: weakref.WeakKeyDictionary[Materializer, Any] = weakref.WeakKeyDictionary()
        self.marks: Any = None
        self.session: tuple[str, str] | None = None
        #: this node's object store capacity is known (kept batches are bounded by it)
        self.sized = False

    def _check_session(self, ray) -> None:
        # A new ray.init makes the handles of the old connection void: a new job of the same
        # cluster (a new job id), or a new cluster, whose job ids start at 1 again but whose
        # nodes (this driver's among them) have new ids.
        context = ray.get_runtime_context()
        session = (context.get_job_id(), context.get_node_id())
        if session != self.session:
            self.idle, self.lent, self.marks, self.session = {}, {}, None, session
            self.shipped = weakref.WeakKeyDictionary()
            self.sized = False

    def borrow(self, ray, options: dict, n: int) -> tuple[str, list[_Actor]]:
        """``n`` actors with ``options``: idle ones first. Idle actors of other options are
        ended (their resources may be the ones the new actors need)."""
        with self.lock:
            self._check_session(ray)
            key = repr(sorted(options.items()))
            idle = self.idle.setdefault(key, [])
            actors = [idle.pop() for _ in range(min(n, len(idle)))]
            self.lent.update((a.slot, a) for a in actors)
            others = [a for k in list(self.idle) if k != key for a in self.idle.pop(k)]
        for actor in others:
            with contextlib.suppress(Exception):
                ray.kill(actor.handle)
        return key, actors + [self.new_actor(ray, options) for _ in range(n - len(actors))]

    def replace_dead(self, ray, options: dict, actors: list[_Actor]) -> list[_Actor]:
        """``actors`` with those that died while idle (a node lost between two passes)
        replaced: one ping each, answered in milliseconds by a live idle actor (one still busy
        with a recipe of an abandoned pass is kept)."""
        pings = {a.slot: a.handle.where.remote() for a in actors if a.pid is not None}
        if not pings:
            return actors
        ready, _ = ray.wait(list(pings.values()), num_returns=len(pings), timeout=PING_S)
        done = {ref.hex() for ref in ready}
        out = []
        for actor in actors:
            ping = pings.get(actor.slot)
            if ping is not None and ping.hex() in done:
                try:
                    ray.get(ping)
                except ray.exceptions.RayError:
                    self.discard(actor)
                    with contextlib.suppress(Exception):
                        ray.kill(actor.handle)
                    actor = self.new_actor(ray, options)
            out.append(actor)
        return out

    def give_back(self, key: str, actors: list[_Actor]) -> None:
        with self.lock:
            for actor in actors:
                self.lent.pop(actor.slot, None)
            self.idle.setdefault(key, []).extend(actors)

    def new_actor(self, ray, options: dict) -> _Actor:
        handle = _remote(ray, MaterializeActor).options(**options).remote()
        actor = _Actor(handle, handle.where.remote(), handle._actor_id.hex())
        with self.lock:
            self.lent[actor.slot] = actor
        return actor

    def discard(self, actor: _Actor) -> None:
        with self.lock:
            self.lent.pop(actor.slot, None)

    def ship(self, ray, materializer: Materializer) -> Any:
        with self.lock:
            self._check_session(ray)
            ref = self.shipped.get(materializer)
            if ref is None:
                ref = self.shipped[materializer] = put_materializer(ray, materializer)
            return ref

    def size_store(self, ray) -> None:
        """Bound the object store bytes that batches kept here may pin, once per session,
        by this node's object store capacity."""
        if self.sized:
            return
        node = ray.get_runtime_context().get_node_id()
        for info in ray.nodes():
            if info.get("NodeID") == node and info.get("Resources", {}).get("object_store_memory"):
                _ray_batches.set_capacity(int(info["Resources"]["object_store_memory"]))
        self.sized = True

    def marks_actor(self, ray) -> Any:
        with self.lock:
            if self.marks is None:
                self.marks = _remote(ray, MarksActor).options(num_cpus=0).remote()
            return self.marks


_POOL = _Pool()


@functools.cache
def _remote(ray, cls: type) -> Any:
    """``ray.remote(cls)``, made once (each call would export the class again)."""
    return ray.remote(cls)


def actors_in_use() -> list[tuple[Any, int | None, str | None]]:
    """(actor handle, pid, node id) of the actors iterating loaders of this process now (the
    pid and node are None until the actor has started)."""
    with _POOL.lock:
        return [(a.handle, a.pid, a.node) for a in _POOL.lent.values()]


def release_ray_actors() -> None:
    """End this process's idle Ray actors (those of loaders not iterating now)."""
    import ray

    with _POOL.lock:
        idle, _POOL.idle = _POOL.idle, {}
    for actors in idle.values():
        for actor in actors:
            with contextlib.suppress(Exception):
                ray.kill(actor.handle)


def connect(ray_options: dict | None) -> tuple[Any, dict]:
    """The ray module, initialized (``ray.init(address=...)`` when the user has not called
    it), and the actor options of ``ray_options``."""
    ray = import_ray()
    options = dict(DEFAULT_ACTOR_OPTIONS, **(ray_options or {}))
    address = options.pop("address", None)
    if not ray.is_initialized():
        ray.init(address=address)
    return ray, options


def iterate_ray(loader: Loader, recipes: Iterable[Any], *, recipe_at) -> Iterator[Any]:
    """Materialized results of ``recipes`` (tasks of :func:`run_task`) in order, by the
    loader's ``num_workers`` actors; a fault is one :class:`WorkerError` (the failed actor is
    ended and replaced first).

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
    source = iter(recipes)
    #: (result ref, actor index, task, whether it runs with marks, sends left when unavailable)
    waiting: collections.deque[list] = collections.deque()
    sent = 0

    def send(i: int, task: Any, with_marks: bool) -> Any:
        actor = actors[i]
        mark = (marks, actor.slot) if with_marks else None
        actor.sent += 1
        return actor.handle.run.remote(shipped, task, mark, actor.sent - 1)

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
                with contextlib.suppress(Exception):
                    ray.kill(actor.handle)
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
