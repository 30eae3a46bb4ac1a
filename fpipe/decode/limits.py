"""Decoding limits: one record, :class:`DecodeLimits`, holding every limit of decoded sizes.

A few bytes of input can ask for gigabytes of output: a 1 MB ``txt.gz`` inflating to 1 GiB, a
1 MB ``.npz`` holding a 1 GiB array, a ``.npy`` header declaring 2**40 elements, a 12 KB PNG of
10000x9999 pixels, a 0.5 MB FLAC of an hour of silence. Every decoder checks its limits from
this one record **before** the memory is allocated. The loader passes it once
(``get_train_dataset(decode_limits=...)``, or the task encoder's ``decode_limits``, or its
Energon ``decoder = SampleDecoder(decode_limits=...)``) to every decoder it runs: ``.gz``
members when a shard is read, ``.npy`` / ``.npz``, images, audio and video (in the main
process and in DataLoader workers alike). docs/failures.md lists the limits.

A payload over a limit is a :class:`~fpipe.core.BadSampleError` (through ``decode_field``), so
it follows the loader's error policy.
"""

from __future__ import annotations

import io
import math
import zlib
from collections.abc import Iterator

import msgspec
import numpy as np

__all__ = [
    "DECODE_RATIO_FLOOR",
    "DEFAULT_LIMITS",
    "DEFAULT_MAX_ARRAY_BYTES",
    "DEFAULT_MAX_INFLATED_BYTES",
    "DecodeLimits",
    "gunzip",
    "gunzip_chunks",
    "limit_hint",
]

#: Default of :attr:`DecodeLimits.max_inflated_bytes` (256 MiB).
DEFAULT_MAX_INFLATED_BYTES = 256 << 20
#: Default of :attr:`DecodeLimits.max_array_bytes` (256 MiB).
DEFAULT_MAX_ARRAY_BYTES = 256 << 20
#: Pixels that may always be decoded for a target size, whatever the ratio (4096 x 4096).
DECODE_RATIO_FLOOR = 4096 * 4096


class DecodeLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Every limit of decoded sizes, with defaults (``None`` turns a limit off).

    Examples:
      >>> DecodeLimits().max_inflated_bytes == 256 * 2**20
      True
      >>> DecodeLimits(max_array_bytes=2**30, max_audio_samples=None).max_array_bytes
      1073741824
    """

    #: Most bytes a gzip-compressed member (``txt.gz``, ``json.gz``) may inflate to.
    max_inflated_bytes: int | None = DEFAULT_MAX_INFLATED_BYTES
    #: Most bytes of array data in one ``.npy`` member, or in all arrays of one ``.npz``.
    max_array_bytes: int | None = DEFAULT_MAX_ARRAY_BYTES
    #: Most pixels (width * height) of an image, read from its header before decoding.
    max_image_pixels: int | None = 100_000_000
    #: With a target size: most pixels decoded per output pixel (after the JPEG draft
    #: reduction), beyond a floor of ``DECODE_RATIO_FLOOR`` pixels; e.g. a 10000x9999 PNG
    #: decoded for an 8x8 output is refused, an 8K photo for a 224 px output is not.
    max_decode_ratio: float | None = 1024.0
    #: Most audio samples per channel (at the output rate) decoded per call: 2**26 is about
    #: 23 minutes at 48 kHz, 256 MiB of float32 per channel.
    max_audio_samples: int | None = 1 << 26
    #: Longest audio/video stream span, seconds (4 h).
    max_av_duration_s: float | None = 4 * 3600.0
    #: Most video frames in a file (and decoded per call).
    max_video_frames: int | None = 500_000
    #: Most pixels per video frame (width * height; 8K).
    max_video_pixels: int | None = 7680 * 4320

    def __post_init__(self) -> None:
        from fpipe.core.errors import ConfigError

        for name in self.__struct_fields__:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ConfigError(
                    f"DecodeLimits.{name} must be a number >= 0 or None, got {value!r}"
                )
        if self.max_decode_ratio is not None and not self.max_decode_ratio > 0:
            raise ConfigError(
                f"DecodeLimits.max_decode_ratio must be > 0 or None, got {self.max_decode_ratio}"
            )


#: The defaults, used where no limits are given.
DEFAULT_LIMITS = DecodeLimits()


def limit_hint(name: str) -> str:
    """How to raise limit ``name`` (a :class:`DecodeLimits` field), for error messages."""
    return (
        f"raise it with fpipe.decode.DecodeLimits({name}=...) passed as "
        "get_train_dataset(decode_limits=...) or the task encoder's decode_limits; None turns "
        "it off"
    )


def _over(what: str, size: int, limit: int | None, name: str) -> None:
    if limit is not None and size > limit:
        raise ValueError(f"{what} {size} bytes, over {name}={limit} ({limit_hint(name)})")


def gunzip(data: bytes, max_bytes: int | None = DEFAULT_MAX_INFLATED_BYTES) -> bytes:
    """Inflate gzip data (several members are concatenated), refusing output over ``max_bytes``
    before it is produced.

    Raises:
      ValueError: more than ``max_bytes`` of output, or data after the last member.
      EOFError: the data ends inside a member.
      zlib.error: corrupt data.

    Examples:
      >>> import gzip
      >>> gunzip(gzip.compress(b"a cat"))
      b'a cat'
      >>> gunzip(gzip.compress(b"x" * 100), max_bytes=10)
      Traceback (most recent call last):
      ...
      ValueError: inflates to more than 10 bytes, over max_inflated_bytes=10 (...)
    """
    return b"".join(gunzip_chunks(data, max_bytes))


def gunzip_chunks(
    data: bytes, max_bytes: int | None = DEFAULT_MAX_INFLATED_BYTES, chunk_bytes: int = 1 << 20
) -> Iterator[bytes]:
    """:func:`gunzip` piece by piece: at most ``chunk_bytes`` of output at a time, so a caller
    that keeps only a count of what it reads (characters, bytes) holds one chunk in memory,
    never the whole output. Raises as :func:`gunzip` does, on reaching the chunk that goes over
    ``max_bytes`` or the end of truncated data.

    Examples:
      >>> import gzip
      >>> [len(c) for c in gunzip_chunks(gzip.compress(b"x" * 10), chunk_bytes=4)]
      [4, 4, 2]
    """
    total = 0
    rest = bytes(data)
    while True:
        d = zlib.decompressobj(wbits=31)
        buf = rest
        while not d.eof:
            budget = chunk_bytes if max_bytes is None else min(chunk_bytes, max_bytes - total + 1)
            chunk = d.decompress(buf, budget)
            total += len(chunk)
            if max_bytes is not None and total > max_bytes:
                raise ValueError(
                    f"inflates to more than {max_bytes} bytes, over max_inflated_bytes="
                    f"{max_bytes} ({limit_hint('max_inflated_bytes')})"
                )
            buf = d.unconsumed_tail
            if not buf and not chunk and not d.eof:
                raise EOFError("gzip data ends before the end of its last member (truncated)")
            if chunk:
                yield chunk
        rest = d.unused_data
        if not rest.strip(b"\0"):  # end (trailing zero padding is allowed, as gzip does)
            return


def npy_header(data: bytes) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """``(shape, fortran_order, dtype, data offset)`` of ``.npy`` bytes, from the header only."""
    f = io.BytesIO(data)
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
    else:
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    return tuple(int(s) for s in shape), bool(fortran), dtype, f.tell()


def check_npy(data: bytes, max_bytes: int | None) -> None:
    """Refuse ``.npy`` bytes whose header declares more array bytes than ``max_bytes`` or than
    the data holds (``np.load`` would allocate the declared size first)."""
    shape, _, dtype, offset = npy_header(data)
    if dtype.hasobject:
        raise ValueError("object arrays are refused (they would need pickle)")
    size = math.prod(shape) * dtype.itemsize
    _over("array of", size, max_bytes, "max_array_bytes")
    if size > len(data) - offset:
        raise ValueError(
            f"header declares {size} bytes of array data but only {len(data) - offset} follow "
            "(truncated)"
        )
