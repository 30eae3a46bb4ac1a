"""How Ray actors send tensors (``fpipe.loader._ray_batches``), without a Ray cluster: pickle
protocol 5 with out-of-band buffers, as Ray's serializer does, the buffers read-only as Ray's
object store hands them over. A tensor travels as its storage (once, however many tensors view
it) plus offset, dtype, shape and strides; it arrives over the buffer, without a copy, until
the pinned bytes would pass the bound, and then as a copy."""

from __future__ import annotations

import copyreg
import gc
import io
import pickle
import warnings

import pytest
import torch

from fpipe.loader import _ray_batches

BIG = 2 * _ray_batches.COPY_BELOW  # bytes of a storage that is read where it lies


class _ActorPickler(pickle.Pickler):
    dispatch_table = copyreg.dispatch_table | {torch.Tensor: _ray_batches.reduce_tensor}


def _send(obj) -> tuple[bytes, list[memoryview]]:
    """(header, read-only buffers) of ``obj`` pickled as in an actor."""
    buffers: list = []
    f = io.BytesIO()
    _ActorPickler(f, protocol=5, buffer_callback=buffers.append).dump(obj)
    return f.getvalue(), [memoryview(bytes(b.raw())) for b in buffers]  # bytes: read-only


def _receive(header: bytes, buffers: list[memoryview]):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns on a read-only array: must not happen
        return pickle.loads(header, buffers=buffers)


def _inside(t: torch.Tensor, buffers: list[memoryview]) -> bool:
    import numpy as np

    for b in buffers:
        start = np.frombuffer(b, np.uint8).ctypes.data
        if start <= t.data_ptr() < start + len(b):
            return True
    return False


@pytest.fixture
def bound(monkeypatch):
    """``set(n)``: at most ``n`` pinned bytes (restored after the test)."""
    monkeypatch.setattr(_ray_batches, "_bound", _ray_batches._bound)
    before = _ray_batches.pinned_bytes()[0]

    def set_bound(n: int) -> int:
        _ray_batches._bound = before + n
        return before

    return set_bound


