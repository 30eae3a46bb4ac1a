"""Where collate allocates a batch: shared memory when a DataLoader worker sends it as it is.

A batch built in a worker reaches the main process through torch's ``ForkingPickler``, which
sends a tensor's storage as a shared-memory handle: a storage already in shared memory travels
as it is, any other is first copied into a fresh shared segment. So when the materializer's
batch hooks are fpipe's own (``batch`` collates, ``encode_batch`` keeps the tensors), collate in
a worker allocates its output in shared memory and stacks into it, as torch's
``default_collate`` does (:func:`sent_as_collated` marks that span). Anywhere else
(``num_workers=0``, thread workers, a user's ``batch`` or ``encode_batch`` that may replace the
tensors, collate called by user code) it allocates ordinary memory, as before: a segment that a
hook replaces would cost a whole segment more, not less.

The copy saved is the small part: the kernel's work for a fresh segment (allocating and mapping
~1,200 pages for a 4.8 MB batch) is paid either way. Mapping the pages in one
``madvise(MADV_POPULATE_WRITE)`` call (Linux 5.14+; elsewhere the writes fault them in) instead
of one fault per page is most of what this saves (``bench/batch_hop.py``).

In fpipe's own loader the segment is a slot the worker reuses (:mod:`fpipe.encode.batch_slots`:
the main process hands the batch over where it lies, and the slot is free again once the
consumer has dropped it), which removes the kernel's part as well; without slots (or when a
batch does not fit its slot), each batch gets its own segment, which lives as long as anyone
holds the batch.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import functools
import math
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from fpipe.core.resource_limits import out_of_descriptors

if TYPE_CHECKING:
    import torch

__all__ = [
    "collate_into_shared",
    "in_worker_process",
    "sent_as_collated",
    "shared_empty",
    "tensor_block",
]

#: Set by the materializer around a batch hook whose collated tensors are sent as they are.
_SENT_AS_COLLATED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "fpipe_sent_as_collated", default=False
)


#: ``MADV_POPULATE_WRITE`` (Linux 5.14+): allocate and map a range's pages now, writable.
_MADV_POPULATE_WRITE = 23
#: Where each tensor of a :func:`tensor_block` starts (a cache line).
_ALIGN = 64
#: Below this, the few page faults cost less than the call.
_POPULATE_MIN_BYTES = 1 << 16
_PAGE = 4096


@functools.cache
def _madvise() -> Callable[[int, int, int], int] | None:
    """libc's ``madvise`` on Linux, else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def _populate(address: int, nbytes: int) -> None:
    """Map the pages of ``[address, address + nbytes)`` in one call; where the kernel refuses
    (older than 5.14), writing faults them in one by one, as without this call."""
    madvise = _madvise()
    if madvise is not None:
        start = address - address % _PAGE
        madvise(start, address + nbytes - start, _MADV_POPULATE_WRITE)


@contextlib.contextmanager
def sent_as_collated(sent: bool = True) -> Iterator[None]:
    """Inside (with ``sent``): what collate builds is what the worker sends (no later hook
    replaces the tensors), so in a DataLoader worker it is built in shared memory."""
    token = _SENT_AS_COLLATED.set(sent)
    try:
        yield
    finally:
        _SENT_AS_COLLATED.reset(token)


def collate_into_shared() -> bool:
    """True where collate should build its tensors in shared memory: inside
    :func:`sent_as_collated`, in a torch DataLoader worker process or where the loader set
    slots up for this task (a Ray actor on the training process's node)."""
    if not _SENT_AS_COLLATED.get():
        return False
    from fpipe.encode import batch_slots

    return batch_slots.active() or in_worker_process()


def in_worker_process() -> bool:
    """True inside a torch DataLoader worker process."""
    import torch.utils.data

    return torch.utils.data.get_worker_info() is not None


def shared_empty(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialized contiguous CPU tensor in shared memory: in a slot the worker reuses
    batch after batch where the loader set slots up (:mod:`fpipe.encode.batch_slots`), else a
    fresh segment (``is_shared()``; in a Ray actor, ordinary memory); pickling it to another
    process sends only where it is."""
    import torch

    from fpipe.encode import batch_slots

    reused = batch_slots.take(shape, dtype)  # the worker's reused slot, where the loader set one
    if reused is not None:
        return reused
    if batch_slots.active() and not in_worker_process():  # a Ray actor: its store copies it
        return torch.empty(tuple(shape), dtype=dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    try:
        storage = torch.UntypedStorage._new_shared(nbytes)
    except RuntimeError as err:
        if not out_of_descriptors(err):
            raise
        return torch.empty(tuple(shape), dtype=dtype)  # no descriptor left: sent as its bytes
    if nbytes >= _POPULATE_MIN_BYTES:
        _populate(storage.data_ptr(), nbytes)
    return torch.empty(0, dtype=dtype).set_(storage, 0, tuple(shape))


def tensor_block(
    specs: Mapping[str, tuple[Sequence[int], torch.dtype]], shared: bool
) -> dict[str, torch.Tensor]:
    """Uninitialized contiguous CPU tensors of the given ``{name: (shape, dtype)}``, views of
    one block of memory: with ``shared``, one :func:`shared_empty` block, so a DataLoader
    worker's batch of several fields crosses to the main process as one shared-memory handle
    (torch's pickling sends a storage once however many tensors view it) instead of one
    segment, copy and descriptor per field."""
    import torch

    offsets, end = {}, 0
    for name, (shape, dtype) in specs.items():
        offsets[name] = end
        end += -(-math.prod(shape) * dtype.itemsize // _ALIGN) * _ALIGN
    if shared and end:
        block = shared_empty((end,), torch.uint8)
    else:
        block = torch.empty(end, dtype=torch.uint8)
    out = {}
    for name, (shape, dtype) in specs.items():
        start = offsets[name]
        nbytes = math.prod(shape) * dtype.itemsize
        out[name] = block[start : start + nbytes].view(dtype).view(tuple(shape))
    return out
