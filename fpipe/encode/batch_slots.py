"""Reused shared-memory slots that carry collated batches from worker processes.

Sending a batch the way torch does costs a fresh shared-memory segment per batch: the worker
allocates and maps its pages (~1,200 for a 4.8 MB image batch), torch passes its file
descriptor over a socket, the main process maps it and later unmaps it. That is 4-5 ms of CPU
per batch, as much as decoding three or four small images. Here each worker process keeps a
few slots in one shared file instead (an arena, in ``/dev/shm``), reused batch after batch:

* collate in a worker (:func:`fpipe.encode.batch_memory.shared_empty`) takes its tensors from
  the worker's free slot (:func:`take`), whose pages are mapped after the first use;
* pickling such a tensor (the worker's result queue) sends only where it lies: the arena's
  name, the slot, the offset, dtype, shape and strides;
* the main process maps the arena once (and removes its file name, so nothing is left behind)
  and hands the tensors over where they lie, without a copy: each holds the slot, which is
  marked free in the arena's first page once the consumer has dropped every tensor of the
  batch (and every view of one);
* any other tensor a worker sends travels as torch sends it, a shared segment's file
  descriptor, but the main process maps the segment and closes the descriptor at once
  (:func:`_mapped_storage`): torch would keep one open per storage for as long as it lives, and
  a consumer that keeps a thousand batches would run out of descriptors. A worker with no
  descriptor left to send one by sends the tensor's bytes instead. Every mapping here is a
  :class:`fpipe.encode.shared_mapping.SharedMapping`, which holds no descriptor either.

A batch the consumer holds is never written by a worker: its slot stays taken. Each worker has
``prefetch_factor + 2`` slots, room for its batches in flight and one or two the consumer still
holds (a ``for`` loop's variable holds the previous batch while the next is fetched); a
consumer that keeps more (a list of batches, a view of one kept for logging) leaves its workers
fewer free slots, and a worker with none sends the batch the fresh-segment way, as torch does:
slower, never wrong. A batch larger than its slot (after which the next arena is 25% larger)
takes that way too. A worker's first batch, which sizes the arena, is collated into a shared
file of its own for each tensor (:func:`_once_tensor`), sent the way a slot's tensors are, whose
file the main process removes once mapped: the fresh-segment way would make the main process
fetch each descriptor from a server thread in the worker, a handshake of several messages,
each waiting for the worker's interpreter lock while the worker builds its next batch (tens of
milliseconds added to the first batch). An arena's
pages are reserved when it is made: where ``/dev/shm`` has no room for them, the worker sends
every batch the fresh-segment way. The loader turns slots on for its
worker processes (:class:`SlotConfig`) and off at the end of each pass (:func:`detach`);
elsewhere nothing changes.

Ray actors on the training process's node use the same slots (:mod:`fpipe.loader._ray_actor`):
the actor collates into its slot, Ray's serializer sends the slot's tensors as where they lie
(:func:`slot_reduction`), and only that header travels through Ray. A batch that finds no free
slot is built in ordinary memory there and goes through Ray's object store. A slot is marked
taken (1) by its process and claimed (2) where its batch is unpickled: an actor outlives the
loader's passes, and a result the loader never read (a pass left early) leaves its slot taken,
which :func:`reclaim_unclaimed` frees when the actor's next pass begins.
"""

from __future__ import annotations

import contextlib
import glob
import math
import os
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from fpipe.core.fork_locks import fork_safe_lock
from fpipe.core.raw_memory import array_at
from fpipe.core.resource_limits import out_of_descriptors
from fpipe.encode.shared_mapping import SharedMapping

if TYPE_CHECKING:
    import torch

__all__ = [
    "SlotConfig",
    "active",
    "begin_task",
    "detach",
    "new_config",
    "reclaim_unclaimed",
    "release_unsent",
    "slot_reduction",
    "take",
]

_DIR = "/dev/shm"
_PAGE = 4096  # the arena's first page holds one flag byte per slot (1: in use)
_ALIGN = 64
_GROWTH = 1.25
_TAKEN, _CLAIMED = 1, 2  # a slot's flag: written by its worker, read where it is unpickled


class SlotConfig(msgspec.Struct, frozen=True):
    """What a loader's worker processes use: arena names start with ``fpipe-slots-{token}``;
    ``count`` slots per worker (the batches a worker may have in flight, plus one)."""

    token: str
    count: int


