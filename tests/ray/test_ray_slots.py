"""A Ray actor on the training process's node sends its batches in shared-memory slots
(``fpipe.encode.batch_slots``, as worker processes do), without a Ray cluster: the actor's
half (``MaterializeActor.run``, its result pickled as Ray's serializer pickles it) and the
training process's half (unpickled here) in one process. Only where the tensors lie travels;
a batch the consumer keeps is never written again, a slot is reused once its batch is dropped,
a batch that finds no free slot goes through the object store, and an actor on another node
sends every batch through the object store."""

from __future__ import annotations

import copyreg
import gc
import io
import pickle
from multiprocessing.reduction import ForkingPickler

import pytest
import torch

from fpipe.encode import batch_memory, batch_slots
from fpipe.encode._collate import pad_stack
from fpipe.loader import _ray_actor, _ray_batches

pytestmark = pytest.mark.skipif(batch_slots.new_config(2) is None, reason="no /dev/shm")

HERE = "node-of-the-loader"


class _ActorPickler(pickle.Pickler):
    dispatch_table = copyreg.dispatch_table | {torch.Tensor: _ray_batches.reduce_tensor}


def _send(obj) -> tuple[bytes, list]:
    """(header, out-of-band buffers: what would go through the object store) of ``obj``
    pickled as Ray's serializer does in an actor."""
    buffers: list = []
    f = io.BytesIO()
    _ActorPickler(f, protocol=5, buffer_callback=buffers.append).dump(obj)
    return f.getvalue(), [memoryview(bytes(b.raw())) for b in buffers]


def _in_slot(t: torch.Tensor) -> bool:
    arenas = batch_slots._attached.values()
    return any(a.base <= t.data_ptr() < a.base + len(a.mm) for a in arenas)


def _run_task(materializer, task, mark):
    """A batch of two 3 x 16 x 16 images of value ``task``, collated as fpipe's batch hook
    does (into the actor's slot where it has one)."""
    with batch_memory.sent_as_collated():
        return pad_stack([torch.full((3, 16, 16), task, dtype=torch.uint8)] * 2)


@pytest.fixture
def actor(monkeypatch):
    """A MaterializeActor on node ``HERE``, in a process with no slots yet (restored after)."""
    for name, value in dict(
        _config=None, _arena=None, _arenas={}, _tickets={}, _made=0, _largest=0, _taken=[],
        _refused=None,
    ).items():  # fmt: skip
        monkeypatch.setattr(batch_slots, name, value)
    for cls in (torch.Tensor, torch.UntypedStorage):  # begin_task registers these: restored
        monkeypatch.setitem(ForkingPickler._extra_reducers, cls, None)
    monkeypatch.setattr(_ray_batches, "register", lambda: None)
    monkeypatch.setattr(_ray_actor, "run_task", _run_task)
    made = _ray_actor.MaterializeActor()
    made._node = HERE
    monkeypatch.setattr(made, "_materializer", lambda ref: None)
    return made


def test_an_actor_on_the_loaders_node_hands_batches_over_in_slots_kept_ones_never_change(actor):
    config = batch_slots.new_config(3)
    slots = (config, HERE, 0)
    try:
        header, buffers = _send(actor.run([None], 1, slots=slots))  # sizes the slots
        assert buffers and not _in_slot(pickle.loads(header, buffers=buffers))
        kept = []
        for value in (2, 3, 4):
            header, buffers = _send(actor.run([None], value, slots=slots))
            assert not buffers and len(header) < 1000  # only where the tensors lie
            kept.append(pickle.loads(header))
        assert all(_in_slot(b) for b in kept)
        assert [int(b[0, 0, 0, 0]) for b in kept] == [2, 3, 4]
        # every slot held by a kept batch: the next batch goes through the object store
        header, buffers = _send(actor.run([None], 5, slots=slots))
        late = pickle.loads(header, buffers=buffers)
        assert buffers and not _in_slot(late) and int(late[1, 2, 15, 15]) == 5
        for b, value in zip(kept, (2, 3, 4)):  # handed over, never written again
            assert torch.equal(b, torch.full((2, 3, 16, 16), value, dtype=torch.uint8))
        view = kept[1][1:]
        del kept[1]
        gc.collect()
        header, buffers = _send(actor.run([None], 6, slots=slots))
        assert buffers  # a view of the dropped batch still holds its slot
        del view
        gc.collect()
        header, buffers = _send(actor.run([None], 7, slots=slots))
        again = pickle.loads(header)  # its slot freed: reused
        assert not buffers and _in_slot(again) and int(again[0, 0, 0, 0]) == 7
        assert [int(b[0, 0, 0, 0]) for b in kept] == [2, 4]
    finally:
        batch_slots.detach(config)


def test_an_actor_on_another_node_sends_its_batches_through_the_object_store(actor):
    slots = (batch_slots.new_config(3), "another-node", 0)
    for value in range(3):
        header, buffers = _send(actor.run([None], value, slots=slots))
        got = pickle.loads(header, buffers=buffers)
        assert buffers and int(got[0, 0, 0, 0]) == value and not got.is_shared()
    assert batch_slots._arena is None and not batch_slots.active()


def test_slots_of_results_a_pass_left_unread_are_freed_when_the_next_pass_begins(actor):
    config = batch_slots.new_config(3)
    try:
        _send(actor.run([None], 1, slots=(config, HERE, 0)))  # sizes the slots
        kept = pickle.loads(_send(actor.run([None], 2, slots=(config, HERE, 0)))[0])
        for value in (3, 4):  # results sent, never read: the pass was left early
            _send(actor.run([None], value, slots=(config, HERE, 0)))
        header, buffers = _send(actor.run([None], 5, slots=(config, HERE, 0)))
        assert buffers  # no free slot in this pass
        read = []
        for value in (6, 7):  # a new pass: the unread results' two slots are free again
            header, buffers = _send(actor.run([None], value, slots=(config, HERE, 1)))
            read.append(pickle.loads(header))
            assert not buffers and int(read[-1][0, 0, 0, 0]) == value
        header, buffers = _send(actor.run([None], 8, slots=(config, HERE, 1)))
        assert buffers and int(kept[0, 0, 0, 0]) == 2  # the kept batch's slot stayed its own
    finally:
        batch_slots.detach(config)


def test_a_failed_task_frees_the_slot_it_took(actor, monkeypatch):
    config = batch_slots.new_config(2)

    def fails_after_collate(materializer, task, mark):
        _run_task(materializer, task, mark)
        raise ValueError("a hook failed")

    try:
        _send(actor.run([None], 1, slots=(config, HERE, 0)))  # sizes the slots
        monkeypatch.setattr(_ray_actor, "run_task", fails_after_collate)
        for _ in range(3):
            assert type(actor.run([None], 2, slots=(config, HERE, 0))).__name__ == "RemoteFailure"
        assert list(batch_slots._arena.mm[:2]) == [0, 0]
    finally:
        batch_slots.detach(config)
