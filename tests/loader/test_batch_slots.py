"""Worker processes send collated batches in reused shared-memory slots
(``fpipe.encode.batch_slots``): the batches are those of thread workers, bit for bit; after each
worker's first batch (which sizes its slots) the batches arrive through a slot, handed to the
consumer where they lie; a slot is freed once the consumer drops its batch (or when its task
fails), and no file is left in ``/dev/shm``."""

from __future__ import annotations

import errno
import gc
import glob
import multiprocessing.reduction
import os
import pickle
import types
import zlib
from multiprocessing.reduction import ForkingPickler

import pytest
import torch
import torch.nn.functional as F

from fpipe.encode import DefaultTaskEncoder, batch_slots
from tests.loader.helpers import build, digest

pytestmark = pytest.mark.skipif(batch_slots.new_config(2) is None, reason="no /dev/shm")


def _files() -> set[str]:
    """This process's arena files: a config's names start with the pid that made it, and other
    test processes (pytest-xdist's other worker) make and remove theirs at the same time."""
    return set(glob.glob(f"/dev/shm/fpipe-slots-{os.getpid()}-*"))


class FixedSize(DefaultTaskEncoder):
    """Every image cropped or padded to 24 x 24: batches of one size, fpipe's own batch hooks."""

    def encode_sample(self, sample, rng):
        image = sample.image[:, :24, :24]
        image = F.pad(image, (0, 24 - image.shape[2], 0, 24 - image.shape[1]))
        return sample.replace(image=image)


class GrowingSize(DefaultTaskEncoder):
    """Images of 8 to 40 pixels a side by key: padded batches of changing sizes (a batch may
    outgrow its slot; the next slots are larger)."""

    def encode_sample(self, sample, rng):
        side = 8 + zlib.crc32(sample.__key__.encode()) % 33
        image = sample.image[:, :side, :side]
        pad = (0, side - image.shape[2], 0, side - image.shape[1])
        return sample.replace(image=F.pad(image, pad))


def _in_slot(t: torch.Tensor) -> bool:
    """Whether ``t`` (as it arrives in the main process) lies in a slot of an arena mapped
    here, rather than in a fresh segment of its own."""
    return any(a.base <= t.data_ptr() < a.base + len(a.mm) for a in batch_slots._attached.values())


def _run(path, encoder, mode):
    loader = build(path, encoder=encoder, num_workers=2, worker_mode=mode, num_epochs=1)
    return [(digest(b), _in_slot(b.image)) for b in loader]


@pytest.mark.parametrize("encoder", [FixedSize, GrowingSize])
def test_process_batches_come_through_slots_and_equal_thread_batches(image_dataset, encoder):
    before = _files()
    procs = _run(image_dataset, encoder(), "process")
    threads = _run(image_dataset, encoder(), "thread")
    assert [d for d, _ in procs] == [d for d, _ in threads] and len(procs) > 10
    through_slots = [in_slot for _, in_slot in procs]
    assert sum(through_slots) >= len(procs) - (2 if encoder is FixedSize else 8)
    assert _files() == before  # every arena's file removed


class KeyStamped(DefaultTaskEncoder):
    """Every image a 24 x 24 block of one value taken from its key: batches that differ in
    their pixels (the test images alone may not)."""

    def encode_sample(self, sample, rng):
        value = zlib.crc32(sample.__key__.encode()) % 251
        return sample.replace(image=torch.full((3, 24, 24), value, dtype=torch.uint8))


def test_batches_the_consumer_keeps_are_never_written_again(image_dataset):
    """A consumer that keeps every batch holds every slot: the workers send the rest the
    fresh-segment way, and no kept batch changes."""
    loader = build(image_dataset, encoder=KeyStamped(), num_workers=2, num_epochs=1)
    kept = [(b, b.image.clone(), _in_slot(b.image)) for b in loader]
    assert len({bytes(c.numpy()) for _, c, _ in kept}) == len(kept) > 10  # all different
    assert all(torch.equal(b.image, c) for b, c, _ in kept)
    assert 2 <= sum(in_slot for *_, in_slot in kept) < len(kept)  # some came through slots


def test_kept_batches_cost_no_file_descriptor_each(image_dataset, open_files_headroom):
    """Twice as many kept batches as descriptors left: once the slots are all held, the rest
    arrive in fresh segments, each of which used to keep a descriptor open in this process
    (torch's way) until EMFILE stopped the loader."""
    loader = build(image_dataset, encoder=KeyStamped(), num_workers=2, batch_size=1, num_epochs=1)
    few_descriptors = open_files_headroom(48)
    kept = [(b, b.image.clone(), _in_slot(b.image)) for b in loader]
    assert len(kept) >= 2 * few_descriptors
    assert sum(not in_slot for *_, in_slot in kept) > few_descriptors  # fresh segments
    assert all(torch.equal(b.image, c) for b, c, _ in kept)
    assert loader.stats().recoveries == 0


def _fresh_worker_state(monkeypatch):
    """This process as a new worker process would be, restored after the test."""
    for name, value in dict(
        _config=None,
        _arena=None,
        _arenas={},
        _tickets={},
        _made=0,
        _largest=0,
        _taken=[],
        _refused=None,
        _once=set(),
    ).items():
        monkeypatch.setattr(batch_slots, name, value)
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: types.SimpleNamespace(id=0))
    for cls in (torch.Tensor, torch.UntypedStorage):  # the reducers, restored after
        monkeypatch.setitem(ForkingPickler._extra_reducers, cls, None)


