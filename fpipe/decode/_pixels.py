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

The other way, :func:`rgb_image` makes an ``RGB`` image over pixels decoded as ``RGBX`` (4
bytes a pixel, Pillow's own layout of ``RGB``) without copying them. ``Image.fromarray`` of
``(H, W, 3)`` pixels allocates a Pillow image, fills it and unpacks every pixel into it (about
100 us for a 300 x 350 image, part of it holding the interpreter lock); Pillow's public
``Image.frombuffer`` maps 4-byte pixels only as mode ``RGBX``, whose resize computes the
fourth band too (a quarter slower). :func:`rgb_image` maps them as ``RGB`` with the call
``frombuffer`` itself makes (``Image.core.map_buffer``); where that call is missing or maps
otherwise than a check at import expects, it returns None and the caller copies.
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

#: what ``rgb_image`` derives its images from (``Image._new`` copies its empty info and
#: palette): an image never changed, so threads share it
_BLANK = Image.new("RGB", (0, 0))


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


def rgb_image(rgbx: np.ndarray) -> Image.Image | None:
    """A read-only ``RGB`` image whose pixels are ``rgbx`` (C-contiguous uint8 ``(H, W, 4)``,
    the fourth byte of each pixel unused, as Pillow stores ``RGB``), without a copy: it holds
    ``rgbx`` for as long as it lives. None where this Pillow cannot map it so, or ``rgbx`` is
    not such an array.

    Example:
      >>> px = np.array([[[1, 2, 3, 255], [4, 5, 6, 255]]], np.uint8)
      >>> np.asarray(rgb_image(px)).tolist()
      [[[1, 2, 3], [4, 5, 6]]]
    """
    if not MAPS_RGB or rgbx.ndim != 3 or rgbx.shape[2] != 4 or rgbx.dtype != np.uint8:
        return None
    if not rgbx.flags.c_contiguous:
        return None
    h, w = rgbx.shape[:2]
    img = _BLANK._new(Image.core.map_buffer(rgbx, (w, h), "raw", 0, ("RGB", 0, 1)))
    img.readonly = 1  # as Image.frombuffer marks its images: an edit copies them first
    return img


def _maps_rgb() -> bool:
    """Whether ``Image.core.map_buffer`` maps 4-byte pixels as an ``RGB`` image of their
    first three bytes (checked once, on two pixels)."""
    px = np.array([[[1, 2, 3, 255], [4, 5, 6, 255]]], np.uint8)
    try:
        img = _BLANK._new(Image.core.map_buffer(px, (2, 1), "raw", 0, ("RGB", 0, 1)))
        return img.mode == "RGB" and img.size == (2, 1) and img.tobytes() == bytes(range(1, 7))
    except Exception:  # noqa: BLE001 - a Pillow without it, or another signature: copy instead
        return False


#: whether :func:`rgb_image` maps (else it always returns None)
MAPS_RGB = _maps_rgb()
