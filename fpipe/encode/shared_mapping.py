"""A shared mapping of a file that holds no file descriptor.

Python's ``mmap.mmap`` keeps a duplicate of the descriptor it maps for as long as the mapping
lives (until Python 3.13's ``trackfd=False``), and torch keeps one per storage it maps from a
descriptor. A process that keeps thousands of batches from worker processes, each in its own
shared segment, then runs out of descriptors (the usual limit is 1,024), though the kernel
needs none: a mapping holds its pages by itself. :class:`SharedMapping` calls ``mmap`` and
``munmap`` directly, so the caller closes the descriptor as soon as the file is mapped.
:func:`fpipe.core.raw_memory.array_at` makes an array (and with ``torch.from_numpy``, a tensor)
over it that keeps it mapped as long as the array or any view of it lives.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os

__all__ = ["SharedMapping"]


@functools.cache
def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.argtypes = [
        ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
        ctypes.c_int64,
    ]  # fmt: skip
    libc.mmap.restype = ctypes.c_void_p
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.munmap.restype = ctypes.c_int
    return libc


_MAP_FAILED = ctypes.c_void_p(-1).value


class SharedMapping:
    """The first ``size`` bytes of the file open as ``fd``, mapped shared and writable at
    ``address``; unmapped when this object is collected. ``fd`` may be closed at once."""

    __slots__ = ("_munmap", "address", "size")

    def __init__(self, fd: int, size: int):
        if size <= 0:
            raise ValueError(f"cannot map {size} bytes")
        libc = _libc()
        prot, flags = mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED
        address = libc.mmap(None, size, prot, flags, fd, 0)
        if address is None or address == _MAP_FAILED:
            code = ctypes.get_errno()
            raise OSError(code, f"mmap of {size} bytes: {os.strerror(code)}")
        self.address, self.size = int(address), size
        self._munmap = libc.munmap  # held: modules may be torn down before this is collected

    def __del__(self):
        munmap = getattr(self, "_munmap", None)  # None: mapping failed
        if munmap is not None:
            munmap(self.address, self.size)