def test_no_room_in_dev_shm_means_batches_as_torch_sends_them(monkeypatch):
    _fresh_worker_state(monkeypatch)

    def full(fd, offset, size):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(batch_slots.os, "posix_fallocate", full)
    config = batch_slots.new_config(2)
    before = _files()
    for _ in range(3):
        batch_slots.begin_task(config)
        assert batch_slots.take((4, 8), torch.int16) is None
    assert batch_slots._arena is None and _files() == before  # no arena file left behind


def test_a_worker_reuses_a_slot_once_its_batch_is_read(monkeypatch):
    """The worker and main-process halves in one process: take, pickle as the worker's queue
    does, unpickle as the main process does."""
    _fresh_worker_state(monkeypatch)
    config = batch_slots.new_config(2)
    before = _files()

    batch_slots.begin_task(config)
    batch_slots.take((4, 8), torch.int16)  # the first batch sizes the slots
    batch_slots.release_unsent()
    batch_slots.begin_task(config)
    arena = batch_slots._arena
    a = batch_slots.take((4, 8), torch.int16)
    a.copy_(torch.arange(32, dtype=torch.int16).view(4, 8))
    assert arena.mm[0] == 1 and arena.mm[1] == 0
    sent = bytes(ForkingPickler.dumps({"a": a, "t": a.t()}))
    assert len(sent) < 1000  # where the tensors lie, not their bytes
    got = pickle.loads(sent)  # the main process: the slot's tensors, where they lie
    assert torch.equal(got["a"], a) and torch.equal(got["t"], a.t()) and not got["a"].is_shared()
    assert got["a"].data_ptr() != a.data_ptr()  # the main process's own mapping
    a[0, 0] = 7
    assert got["a"][0, 0] == 7  # the same memory: handed over, not copied
    view = got["t"][1:3]
    del got, a
    gc.collect()
    assert arena.mm[0] == 2  # a view of the batch still holds its slot (claimed here)
    del view
    gc.collect()
    assert arena.mm[0] == 0  # the consumer dropped the whole batch: the slot is free

    batch_slots.begin_task(config)  # a task that fails after collate frees its slot
    assert batch_slots.take((2, 2), torch.float32) is not None and arena.mm[0] == 1
    batch_slots.release_unsent()
    assert arena.mm[0] == 0

    batch_slots.begin_task(config)  # a batch larger than the slot: ordinary path, then larger
    assert batch_slots.take((64, 64), torch.float64) is None
    batch_slots.begin_task(config)
    assert batch_slots._arena is not arena and batch_slots.take((64, 64), torch.float64) is not None
    batch_slots.detach(config)
    assert _files() == before


def test_a_workers_first_batch_travels_in_a_file_of_its_own(monkeypatch):
    """Before the slots are sized, a worker's first batch lies in a shared file of its own per
    tensor, sent as where it lies (not as a descriptor the main process would fetch from a
    server thread of the worker); the main process maps it and removes the file, and the
    worker lets go of it once sent. A first task that fails removes its files."""
    _fresh_worker_state(monkeypatch)
    config = batch_slots.new_config(2)
    before = _files()
    batch_slots.begin_task(config)
    a = batch_slots.take((4, 8), torch.int16)
    assert a is not None and batch_slots._arena is None  # no slots yet: a file of its own
    a.copy_(torch.arange(32, dtype=torch.int16).view(4, 8))
    sent = bytes(ForkingPickler.dumps({"a": a}))
    assert len(sent) < 1000 and batch_slots._arenas == {}  # where it lies; let go of here
    got = pickle.loads(sent)["a"]  # the main process
    assert torch.equal(got, a) and got.data_ptr() != a.data_ptr()
    assert _files() == before  # mapped here, its file removed
    assert not any(n.endswith("-once") for n in batch_slots._attached)  # mapped while it lives

    monkeypatch.setattr(batch_slots, "_largest", 0)  # another first task, which fails
    batch_slots.begin_task(config)
    assert batch_slots.take((2, 2), torch.float32) is not None and _files() != before
    batch_slots.release_unsent()
    assert _files() == before and batch_slots._arenas == {}
    batch_slots.detach(config)


def test_tensors_outside_the_slots_arrive_mapped_without_a_descriptor(monkeypatch):
    """The worker and main-process halves in one process: a tensor outside any slot travels
    as torch sends it (a descriptor), and is mapped here without keeping one; a worker with no
    descriptor left sends its bytes."""
    _fresh_worker_state(monkeypatch)
    batch_slots.begin_task(batch_slots.new_config(2))  # the worker's reducers
    send = lambda t: pickle.loads(bytes(ForkingPickler.dumps(t)))  # noqa: E731
    sent = torch.zeros(4)
    got = send(sent)  # (the first send starts this process's descriptor server)
    got[0] = -1
    assert sent[0] == -1  # the same segment: handed over, not copied
    del sent  # the worker's half: its segment's descriptor, closed once it is sent
    values = [torch.arange(100 * i, 100 * i + 100, dtype=torch.int32) for i in range(40)]
    gc.collect()  # (what earlier tests left for the collector closes its files now)
    in_use = len(os.listdir("/proc/self/fd"))
    got = [send(v.clone()) for v in values]
    # torch's rebuild: one more per tensor (a few may come and go meanwhile: other threads)
    assert len(os.listdir("/proc/self/fd")) < in_use + 10
    assert all(torch.equal(a, b) for a, b in zip(got, values))

    def no_descriptor_left(fd):
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    monkeypatch.setattr(multiprocessing.reduction, "DupFd", no_descriptor_left)
    t = torch.arange(10.0)
    assert torch.equal(send(t), t)  # its bytes
