"""What runs inside each Ray actor of ``worker_mode="ray"``: :class:`MaterializeActor`, which
materializes the recipes it is sent one at a time, in the order they were sent, with the
materializers it keeps, and :class:`MarksActor`, where an actor running a recipe that faulted
before reports each sample it starts.

An actor on the training process's node collates each batch into a shared-memory slot it
reuses (:mod:`fpipe.encode.batch_slots`, as worker processes do) and Ray carries only where the
tensors lie; the training process maps the slot. An actor on another node, or a batch that
finds no free slot, sends the bytes through Ray's object store (:mod:`fpipe.loader._ray_batches`).

Ray sends these classes to the actors by name, so each actor process imports this module; it
imports ``ray`` only inside the methods that run there (importing fpipe imports no Ray).
"""

from __future__ import annotations

import collections
import os
import threading
import time
from typing import Any

from fpipe.encode import batch_slots
from fpipe.loader import _ray_batches
from fpipe.loader._recovery import run_task
from fpipe.loader._worker_memory import keep_freed_memory
from fpipe.loader._workers import RemoteFailure, remote_failure
from fpipe.materialize.materializer import Materializer

__all__ = ["MarksActor", "MaterializeActor"]

#: Materializers (with their opened datasets) an actor keeps, most recently used first.
MATERIALIZERS_PER_ACTOR = 4
#: Seconds an actor waits for a recipe sent before the one it has (see MaterializeActor).
ORDER_WAIT_S = 1.0


class MaterializeActor:
    """What each Ray actor runs: tasks materialized with the materializers it was sent.

    One task materializes at a time (``_turn``). Ray stores a task's result after the method
    returns, on the task's thread: serializing it, creating the object, copying the tensors'
    bytes in and sealing it, each a round trip to the node's object store. With two threads
    (``ray_options={"max_concurrency": 2}``) the next recipe, already queued, materializes
    meanwhile, so the store's round trips are off the actor's critical path; it is not the
    default because a sample that kills the actor then also loses the reply of the recipe
    before it (not yet stored), each time both are sent again.

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
        self._node: str | None = None  #: this actor's node id, once asked
        self._pass: int | None = None  #: the loader's pass of the last task sent with slots
        _ray_batches.register()  # tensors go out of band, read where they lie in the store
        keep_freed_memory()  # a worker process: its batches leave in the object store

    def where(self) -> tuple[int, str]:
        """(pid, node id) of this actor: also tells the loader it has started."""
        import ray

        return os.getpid(), ray.get_runtime_context().get_node_id()

    def run(
        self,
        shipped: list,
        task: Any,
        marks: tuple | None = None,
        ticket: int | None = None,
        slots: tuple | None = None,
    ) -> Any:
        """Materialize ``task`` with the materializer ``shipped[0]`` (an ObjectRef, in a list so
        that Ray hands it over unresolved); a failure is returned as a RemoteFailure.
        ``marks``: (marks actor, slot) to report each sample started to; ``ticket``: the
        task's place in the order the loader sent this actor's tasks; ``slots``: (the
        :class:`~fpipe.encode.batch_slots.SlotConfig` of this actor, the loader's node id, the
        loader's pass): the batch goes in a slot where this actor runs on that node."""
        self._take_turn(ticket)
        try:
            self._begin(slots)
            result = self._run(shipped, task, marks)
            if isinstance(result, RemoteFailure):
                batch_slots.release_unsent()
            return result
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

    def _begin(self, slots: tuple | None) -> None:
        """Collate the next batch into a slot where the loader is on this node, else in
        ordinary memory (it goes through the object store)."""
        config = None
        if slots is not None:
            config, node, loader_pass = slots
            if self._node is None:
                import ray

                self._node = ray.get_runtime_context().get_node_id()
            if node != self._node:
                config = None
            elif loader_pass != self._pass:  # results of an earlier pass are never read
                batch_slots.reclaim_unclaimed()
                self._pass = loader_pass
        batch_slots.begin_task(config)

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