def new_config(slots_per_worker: int) -> SlotConfig | None:
    """A config for one pool of worker processes (None where there is no ``/dev/shm``)."""
    if not os.path.isdir(_DIR) or not os.access(_DIR, os.W_OK):
        return None
    return SlotConfig(f"{os.getpid()}-{secrets.token_hex(4)}", max(2, slots_per_worker))


class _Arena:
    """``count`` slots of ``slot_bytes`` after a page of flags, in one shared file."""

    def __init__(self, name: str, count: int, slot_bytes: int, create: bool):
        import torch

        self.name, self.count, self.slot_bytes = name, count, slot_bytes
        size = _PAGE + count * slot_bytes
        path = os.path.join(_DIR, name)
        fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0), 0o600)
        try:
            if create:
                os.ftruncate(fd, size)
                # Reserve the pages now: a /dev/shm too small for them (a container's 64 MB
                # default) refuses here, instead of a SIGBUS when a batch is written.
                if hasattr(os, "posix_fallocate"):
                    os.posix_fallocate(fd, 0, size)
            mapping = SharedMapping(fd, size)
        except OSError:
            if create:
                os.unlink(path)
            raise
        finally:
            os.close(fd)  # the mapping holds the pages, no descriptor
        #: the arena's bytes (the flags page first), holding the mapping
        self.mm = array_at(mapping.address, (size,), mapping)
        self.bytes = torch.from_numpy(self.mm)
        self.base = mapping.address


# -- in a worker process --------------------------------------------------------------------

_config: SlotConfig | None = None
_arena: _Arena | None = None
_arenas: dict[int, _Arena] = {}  # by base address: every arena this worker made
_tickets: dict[tuple[int, int], _Ticket] = {}  # (arena base, slot) -> the batch's ticket
_made = 0
_refused: SlotConfig | None = None  # a config whose arena could not be made
_largest = 0  # the most bytes one batch asked for so far
_slot: int | None = None  # the slot of the batch being collated, and the bytes used in it
_used = 0
_asked = 0
_taken: list[tuple[_Arena, int]] = []  # slots this task took (freed if it sends nothing)
_once: set[int] = set()  # bases of the first batch's files of their own (_once_tensor) not sent
_ONCE = "-once"  # the name's end of such a file: the main process does not keep it mapped


class _Ticket:
    """A slot's batch in flight; pickled once per result (pickle's memo), it becomes the main
    process's :class:`_Claim` on that slot."""

    def __init__(self, arena: _Arena, slot: int):
        self.args = (arena.name, arena.count, arena.slot_bytes, slot)

    def __reduce__(self):
        return _claim, self.args


def begin_task(config: SlotConfig | None) -> None:
    """In a worker process (or a Ray actor), before materializing one task: use ``config``'s
    slots (None: none). The first batch measures; an arena is made (or replaced by a larger
    one) here, between batches."""
    global _config, _arena, _refused, _slot, _used, _asked
    if config is not None and config == _refused:
        config = None  # no room for its slots in /dev/shm: fresh segments, as torch sends
    if config != _config:
        _config, _arena = config, None
        if config is not None:
            _register_reducer()
    if _config is not None and _largest and (_arena is None or _arena.slot_bytes < _largest):
        try:
            _arena = _new_arena(_config, _largest)
        except OSError:
            _refused, _config, _arena = _config, None, None
    _taken.clear()
    _slot, _used, _asked = None, 0, 0


def release_unsent() -> None:
    """In a worker whose task sends no batch (it failed): free the slots it took, and remove
    the files of its own a first batch took (:func:`_once_tensor`)."""
    for arena, slot in _taken:
        arena.mm[slot] = 0
        if arena.base in _once:
            _forget_once(arena.base)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(_DIR, arena.name))
    _taken.clear()


def active() -> bool:
    """Whether this process's current task collates into slots (:func:`begin_task`)."""
    return _config is not None


def reclaim_unclaimed() -> None:
    """In a Ray actor, as a pass of the loader begins: free the slots of results sent but never
    unpickled (a pass left early drops the results in flight unread). Every task before this
    one has run (an actor runs its tasks in order), and the loader reads no result of an
    earlier pass, so no claim can come for them; slots the loader holds are claimed."""
    arena = _arena
    if arena is not None:
        for slot in range(arena.count):
            if arena.mm[slot] == _TAKEN:
                arena.mm[slot] = 0


