"""Where collate allocates a batch: shared memory inside a DataLoader worker process.

A batch built in a worker reaches the main process through torch's ``ForkingPickler``, which
sends a tensor's storage as a shared-memory handle: a storage already in shared memory travels
as it is, any other is first copied into a fresh shared segment (the whole batch once more, and
its page faults, in the worker). So in a worker, collate allocates its output in shared memory
and stacks into it, as torch's ``default_collate`` does. Elsewhere (``num_workers=0``, thread
workers, user code) it allocates ordinary memory, as before.

A fresh segment costs the kernel more than the copy it saves: allocating and mapping its pages
(~1,200 page faults for a 4.8 MB batch) dominates. So the segment's pages are mapped in one
``madvise(MADV_POPULATE_WRITE)`` call (Linux 5.14+; elsewhere the writes fault them in) before
collate writes into it.

Each batch gets its own segment: it lives as long as anyone holds the batch (the consumer may
also pass it on to another process), so nothing is reused across batches.
"""

from __future__ import annotations

import ctypes
import functools
import math
import sys
from collections.abc import Callable, Sequence

import torch
import torch.utils.data

__all__ = ["in_worker_process", "shared_empty"]


#: ``MADV_POPULATE_WRITE`` (Linux 5.14+): allocate and map a range's pages now, writable.
_MADV_POPULATE_WRITE = 23
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


def in_worker_process() -> bool:
    """True inside a torch DataLoader worker process."""
    return torch.utils.data.get_worker_info() is not None


def shared_empty(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialized contiguous CPU tensor in shared memory (``is_shared()``): pickling it to
    another process sends only its handle."""
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    storage = torch.UntypedStorage._new_shared(nbytes)
    if nbytes >= _POPULATE_MIN_BYTES:
        _populate(storage.data_ptr(), nbytes)
    return torch.empty(0, dtype=dtype).set_(storage, 0, tuple(shape))
