"""The Ray actors of this process (``worker_mode="ray"``) and the Ray session they belong to.

:func:`connect` joins the cluster (or uses the one the user joined); the pool lends a loader
its ``num_workers`` actors, idle ones first, and takes them back when the pass ends, so train
and validation loaders (or a loader iterated again) reuse the actors and their opened
datasets. Idle actors stay in the pool, per set of actor options, until
:func:`release_ray_actors` or the end of the process (Ray ends the actors of a driver that
exits). The pool also ships each materializer once per session, sizes this node's object
store for :mod:`fpipe.loader._ray_batches`, and holds the marks actor. A new ``ray.init``
(a new job, or a new cluster) voids it all: the next use starts from an empty pool.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import threading
import weakref
from typing import Any

from fpipe.core.errors import ConfigError
from fpipe.encode import batch_slots
from fpipe.loader import _ray_batches
from fpipe.loader._ray_actor import MarksActor, MaterializeActor
from fpipe.loader._ray_serialize import put_materializer
from fpipe.materialize.materializer import Materializer

__all__ = ["actors_in_use", "connect", "end_actor", "import_ray", "release_ray_actors"]

#: Seconds to wait for idle actors to answer a ping before a pass (see _Pool.replace_dead).
PING_S = 1.0
#: Actor options applied unless ``ray_options`` names them.
#: ``max_concurrency`` stays Ray's 1: with 2, an actor would store one result while it
#: materializes the next recipe, but a sample that kills the actor then takes the finished
#: recipe's unstored reply with it, every time that recipe is sent again with the killing one
#: behind it: that recipe fails twice unnamed and ``error_policy="skip"`` cannot skip the
#: sample (see :class:`MaterializeActor`).
DEFAULT_ACTOR_OPTIONS: dict[str, Any] = {"num_cpus": 1, "max_restarts": 0}


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


def connect(ray_options: dict | None) -> tuple[Any, dict]:
    """The ray module, initialized (``ray.init(address=...)`` when the user has not called
    it), and the actor options of ``ray_options``."""
    ray = import_ray()
    options = dict(DEFAULT_ACTOR_OPTIONS, **(ray_options or {}))
    address = options.pop("address", None)
    if not ray.is_initialized():
        ray.init(address=address)
    return ray, options


@dataclasses.dataclass
class _Actor:
    handle: Any
    started: Any  #: ObjectRef of ``where()``
    slot: str  #: the actor's id, its slot in the marks actor
    pid: int | None = None
    node: str | None = None
    sent: int = 0  #: tasks sent to it (the next task's ticket)
    #: its shared-memory slots, used when it runs on this node (see fpipe.encode.batch_slots)
    slots: batch_slots.SlotConfig | None = None


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
        #: slot configs given to actors, whose arena files are removed at exit (see slots_for)
        self.slot_configs: list[batch_slots.SlotConfig] = []

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
            end_actor(ray, actor)
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
                    end_actor(ray, actor)
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

    def slots_for(self, actor: _Actor, count: int) -> batch_slots.SlotConfig | None:
        """The actor's slot config (``count`` slots, made on its first use; None where this
        machine has no ``/dev/shm``). Arena files the loader never mapped (an actor that
        ended first) are removed when the actor is ended, or else at exit."""
        if actor.slots is None:
            actor.slots = batch_slots.new_config(count)
            if actor.slots is not None:
                with self.lock:
                    if not self.slot_configs:
                        atexit.register(_remove_arenas, self.slot_configs)
                    self.slot_configs.append(actor.slots)
        return actor.slots

    def marks_actor(self, ray) -> Any:
        with self.lock:
            if self.marks is None:
                self.marks = _remote(ray, MarksActor).options(num_cpus=0).remote()
            return self.marks


_POOL = _Pool()


def end_actor(ray, actor: _Actor) -> None:
    """Kill ``actor`` and let go of its slots (batches the consumer holds keep theirs)."""
    with contextlib.suppress(Exception):
        ray.kill(actor.handle)
    if actor.slots is not None:
        batch_slots.detach(actor.slots)


def _remove_arenas(configs: list[batch_slots.SlotConfig]) -> None:
    for config in list(configs):
        batch_slots.detach(config)


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
            end_actor(ray, actor)
