"""What a batch from a Ray actor costs, piece by piece (for bench/ray_workers.py).

Two ways of sending tensors are compared: ``fpipe`` (what the loader's actors do,
:mod:`fpipe.loader._ray_batches`: storages out of band, read where they lie in the object store)
and ``torch`` (Ray's default: torch pickles each storage by ``torch.save`` into bytes, loaded
again on the receiving side). Each figure is a median over ``n`` batches:

- ``pickle_ms``: serializing the result as Ray does, in the actor;
- ``put_ms``: storing it, in the actor (``ray.put``: serializing, creating the object in the
  store, copying into it, sealing it: what the actor does with each result it returns);
- ``get_ms``: ``ray.get`` of that object here, once it is stored (the rank's side: the object
  store round trip, deserializing, making the tensors), and ``get_cpu_ms`` this process's CPU
  time for it;
- ``deserialize_ms``: of that, unpickling alone, from memory, the out-of-band buffers laid out
  as the store lays them out (``torch_load_ms`` of it: loading the storages' bytes, the
  ``torch`` way only);
- ``call_ms``: an actor call that sends a recipe-sized argument and returns nothing (Ray's
  task round trip, without a batch).
"""

from __future__ import annotations

import gc
import pickle
import statistics
import time
from typing import Any

from fpipe.loader import _ray_batches
from fpipe.loader._ray_workers import MaterializeActor


class TransportActor(MaterializeActor):
    """The loader's actor (``zero_copy``: fpipe's way of sending tensors; else Ray's
    default), also saying how long materializing took inside it, and sending synthetic
    batches of a given size."""

    def __init__(self, zero_copy: bool = True) -> None:
        super().__init__()
        if not zero_copy:
            import ray.util
            import torch

            ray.util.deregister_serializer(torch.Tensor)
        self.held: Any = None

    def timed(self, shipped: list, task, slots: tuple | None = None) -> tuple:
        """(result, seconds materializing); ``slots`` as the loader sends them (None: the
        result goes through the object store, as from an actor on another node)."""
        t0 = time.perf_counter()
        result = self.run(shipped, task, None, None, slots)
        return result, time.perf_counter() - t0

    def stored(self, shipped: list, task) -> tuple:
        """([ref of the result, stored by this actor], seconds pickling it, seconds storing
        it)."""
        import ray

        result = self.run(shipped, task)
        ctx = ray._private.worker.global_worker.get_serialization_context()
        t0 = time.perf_counter()
        ctx.serialize(result)
        t1 = time.perf_counter()
        ref = ray.put(result)
        return [ref], t1 - t0, time.perf_counter() - t1

    def hold(self, nbytes: int) -> None:
        """Keep a batch of ``nbytes`` in one uint8 tensor plus a header of 32 keys."""
        import torch

        side = max(1, int((nbytes // 3) ** 0.5))
        image = torch.randint(0, 255, (3, side, side), dtype=torch.uint8)
        keys = [f"shard-{i:04d}/sample-{i:08d}" for i in range(32)]
        self.held = {"image": image, "__key__": keys}

    def give(self) -> Any:
        return self.held

    def nothing(self, task) -> None:
        return None


def _median_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1e3, 2)


def _timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def costs(ray, actor, shipped: list, task: bytes, n: int, zero_copy: bool) -> dict:
    """``pickle_ms``, ``put_ms`` (in ``actor``), ``get_ms``, ``get_cpu_ms``, ``deserialize_ms``
    (and ``torch_load_ms``) of the result of ``task``, sent the ``zero_copy`` (fpipe) way or
    torch's."""
    import torch

    pickling, puts, gets, cpus = [], [], [], []
    for _ in range(n):
        refs, pickle_s, put_s = ray.get(actor.stored.remote(shipped, task))
        ray.wait(refs, fetch_local=True)
        c0, t0 = time.process_time(), time.perf_counter()
        result = ray.get(refs[0])
        gets.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        pickling.append(pickle_s)
        puts.append(put_s)
        del refs
    if zero_copy:
        _ray_batches.register()
    try:  # unpickling alone: buffers out of band as Ray keeps them (read-only memory)
        buffers: list = []
        data = ray.cloudpickle.dumps(result, protocol=5, buffer_callback=buffers.append)
        views = _laid_out(buffers)
        loads = _timed(lambda: pickle.loads(data, buffers=views), n)
    finally:
        if zero_copy:
            ray.util.deregister_serializer(torch.Tensor)
    gc.collect()
    out = {
        "pickle_ms": _median_ms(pickling),
        "put_ms": _median_ms(puts),
        "get_ms": _median_ms(gets),
        "get_cpu_ms": _median_ms(cpus),
        "deserialize_ms": _median_ms(loads),
    }
    if not zero_copy:  # the storages' torch.save bytes, loaded again
        blobs = [t._typed_storage().__reduce__()[1][0] for t in _tensors(result)]
        load = _timed(lambda: [torch.storage._load_from_bytes(b) for b in blobs], n)
        out["torch_load_ms"] = _median_ms(load)
    return out


def _laid_out(buffers: list) -> list[memoryview]:
    """Read-only views of ``buffers`` placed as Ray's object store places an object's
    out-of-band buffers: back to back in one piece of memory, each at a 64-byte boundary."""
    import numpy as np

    raw = [b.raw() for b in buffers]
    offsets, end = [], 0
    for b in raw:
        end += -end % 64
        offsets.append(end)
        end += len(b)
    memory = bytearray(end + 64)
    base = -np.frombuffer(memory, np.uint8).ctypes.data % 64
    for at, b in zip(offsets, raw):
        memory[base + at : base + at + len(b)] = b
    whole = memoryview(memory).toreadonly()
    return [whole[base + at : base + at + len(b)] for at, b in zip(offsets, raw)]


def _tensors(obj: Any) -> list:
    import torch

    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    if isinstance(obj, list | tuple):
        return [t for v in obj for t in _tensors(v)]
    if hasattr(obj, "__dict__"):
        return _tensors(vars(obj))
    return []


def call_ms(ray, actor, task: bytes, n: int) -> float:
    """Median round trip of an actor call sending ``task`` and returning nothing."""
    ray.get(actor.nothing.remote(task))
    return _median_ms(_timed(lambda: ray.get(actor.nothing.remote(task)), n))


def rank_cost(ray, actor, nbytes: int, n: int) -> dict[str, float]:
    """For a synthetic batch of ``nbytes`` held by ``actor``: ``round_trip_ms`` (call, store,
    fetch, deserialize), ``get_ms`` (``ray.get`` once the result is stored: the rank's wait),
    ``rank_cpu_ms`` (this process's CPU time per batch, calling and getting)."""
    ray.get(actor.hold.remote(nbytes))
    ray.get(actor.give.remote())
    trips, gets, cpus = [], [], []
    for _ in range(n):
        c0, t0 = time.process_time(), time.perf_counter()
        ref = actor.give.remote()
        ray.wait([ref], fetch_local=True)
        c1, t1 = time.process_time(), time.perf_counter()
        batch = ray.get(ref)
        t2, c2 = time.perf_counter(), time.process_time()
        trips.append(t2 - t0)
        gets.append(t2 - t1)
        cpus.append((c2 - c1) + (c1 - c0))
        del batch, ref
    return {
        "round_trip_ms": _median_ms(trips),
        "get_ms": _median_ms(gets),
        "rank_cpu_ms": _median_ms(cpus),
    }
