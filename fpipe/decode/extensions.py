"""What a member extension means: the one place for extension lists and ``.gz`` handling.

A member's extension is everything after the sample key (``jpg``, ``seg.png``, ``txt.gz``).
Its *kind* is decided by the last dot part after a trailing ``.gz`` is removed, in lower
case. Prepare (which columns to compute), the decoder registry (which decoder to call), tables
(which columns name media files) and the cooker all ask this module, so they cannot disagree.
Pure string functions: no PIL, no PyAV, no I/O.
"""

from __future__ import annotations

import functools

__all__ = [
    "AV_EXTENSIONS",
    "GZ",
    "IMAGE_EXTENSIONS",
    "MEDIA_EXTENSIONS",
    "ext_kind",
    "is_gz",
    "last_part",
    "strip_gz",
]

#: Member extensions decoded as images (Pillow).
IMAGE_EXTENSIONS = (
    "bmp", "gif", "jpeg", "jpg", "pbm", "pgm", "png", "pnm", "ppm", "tif", "tiff", "webp",
)  # fmt: skip
#: Member extensions decoded as audio/video (a lazy PyAV handle).
AV_EXTENSIONS = ("avi", "flac", "m4a", "mkv", "mov", "mp3", "mp4", "ogg", "wav", "webm")
#: Member extensions whose text length is measured at prepare.
_TEXT_EXTENSIONS = ("caption", "text", "txt")
#: File extensions that mark a table column as naming media files.
MEDIA_EXTENSIONS = (
    *IMAGE_EXTENSIONS, *AV_EXTENSIONS, "json", "npy", "npz", "pth", "txt",
)  # fmt: skip
#: Suffix of a gzip-compressed member (``txt.gz``), decompressed under its base extension.
GZ = ".gz"

_IMAGE = frozenset(IMAGE_EXTENSIONS)
_AV = frozenset(AV_EXTENSIONS)
_TEXT = frozenset(_TEXT_EXTENSIONS)


def is_gz(ext: str) -> bool:
    """True for a gzip-compressed member extension (``txt.gz``).

    >>> is_gz("txt.gz"), is_gz("txt")
    (True, False)
    """
    return ext.endswith(GZ)


def strip_gz(ext: str) -> str:
    """The extension a member is read under: a trailing ``.gz`` removed.

    >>> strip_gz("json.gz"), strip_gz("jpg")
    ('json', 'jpg')
    """
    return ext[: -len(GZ)] if ext.endswith(GZ) else ext


def last_part(ext: str) -> str:
    """Last dot part of the extension without ``.gz``, lower case: what decides its kind.

    >>> last_part("seg.PNG.gz")
    'png'
    """
    return strip_gz(ext).rsplit(".", 1)[-1].lower()


@functools.lru_cache(maxsize=4096)  # called per member while indexing
def ext_kind(ext: str) -> str:
    """``"image"``, ``"av"``, ``"text"`` or ``""`` (anything else) for a member extension.

    >>> [ext_kind(e) for e in ("jpg", "seg.png", "mp4", "txt.gz", "json")]
    ['image', 'image', 'av', 'text', '']
    """
    last = last_part(ext)
    if last in _IMAGE:
        return "image"
    if last in _AV:
        return "av"
    return "text" if last in _TEXT else ""