def test_tensors_arrive_over_the_buffers_with_views_dtypes_and_strides_kept(bound):
    bound(10 * BIG)
    image = torch.arange(BIG, dtype=torch.int32).to(torch.uint8).reshape(4, -1)
    floats = torch.linspace(0, 1, BIG // 4).reshape(16, -1)
    batch = {
        "image": image,
        "row": image[1],  # a view: the same storage, sent once
        "t": floats.t(),  # strides kept
        "bf16": torch.ones(BIG // 2, dtype=torch.bfloat16),
        "flags": torch.zeros(BIG, dtype=torch.bool),
        "small": torch.tensor([1, 2, 3]),  # copied: too small to pin
        "empty": torch.empty(0, 5),
        "keys": ["a", "b"],
    }
    header, buffers = _send(batch)
    assert len(header) < 2000 and sum(len(b) for b in buffers) < 5 * BIG
    got = _receive(header, buffers)
    for name, t in batch.items():
        if isinstance(t, torch.Tensor):
            g = got[name]
            assert g.dtype == t.dtype and g.shape == t.shape and g.stride() == t.stride(), name
            assert torch.equal(g, t), name
    assert got["keys"] == ["a", "b"]
    assert got["row"].data_ptr() == got["image"].data_ptr() + got["image"].stride(0)
    assert all(_inside(got[k], buffers) for k in ("image", "t", "bf16", "flags"))
    assert not _inside(got["small"], buffers)
    got["image"][0, 0] = 7  # writable (the consumer's own batch), seen by its view
    assert got["image"][0, 0] == 7 and got["row"].data_ptr() != 0


def test_tensors_that_are_not_plain_cpu_tensors_travel_as_torch_pickles_them():
    weights = torch.ones(3, requires_grad=True)
    param = torch.nn.Parameter(torch.zeros(2))
    got = _receive(*_send({"w": weights, "p": param}))
    assert got["w"].requires_grad and torch.equal(got["w"], weights)
    assert type(got["p"]) is torch.nn.Parameter and torch.equal(got["p"], param)


def test_pinned_bytes_stay_within_the_bound_and_are_returned_when_batches_go(bound):
    """Kept batches pin their buffers until the bound, the next ones arrive as copies, and
    every pinned byte is counted back once the batches are dropped."""
    before = bound(2 * BIG)
    sent = [_send({"image": torch.full((BIG,), i, dtype=torch.uint8)}) for i in range(4)]
    kept = [_receive(*s) for s in sent]
    assert [_inside(b["image"], s[1]) for b, s in zip(kept, sent)] == [True, True, False, False]
    assert _ray_batches.pinned_bytes()[0] == before + 2 * BIG
    assert all(bool((b["image"] == i).all()) for i, b in enumerate(kept))
    view = kept[0]["image"][:10]  # a view holds the pin as long as it lives
    del kept
    gc.collect()
    assert _ray_batches.pinned_bytes()[0] == before + BIG
    del view
    gc.collect()
    assert _ray_batches.pinned_bytes()[0] == before


def test_set_capacity_shares_the_store_among_the_ranks_of_a_node(monkeypatch):
    monkeypatch.setattr(_ray_batches, "_bound", _ray_batches._bound)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    _ray_batches.set_capacity(1 << 30)
    assert _ray_batches.pinned_bytes()[1] == int((1 << 30) * _ray_batches.PINNED_SHARE) // 8


def test_results_made_on_other_nodes_are_fetched_ahead():
    """Before waiting for the next result, the loader asks Ray to move the results behind it
    that actors on other nodes made (Ray pulls an object only once it is asked for)."""
    import collections
    import types

    from fpipe.loader import _ray_pool, _ray_workers

    asked = []
    ray = types.SimpleNamespace(
        wait=lambda refs, **kw: asked.append((refs, kw)),
        exceptions=types.SimpleNamespace(RayError=RuntimeError),
    )
    actors = [_ray_pool._Actor(None, None, str(i), node=n) for i, n in enumerate("aab")]
    waiting = collections.deque([["r0", 2], ["r1", 0], ["r2", 2], ["r3", 1], ["r4", None]])
    actors.append(_ray_pool._Actor(None, None, "3"))  # not started: its node is unknown
    waiting[-1][1] = 3
    _ray_workers._fetch_ahead(ray, waiting, actors, here="a")
    assert asked == [(["r2", "r4"], {"num_returns": 2, "timeout": 0, "fetch_local": True})]
    asked.clear()
    _ray_workers._fetch_ahead(ray, collections.deque([["r0", 2]]), actors, here="a")
    assert asked == []  # only the next one: ray.get fetches it


def _laid_out(buffers: list) -> list[memoryview]:
    """``buffers`` placed in one read-only piece of memory as Ray's object store lays out a
    result's buffers: each at the next 64-byte boundary."""
    import numpy as np

    raw = [bytes(b.raw()) for b in buffers]
    offsets, end = [], 0
    for b in raw:
        end += -end % 64
        offsets.append(end)
        end += len(b)
    memory = bytearray(end + 64)
    base = -np.frombuffer(memory, np.uint8).ctypes.data % 64  # the store's memory is aligned
    for at, b in zip(offsets, raw):
        memory[base + at : base + at + len(b)] = b
    whole = memoryview(memory).toreadonly()
    return [whole[base + at : base + at + len(b)] for at, b in zip(offsets, raw)]


def test_a_large_storage_travels_as_chunks_ray_copies_in_one_piece_and_arrives_whole(bound):
    """Ray copies a buffer of more than 1 MiB into the store with a pool of threads; a storage
    goes as buffers of at most CHUNK bytes, and arrives as one storage over the store's memory
    (the chunks lie back to back there), or as a copy when they do not."""
    bound(100 * _ray_batches.CHUNK)
    image = torch.arange(5 * _ray_batches.CHUNK + 123, dtype=torch.int64).to(torch.uint8)
    batch = {"image": image.reshape(1, -1), "tail": image[-1000:]}
    buffers: list = []
    f = io.BytesIO()
    _ActorPickler(f, protocol=5, buffer_callback=buffers.append).dump(batch)
    assert len(buffers) == 6 and max(len(b.raw()) for b in buffers) <= _ray_batches.CHUNK
    placed = _laid_out(buffers)
    got = _receive(f.getvalue(), placed)
    assert torch.equal(got["image"], batch["image"]) and torch.equal(got["tail"], image[-1000:])
    assert _inside(got["image"], placed[:1]) and _inside(got["tail"], placed)
    assert got["tail"].data_ptr() == got["image"].data_ptr() + image.numel() - 1000
    apart = _receive(f.getvalue(), [memoryview(bytes(b.raw())) for b in buffers])
    assert torch.equal(apart["image"], batch["image"]) and not _inside(apart["image"], placed)
    assert apart["tail"].data_ptr() == apart["image"].data_ptr() + image.numel() - 1000


def test_an_actor_materializes_one_recipe_at_a_time_on_two_threads(monkeypatch):
    """An actor given two threads (``max_concurrency=2``: Ray stores one result while the next
    recipe materializes) still materializes one recipe at a time."""
    import threading
    import time

    from fpipe.loader import _ray_actor, _ray_pool

    # not the default: a sample that kills the actor would take the previous reply with it
    assert "max_concurrency" not in _ray_pool.DEFAULT_ACTOR_OPTIONS
    monkeypatch.setattr(_ray_batches, "register", lambda: None)
    running, most = [0], [0]

    def run_task(materializer, task, mark):
        running[0] += 1
        most[0] = max(most[0], running[0])
        time.sleep(0.02)
        running[0] -= 1
        return task

    monkeypatch.setattr(_ray_actor, "run_task", run_task)
    actor = _ray_actor.MaterializeActor()
    monkeypatch.setattr(actor, "_materializer", lambda ref: None)
    results: list = []
    threads = [
        threading.Thread(target=lambda i=i: results.append(actor.run([None], i))) for i in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [0, 1, 2, 3] and most[0] == 1


def test_an_actor_materializes_its_recipes_in_the_order_they_were_sent(monkeypatch):
    """Which of an actor's two threads takes the turn first is a race; recipes still
    materialize in the order sent (the loader blames a dead actor's fault on the first one),
    and a recipe waits for a missing one before it only so long."""
    import threading
    import time

    from fpipe.loader import _ray_actor

    monkeypatch.setattr(_ray_batches, "register", lambda: None)
    order: list = []

    def run_task(materializer, task, mark):
        order.append(task)
        time.sleep(0.01)
        return task

    monkeypatch.setattr(_ray_actor, "run_task", run_task)
    actor = _ray_actor.MaterializeActor()
    monkeypatch.setattr(actor, "_materializer", lambda ref: None)
    late = threading.Thread(target=actor.run, args=([None], "second", None, 1))
    late.start()  # ticket 1 reaches the actor's turn first
    time.sleep(0.05)
    actor.run([None], "first", None, 0)
    late.join()
    assert order == ["first", "second"]
    monkeypatch.setattr(_ray_actor, "ORDER_WAIT_S", 0.05)
    t0 = time.monotonic()
    actor.run([None], "after a lost one", None, 3)  # ticket 2 never comes
    assert order[-1] == "after a lost one" and time.monotonic() - t0 < 1


def test_source_records_travel_as_their_fields(monkeypatch):
    """A batch's SourceInfo records pickle as their four fields (a frozen dataclass with slots
    would go through ``dataclasses.fields`` for each record, twice per batch of 32)."""
    import dataclasses

    from fpipe.samples.source_info import SourceInfo

    records = [
        SourceInfo(dataset_path="/d", index=i, shard_name="s.tar", file_names=(f"{i}.jpg",))
        for i in range(3)
    ]

    def no_fields(*args, **kw):
        raise AssertionError("pickled through dataclasses.fields")

    monkeypatch.setattr(dataclasses, "fields", no_fields)
    got = pickle.loads(pickle.dumps(records, protocol=5))
    assert got == records and type(got[0]) is SourceInfo and hash(got[1]) == hash(records[1])
