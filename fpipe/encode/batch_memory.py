"""Where collate allocates a batch: shared memory inside a DataLoader worker process.

A batch built in a worker reaches the main process through torch's ``ForkingPickler``, which
sends a tensor's storage as a shared-memory handle: a storage already in shared memory travels
as it is, any other is first copied into a fresh shared segment (the whole batch once more, and
its page faults, in the worker). So in a worker, collate allocates its output in shared memory
and stacks into it, as torch's ``default_collate`` does. Elsewhere (``num_workers=0``, thread
workers, user code) it allocates ordinary memory, as before.

Each batch gets its own segment: it lives as long as the consumer holds the batch, so nothing is
reused across batches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.utils.data

__all__ = ["in_worker_process", "shared_empty"]


def in_worker_process() -> bool:
    """True inside a torch DataLoader worker process."""
    return torch.utils.data.get_worker_info() is not None


def shared_empty(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialized contiguous CPU tensor in shared memory (``is_shared()``): pickling it to
    another process sends only its handle."""
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    storage = torch.UntypedStorage._new_shared(nbytes)
    return torch.empty(0, dtype=dtype).set_(storage, 0, tuple(shape))
