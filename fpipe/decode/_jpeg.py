"""Baseline JPEGs decoded by libjpeg-turbo through simplejpeg: the pixels Pillow decodes, with
the interpreter lock held for microseconds instead of about a tenth of a millisecond.

Pillow parses a JPEG's markers in Python (``JpegImagePlugin``: its quantization tables,
Huffman tables and frame header, byte by byte) before libjpeg-turbo decodes the pixels without
the lock. With two thread workers, one of them waits while the other parses. simplejpeg reads
the header and decodes in one C call that releases the lock, with the same libjpeg-turbo
settings as Pillow (accurate integer DCT, smooth chroma upsampling), so the pixels are the same
bytes (``tests/decode/test_jpeg_turbo.py`` compares every pixel).

Only the plain case takes this path: YCbCr or grayscale, 8 bits, read without warnings, no
DCT-domain reduction (Pillow's ``draft`` scales by 1/2, 1/4, 1/8; libjpeg-turbo's own choice
of factor could differ), within Pillow's own pixel limit. Everything else (CMYK, 12 bits, a
truncated or corrupt stream, a reduction, a missing simplejpeg) returns None, and the caller
opens the image with Pillow as before: same pixels, same errors.
"""

from __future__ import annotations

from typing import Any

from PIL import Image

try:
    import simplejpeg
except ImportError:  # a platform without its wheel: Pillow decodes every JPEG
    simplejpeg = None

__all__ = ["decode", "header"]

#: The colorspaces this path takes, and the output simplejpeg is asked for (Pillow's mode).
_TAKEN = {"YCbCr": "RGB", "Gray": "GRAY"}


def header(data: bytes) -> tuple[int, int, str] | None:
    """``(width, height, colorspace)`` of a JPEG this path decodes, from its header alone;
    None for anything else (another format, CMYK, a header libjpeg-turbo warns about)."""
    if simplejpeg is None or data[:3] != b"\xff\xd8\xff":
        return None
    try:
        h, w, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return None
    if colorspace not in _TAKEN:
        return None
    limit = Image.MAX_IMAGE_PIXELS
    if limit and w * h > 2 * limit:  # Pillow refuses it as a bomb: let it say so
        return None
    return w, h, colorspace


def decode(data: bytes, colorspace: str) -> Any:
    """The decoded image (Pillow mode ``RGB`` or ``L``), or None where libjpeg-turbo reports
    an error or a warning (Pillow then decodes it, or names what is wrong)."""
    try:
        pixels = simplejpeg.decode_jpeg(data, colorspace=_TAKEN[colorspace], strict=True)
    except ValueError:
        return None
    if colorspace == "Gray":
        pixels = pixels.reshape(pixels.shape[:2])
    return Image.fromarray(pixels)  # (H, W) uint8: L; (H, W, 3): RGB