def take(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor | None:
    """An uninitialized contiguous tensor in this worker's slot for the batch being collated,
    or None (no slots configured, no free slot, or the batch outgrew its slot)."""
    global _slot, _used, _asked, _largest
    if _config is None:
        return None

    size = math.prod(shape) * dtype.itemsize
    nbytes = -(-size // _ALIGN) * _ALIGN
    _asked += nbytes
    _largest = max(_largest, _asked)
    arena = _arena
    if arena is None:  # the worker's first batch (it sizes the arena): a file of its own
        return _once_tensor(_config, size, shape, dtype)
    if _slot is None:
        free = [s for s in range(arena.count) if arena.mm[s] == 0]
        if not free:
            return None
        _slot, _used = free[0], 0
        arena.mm[_slot] = _TAKEN
        _taken.append((arena, _slot))
        _tickets[(arena.base, _slot)] = _Ticket(arena, _slot)
    if _used + nbytes > arena.slot_bytes:
        return None
    start = _PAGE + _slot * arena.slot_bytes + _used
    _used += nbytes
    return arena.bytes[start : start + size].view(dtype).view(tuple(shape))


def _new_arena(config: SlotConfig, largest: int) -> _Arena:
    slot_bytes = -(-int(largest * _GROWTH) // _PAGE) * _PAGE
    arena = _Arena(_arena_name(config), config.count, slot_bytes, create=True)
    _arenas[arena.base] = arena
    return arena


def _arena_name(config: SlotConfig, end: str = "") -> str:
    global _made
    import torch.utils.data

    info = torch.utils.data.get_worker_info()
    _made += 1
    return f"fpipe-slots-{config.token}-{info.id if info is not None else 0}-{_made}{end}"


def _once_tensor(config: SlotConfig, size: int, shape: Sequence[int], dtype) -> torch.Tensor | None:
    """A tensor of a worker process's first batch in a shared file of its own (one slot of
    exactly its size), pickled as a slot's tensor is: the main process maps the file and
    removes it (keeping it mapped only while the batch lives), and this process lets go of it
    once it is sent (:func:`slot_reduction`). None in a Ray actor (whose results Ray sends)
    and where ``/dev/shm`` has no room: the fresh-segment way."""
    import torch.utils.data

    if torch.utils.data.get_worker_info() is None:
        return None
    try:
        arena = _Arena(_arena_name(config, _ONCE), 1, max(_PAGE, -(-size // _PAGE) * _PAGE), True)
    except OSError:
        return None
    _arenas[arena.base] = arena
    _tickets[(arena.base, 0)] = _Ticket(arena, 0)
    _once.add(arena.base)
    arena.mm[0] = _TAKEN
    _taken.append((arena, 0))
    return arena.bytes[_PAGE : _PAGE + size].view(dtype).view(tuple(shape))


def _forget_once(base: int) -> None:
    """Let go of a first batch's file of its own (its tensors hold the mapping while they
    live)."""
    _once.discard(base)
    _arenas.pop(base, None)
    _tickets.pop((base, 0), None)


def slot_reduction(t) -> tuple | None:
    """``(rebuild, args)`` of a tensor in one of this process's slots: where it lies (the
    arena, the slot, the offset, dtype, shape and strides); None for any other tensor."""
    if not _arenas or t.device.type != "cpu":
        return None
    arena = _arenas.get(t.untyped_storage().data_ptr())
    if arena is None:
        return None
    offset = t.data_ptr() - arena.base
    ticket = _tickets[(arena.base, (offset - _PAGE) // arena.slot_bytes)]
    if arena.base in _once:  # sent: the batch's tensor holds the mapping until it is dropped
        _forget_once(arena.base)  # (another view of it, sent after, goes as torch sends it)
    return _slot_tensor, (ticket, offset, t.dtype, tuple(t.shape), tuple(t.stride()))


def _reduce_tensor(t):
    """The worker's pickling of a tensor: a slot's tensor as where it lies; any other as torch
    sends it."""
    reduced = slot_reduction(t)
    if reduced is None:
        from torch.multiprocessing.reductions import reduce_tensor

        return reduce_tensor(t)
    return reduced


def _reduce_storage(storage):
    """The worker's pickling of a storage (a tensor's outside any slot): its shared segment's
    descriptor, as torch sends it, rebuilt by :func:`_mapped_storage`; where this worker has
    no descriptor left to send it by, its bytes (slower, never wrong: a worker that cannot
    send its result leaves the main process waiting for it)."""
    from multiprocessing.reduction import DupFd

    import torch
    from torch.multiprocessing import get_sharing_strategy
    from torch.multiprocessing.reductions import reduce_storage

    if storage.device.type != "cpu" or not storage.nbytes():
        return reduce_storage(storage)
    if get_sharing_strategy() != "file_descriptor":  # by file name: no descriptor is kept
        return reduce_storage(storage)
    try:
        fd, size = storage._share_fd_cpu_()  # moved into a shared segment first if it is not
        return _mapped_storage, (DupFd(fd), size)
    except (OSError, RuntimeError) as err:
        if not out_of_descriptors(err):
            raise
    flat = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),))
    return _storage_of_bytes, (bytearray(flat.numpy()),)


def _register_reducer() -> None:
    from multiprocessing.reduction import ForkingPickler

    import torch
    import torch.multiprocessing  # noqa: F401 - torch's reductions first, these over them

    ForkingPickler.register(torch.Tensor, _reduce_tensor)
    ForkingPickler.register(torch.UntypedStorage, _reduce_storage)


# -- in the main process --------------------------------------------------------------------

_attached: dict[str, _Arena] = {}
_lock = fork_safe_lock(globals(), "_lock")


class _Claim:
    """The main process's hold on a slot: taken when a result from it is unpickled, held by
    every tensor made from the slot; once the last of them is gone, the slot is free for its
    worker again."""

    def __init__(self, arena: _Arena, slot: int):
        self.arena, self.slot = arena, slot

    def __del__(self):
        self.arena.mm[self.slot] = 0  # the arena stays mapped while a claim holds it


def _claim(name: str, count: int, slot_bytes: int, slot: int) -> _Claim:
    with _lock:
        arena = _attached.get(name)
        if arena is None:
            arena = _Arena(name, count, slot_bytes, create=False)
            if not name.endswith(_ONCE):  # (a first batch's own file: mapped while it lives)
                _attached[name] = arena
            os.unlink(os.path.join(_DIR, name))  # mapped now: no file needs to stay
    arena.mm[slot] = _CLAIMED
    return _Claim(arena, slot)


def _slot_tensor(claim: _Claim, offset: int, dtype, shape: tuple, stride: tuple):
    """A slot's tensor where it lies, holding the slot until the tensor (and any view of it)
    is gone: the batch is handed over without a copy."""
    import torch

    itemsize = dtype.itemsize
    span = (1 + sum((n - 1) * st for n, st in zip(shape, stride))) * itemsize if all(shape) else 0
    # the claim is the owner: the slot stays taken while the tensor or a view of it lives
    flat = torch.from_numpy(array_at(claim.arena.base + offset, (span,), claim)).view(dtype)
    return torch.as_strided(flat, shape, stride)


def _mapped_storage(df, size: int):
    """A fresh segment from a worker, mapped here: the mapping holds its pages, so its
    descriptor is closed at once. (torch keeps one open per storage as long as the storage
    lives: a consumer that kept a thousand batches ran out of descriptors.) The storage is this
    process's own memory as far as torch knows: sent on to another process, it is copied."""
    import torch

    fd = df.detach()
    try:
        mapping = SharedMapping(fd, size)
    finally:
        os.close(fd)
    return torch.from_numpy(array_at(mapping.address, (size,), mapping)).untyped_storage()


def _storage_of_bytes(data: bytearray):
    """A storage a worker sent as its bytes (:func:`_reduce_storage`), over them."""
    import torch

    return torch.frombuffer(data, dtype=torch.uint8).untyped_storage()


def detach(config: SlotConfig) -> None:
    """In the main process, after a pool of workers ends: unmap its arenas (once no result
    holds them) and remove any arena file it never read."""
    prefix = f"fpipe-slots-{config.token}-"
    with _lock:
        for name in [n for n in _attached if n.startswith(prefix)]:
            del _attached[name]
    for path in glob.glob(os.path.join(_DIR, prefix + "*")):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
