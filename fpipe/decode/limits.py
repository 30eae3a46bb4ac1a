"""Size limits of decoded payloads, checked before the memory is allocated.

A few bytes of input can ask for gigabytes of output: a 1 MB ``txt.gz`` inflating to 1 GiB, a
1 MB ``.npz`` holding a 1 GiB array, a ``.npy`` header declaring 2**40 elements. The limits of
those byte-sized payloads live in one record, :class:`DecodeLimits`, that the loader reads from
the task encoder's ``decode_limits`` (or ``get_train_dataset(decode_limits=...)``). The limits of
images and audio/video live with their decoders' options (``ImageDecodeOptions.max_pixels`` and
``max_decode_ratio``, ``AVLimits``); docs/failures.md lists every limit and where to set it.

A payload over a limit is a :class:`~fpipe.core.BadSampleError` (through ``decode_field``), so
it follows the loader's error policy.
"""

from __future__ import annotations

import io
import math
import zlib

import msgspec
import numpy as np

__all__ = ["DEFAULT_MAX_ARRAY_BYTES", "DEFAULT_MAX_INFLATED_BYTES", "DecodeLimits", "gunzip"]

#: Default of :attr:`DecodeLimits.max_inflated_bytes` (256 MiB).
DEFAULT_MAX_INFLATED_BYTES = 256 << 20
#: Default of :attr:`DecodeLimits.max_array_bytes` (256 MiB).
DEFAULT_MAX_ARRAY_BYTES = 256 << 20


class DecodeLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Limits of decoded payload sizes (``None`` turns one off).

    Examples:
      >>> DecodeLimits().max_inflated_bytes == 256 * 2**20
      True
      >>> DecodeLimits(max_array_bytes=2**30).max_array_bytes
      1073741824
    """

    #: Most bytes a gzip-compressed member (``txt.gz``, ``json.gz``) may inflate to.
    max_inflated_bytes: int | None = DEFAULT_MAX_INFLATED_BYTES
    #: Most bytes of array data in one ``.npy`` member, or in all arrays of one ``.npz``.
    max_array_bytes: int | None = DEFAULT_MAX_ARRAY_BYTES

    def __post_init__(self) -> None:
        from fpipe.core.errors import ConfigError

        for name in ("max_inflated_bytes", "max_array_bytes"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"DecodeLimits.{name} must be >= 0 or None, got {value}")


def _over(what: str, size: int, limit: int | None, name: str) -> None:
    if limit is not None and size > limit:
        raise ValueError(
            f"{what} {size} bytes, over {name}={limit} (raise it in fpipe.decode.DecodeLimits, "
            "the task encoder's decode_limits)"
        )


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
    out = bytearray()
    rest = bytes(data)
    while True:
        d = zlib.decompressobj(wbits=31)
        buf = rest
        while not d.eof:
            budget = 0 if max_bytes is None else max_bytes - len(out) + 1
            chunk = d.decompress(buf, budget)
            out += chunk
            if max_bytes is not None and len(out) > max_bytes:
                raise ValueError(
                    f"inflates to more than {max_bytes} bytes, over max_inflated_bytes="
                    f"{max_bytes} (raise it in fpipe.decode.DecodeLimits)"
                )
            buf = d.unconsumed_tail
            if not buf and not chunk and not d.eof:
                raise EOFError("gzip data ends before the end of its last member (truncated)")
        rest = d.unused_data
        if not rest.strip(b"\0"):  # end (trailing zero padding is allowed, as gzip does)
            return bytes(out)


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
