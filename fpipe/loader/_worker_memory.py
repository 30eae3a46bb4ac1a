"""The C allocator of fpipe's worker processes: a batch's freed memory kept for the next one.

glibc's ``malloc`` serves a block above its *mmap threshold* (128 KiB when a process starts)
with pages mapped for it alone and unmapped when it is freed, and it gives the free top of its
heap back to the system once more than its *trim threshold* (twice the other) lies there. It
raises both thresholds itself when it frees a mapped block larger than the threshold, up to
32 MiB and 64 MiB. A training process reaches those values soon: its collated batches are such
blocks. A worker process may not, because its batches leave in shared memory
(:mod:`fpipe.encode.batch_slots`), unless it inherited raised thresholds from its parent, and
then each decoded image (a 224 px RGB image is 150 KiB, its full-size decode more) is served by
pages the kernel maps and zeroes again: about 50 minor page faults per 128-512 px image
(``bench/worker_malloc.py``; docs/benchmarks.md has the figures).

:func:`keep_freed_memory` sets both thresholds where glibc's own adjustment ends, once, in
each worker process (torch's worker processes, Ray's actors): a batch's blocks are then reused
by the next batch. A worker keeps up to 64 MiB of freed memory at the top of its heap, as a
glibc process that once freed a 32 MiB block does. Nothing changes in the training process
(``num_workers=0`` and thread workers run there), where the allocator is the user's; nor where
the C library is not glibc. ``FPIPE_WORKER_MALLOC=default`` leaves a worker's allocator as
it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "keep_freed_memory", "worker_started"]

#: glibc's ``mallopt`` parameters (``malloc.h``)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: Where glibc's dynamic thresholds end on a 64-bit system (``DEFAULT_MMAP_THRESHOLD_MAX``,
#: and the trim threshold it sets beside it, twice as much).
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 64 << 20

_done = False


def keep_freed_memory() -> bool:
    """Set this process's glibc ``malloc`` thresholds to :data:`MMAP_THRESHOLD` and
    :data:`TRIM_THRESHOLD` (see the module's docstring); True if they were set (now or
    before), False where the C library has no ``mallopt`` or ``FPIPE_WORKER_MALLOC=default``."""
    global _done
    if _done:
        return True
    if os.environ.get("FPIPE_WORKER_MALLOC", "") == "default":
        return False
    mallopt = _mallopt()
    if mallopt is None:
        return False
    # The mmap threshold first: setting either turns glibc's own adjustment off.
    _done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
    return _done


def worker_started(worker_id: int) -> None:
    """torch's ``worker_init_fn`` of fpipe's worker processes."""
    keep_freed_memory()


def _mallopt():
    """glibc's ``mallopt(int, int) -> int``, or None (another C library, none found)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        fn = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 - glibc's: musl has a mallopt that does nothing
    except (OSError, AttributeError, TypeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return fn
