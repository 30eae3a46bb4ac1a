"""A decoded image's pixels as a numpy view of Pillow's own memory, without a copy.

``np.asarray(img)`` goes through ``Image.__array_interface__``, which runs ``img.tobytes()``:
Pillow's raw encoder packs the pixels into 64 KB pieces that are then joined, all while
holding the interpreter lock (about 27 us per 224 x 224 RGB image on a fast core). Thread
workers pay that twice over, since the other thread waits for the lock meanwhile. Pillow 11.2
and later export an image through the Arrow C data interface (``__arrow_c_array__``): a
capsule holding a struct that points at the pixel rows Pillow already has. The struct's layout
is a stable ABI that the Arrow project publishes to be read without a library; reading two
fields of it with ``ctypes`` costs a few microseconds, less than a library's general reader.

The view has the shape ``np.asarray`` gives (``RGB`` is stored as ``RGBX``: its view skips
every fourth byte); it keeps the exported array alive (and with it the image) for as long
as the view lives. Copying it transposed to channels first (``view.transpose(2, 0, 1).copy()``) is
then the only copy, and numpy makes it without the lock. Where Pillow cannot export (older
Pillow, rows spread over several memory blocks for images over 16 MB, other modes),
:func:`pixel_view` returns None and the caller takes ``np.asarray``.
"""

from __future__ import annotations

import ctypes

import numpy as np
from PIL import Image

from fpipe.core.raw_memory import array_at


class _ArrowArray(ctypes.Structure):
    pass


_ArrowArray._fields_ = [
    ("length", ctypes.c_int64),
    ("null_count", ctypes.c_int64),
    ("offset", ctypes.c_int64),
    ("n_buffers", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("buffers", ctypes.POINTER(ctypes.c_void_p)),
    ("children", ctypes.POINTER(ctypes.POINTER(_ArrowArray))),
    ("dictionary", ctypes.c_void_p),
    ("release", ctypes.c_void_p),
    ("private_data", ctypes.c_void_p),
]

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

#: The modes whose bands are the first bytes of each stored pixel (``RGB`` is stored as
#: ``RGBX``; ``LA`` is not here: it is stored as ``L``, two pad bytes, ``A``).
_BANDS = {"RGB": 3, "RGBA": 4, "L": 0}


def pixel_view(img: Image.Image) -> np.ndarray | None:
    """``img``'s pixels without a copy, as ``np.asarray(img)`` has them: uint8 ``(H, W, 3)``
    for ``RGB``, ``(H, W, 4)`` for ``RGBA``, ``(H, W)`` for ``L`` (not contiguous where
    Pillow pads a pixel to 4 bytes); None for other modes or where Pillow does not export
    them. Read-only: the memory is the image's.

    Example:
      >>> v = pixel_view(Image.new("RGB", (4, 2), (1, 2, 3)))
      >>> v.shape, v[0, 0].tolist()
      ((2, 4, 3), [1, 2, 3])
    """
    bands = _BANDS.get(img.mode)
    if bands is None:
        return None
    try:
        _, array = img.__arrow_c_array__()  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return None
    a = _ArrowArray.from_address(_capsule_pointer(array, b"arrow_array"))
    w, h = img.size
    if a.offset or a.null_count or a.length != w * h:
        return None
    # Pillow's layout per mode (its schema says the same): 4 bytes per pixel as one child
    # array (a fixed-size list of 4 uint8), or one byte per pixel in the array itself
    if bands:
        if a.n_children != 1:
            return None
        values, shape = a.children[0].contents, (h, w, 4)
    else:
        values, shape = a, (h, w)
    if values.offset or values.length != w * h * (4 if bands else 1):
        return None
    if values.n_buffers != 2 or not values.buffers[1]:
        return None
    # the array capsule is the owner: dropping it releases Pillow's export (and the image)
    view = array_at(values.buffers[1], shape, array, writable=False)
    return view[..., :bands] if bands else view
