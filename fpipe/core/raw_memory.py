"""A numpy array over memory that something else owns, kept alive by the array.

Two places hand memory to numpy without a copy: Pillow's pixels exported through the Arrow C
data interface (``fpipe.decode._pixels``) and a batch in a worker's shared-memory slot
(``fpipe.encode.batch_slots``). Both know an address and a length, and an object whose life
decides the memory's: the exported array's capsule, the main process's claim on the slot.
numpy's array interface takes the address; the object that carries it is the array's base,
so the owner lives exactly as long as the array, every view of it, and any torch tensor made
from it with ``torch.from_numpy``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["array_at"]


class _Owned:
    """What numpy reads the array from: the address and shape, and the owner it holds."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, address: int, shape: tuple[int, ...], owner: object, writable: bool):
        self.__array_interface__ = {
            "data": (address, not writable),
            "shape": shape,
            "typestr": "|u1",
            "version": 3,
        }
        self.owner = owner


def array_at(
    address: int, shape: tuple[int, ...], owner: object, *, writable: bool = True
) -> np.ndarray:
    """The uint8 C-contiguous array of ``shape`` at ``address``, holding ``owner`` for as
    long as it (or any view of it) lives.

    Example:
      >>> import ctypes
      >>> buf = ctypes.create_string_buffer(b"abcd")
      >>> array_at(ctypes.addressof(buf), (2, 2), buf).tolist()
      [[97, 98], [99, 100]]
    """
    return np.asarray(_Owned(address, shape, owner, writable))
