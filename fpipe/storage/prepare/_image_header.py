"""Image width and height from the first bytes of a file, without decoding pixels.

JPEG, PNG, GIF, BMP and WebP headers are parsed with :mod:`struct` (a few microseconds); other
formats, and headers these parsers do not understand, fall back to ``PIL.Image.open`` (which
also reads only the header; ``.load()`` is never called). Sizes are as stored, before any EXIF
orientation is applied.
"""

from __future__ import annotations

import io
import struct

__all__ = ["HEADER_PREFIX", "image_size", "parse_image_size"]

#: bytes read from the start of an image member for the header-only fast path.
HEADER_PREFIX = 4096

# JPEG start-of-frame markers that carry the frame size (not DHT C4, JPG C8, DAC CC).
_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
_unpack_hh = struct.Struct(">HH").unpack_from
_unpack_ii = struct.Struct(">II").unpack_from


def _jpeg(b: bytes) -> tuple[int, int] | None:
    i, n = 2, len(b)
    while i + 9 <= n:
        if b[i] != 0xFF:
            return None
        marker = b[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in _SOF:
            h, w = _unpack_hh(b, i + 5)
            return (w, h) if w and h else None
        if marker == 0x01 or 0xD0 <= marker <= 0xD9:  # markers without a length
            i += 2
            continue
        (seglen,) = struct.unpack_from(">H", b, i + 2)
        i += 2 + seglen
    return None


def parse_image_size(b: bytes) -> tuple[int, int] | None:
    """(width, height) from a header prefix with struct only, or None if not understood."""
    if b[:3] == b"\xff\xd8\xff":
        return _jpeg(b)
    if b[:8] == b"\x89PNG\r\n\x1a\n" and len(b) >= 24 and b[12:16] == b"IHDR":
        return _unpack_ii(b, 16)
    if b[:6] in (b"GIF87a", b"GIF89a") and len(b) >= 10:
        return struct.unpack_from("<HH", b, 6)
    if b[:2] == b"BM" and len(b) >= 26:
        w, h = struct.unpack_from("<ii", b, 18)
        return (w, abs(h)) if w > 0 and h else None
    if b[:4] == b"RIFF" and b[8:12] == b"WEBP" and len(b) >= 30:
        chunk = b[12:16]
        if chunk == b"VP8 " and b[23:26] == b"\x9d\x01\x2a":
            w, h = struct.unpack_from("<HH", b, 26)
            return w & 0x3FFF, h & 0x3FFF
        if chunk == b"VP8L" and b[20] == 0x2F:
            v = int.from_bytes(b[21:25], "little")
            return (v & 0x3FFF) + 1, ((v >> 14) & 0x3FFF) + 1
        if chunk == b"VP8X":
            return int.from_bytes(b[24:27], "little") + 1, int.from_bytes(b[27:30], "little") + 1
    return None


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) of an encoded image; raises ValueError if the header is not readable.

    ``data`` may be only a prefix of the file when the fast parsers succeed; the PIL fallback
    needs the whole file (or at least its header).
    """
    size = parse_image_size(data)
    if size is not None:
        return int(size[0]), int(size[1])
    from PIL import Image, UnidentifiedImageError

    from fpipe.core.errors import error_text

    try:
        with Image.open(io.BytesIO(data)) as im:  # reads the header only
            w, h = im.size
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, struct.error) as e:
        raise ValueError(f"undecodable image header ({error_text(e)})") from None
    if w <= 0 or h <= 0:
        raise ValueError(f"image header gives size {w}x{h}")
    return int(w), int(h)
