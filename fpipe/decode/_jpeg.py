"""Baseline JPEGs decoded by libjpeg-turbo through simplejpeg: the pixels Pillow decodes, with
the interpreter lock held for microseconds instead of about a tenth of a millisecond.

Pillow parses a JPEG's markers in Python (``JpegImagePlugin``: its quantization tables,
Huffman tables and frame header, byte by byte) before libjpeg-turbo decodes the pixels without
the lock. With two thread workers, one of them waits while the other parses. simplejpeg reads
the header and decodes in one C call that releases the lock, with the same libjpeg-turbo
settings as Pillow (accurate integer DCT, smooth chroma upsampling), so the pixels are the same
bytes (``tests/decode/test_jpeg_turbo.py`` compares every pixel). Colour pixels are decoded
as ``RGBX``, the layout Pillow keeps ``RGB`` in, and the image is made over them without a
copy (:func:`fpipe.decode._pixels.rgb_image`): copying them into a Pillow image of its own
(``Image.fromarray``) cost about 4% of a sample's CPU time at 224 px, 11% at 800-1600 px.

Only the plain case takes this path: YCbCr or grayscale, 8 bits, read without warnings, no
DCT-domain reduction (Pillow's ``draft`` scales by 1/2, 1/4, 1/8; libjpeg-turbo's own choice
of factor could differ), within Pillow's own pixel limit, and a header that Pillow's own
parser reads too (:func:`_plain_header`). Everything else (CMYK, 12 bits, a truncated or
corrupt stream, a reduction, a missing simplejpeg, a header Pillow refuses or reads in its
own way) returns None, and the caller opens the image with Pillow as before: same pixels,
same errors.

Pillow's parser is stricter than libjpeg-turbo in places, and the same bytes must not decode
on one path and fail on the other. It refuses a TEM marker (``FF 01``: libjpeg-turbo skips
it), and fails on payloads that libjpeg-turbo reads as optional: an APP0 ``JFIF`` or APP14
``Adobe`` segment too short for its version, an ICC profile chunk before the frame header too
short for its sequence number, a quantization table cut short. :func:`_plain_header` walks
the header's segments (a few per file, read by their lengths, no payload parsed beyond these
checks) and takes a header only when it is a plain sequence of the segments Pillow reads with
those checks passing; standalone markers (TEM, RSTn, a second SOI), fill bytes, junk between
segments and the payloads Pillow parses further (Photoshop's resource blocks, an MPO's MPF)
are left to Pillow, which then decodes or refuses them.
"""

from __future__ import annotations

from typing import Any

from PIL import Image

from fpipe.decode._pixels import MAPS_RGB, rgb_image

try:
    import simplejpeg
except ImportError:  # a platform without its wheel: Pillow decodes every JPEG
    simplejpeg = None

__all__ = ["decode", "header"]

#: The colorspaces this path takes, and the output simplejpeg is asked for (Pillow's mode).
_TAKEN = {"YCbCr": "RGB", "Gray": "GRAY"}
#: Frame headers (SOF0, 1, 2, 9, 10: the ones libjpeg-turbo decodes)
_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC9, 0xCA})
#: Segments with a length this path takes before the scan: the frame headers, DHT, DAC, DQT,
#: DRI, APP0-15, COM (Pillow's ``JpegImagePlugin.MARKER`` reads each as a segment)
_SEGMENTS = _SOF | {0xC4, 0xCC, 0xDB, 0xDD, *range(0xE0, 0xF0), 0xFE}
_SOS = 0xDA
#: APP payloads Pillow parses further than this path checks: left to Pillow
_DEEP_APPS = {0xED: b"Photoshop 3.0\x00", 0xE2: b"MPF\x00"}
#: APP payloads whose version Pillow reads (libjpeg-turbo skips them when too short)
_VERSIONED_APPS = {0xE0: b"JFIF", 0xEE: b"Adobe"}
_ICC = b"ICC_PROFILE\x00"


def _tables_whole(data: bytes, at: int, end: int) -> bool:
    """Whether each quantization table of the DQT payload ``data[at:end]`` is whole, as
    Pillow checks it."""
    while at < end:
        at += 1 + 64 * (1 if data[at] < 16 else 2)  # 8- or 16-bit entries
        if at > end:
            return False
    return True


def _plain_header(data: bytes) -> bool:
    """Whether the header of ``data`` (SOI up to the first SOS) is segments of
    :data:`_SEGMENTS` one after the other that Pillow's parser reads without an error: the
    checks of its segment handlers, for the payloads it reads (see the module's docstring)."""
    at, end = 2, len(data)
    icc: list[bytes] = []
    frame = False
    while at + 4 <= end:
        marker = data[at + 1]
        body, stop = at + 4, at + 2 + (data[at + 2] << 8 | data[at + 3])
        if data[at] != 0xFF or stop < body or stop > end:
            return False
        if marker == _SOS:
            return frame
        if marker not in _SEGMENTS:
            return False  # a standalone or unknown marker: Pillow reads it its own way
        if marker >= 0xE0 and marker != 0xFE:  # APPn
            if data.startswith(_DEEP_APPS.get(marker, b"-"), body, stop):
                return False
            if stop - body < 7 and data.startswith(_VERSIONED_APPS.get(marker, b"-"), body, stop):
                return False  # Pillow reads the version, libjpeg-turbo skips the segment
            if marker == 0xE2 and data.startswith(_ICC, body, stop):
                icc.append(data[body : min(stop, body + 14)])  # orders as the whole chunk
        elif marker in _SOF:
            # Pillow reads size, precision and components, and assembles the ICC profile
            # from the chunks before it (an IndexError on one without a sequence number)
            if frame or stop - body < 6 or data[body] != 8 or data[body + 5] not in (1, 3, 4):
                return False
            if (stop - body - 6) % 3 or (icc and len(min(icc)) <= 13):
                return False
            frame, icc = True, []
        elif marker == 0xDB and not _tables_whole(data, body, stop):
            return False
        at = stop
    return False


def header(data: bytes) -> tuple[int, int, str] | None:
    """``(width, height, colorspace)`` of a JPEG this path decodes, from its header alone;
    None for anything else (another format, CMYK, a header libjpeg-turbo warns about)."""
    if simplejpeg is None or data[:3] != b"\xff\xd8\xff":
        return None
    try:
        h, w, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return None
    if colorspace not in _TAKEN or not _plain_header(data):
        return None
    limit = Image.MAX_IMAGE_PIXELS
    if limit and w * h > 2 * limit:  # Pillow refuses it as a bomb: let it say so
        return None
    return w, h, colorspace


def decode(data: bytes, colorspace: str) -> Any:
    """The decoded image (Pillow mode ``RGB`` or ``L``), or None where libjpeg-turbo reports
    an error or a warning (Pillow then decodes it, or names what is wrong)."""
    # colour decoded as RGBX, Pillow's own layout of RGB: the image maps the pixels, no copy
    mapped = colorspace == "YCbCr" and MAPS_RGB
    try:
        pixels = simplejpeg.decode_jpeg(
            data, colorspace="RGBX" if mapped else _TAKEN[colorspace], strict=True
        )
    except ValueError:
        return None
    if mapped:
        return rgb_image(pixels)
    if colorspace == "Gray":
        pixels = pixels.reshape(pixels.shape[:2])
    return Image.fromarray(pixels)  # (H, W) uint8: L (mapped, no copy); (H, W, 3): RGB
