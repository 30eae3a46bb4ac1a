"""Decoders for non-image fields: each is ``fn(data: bytes) -> value`` and never runs code.

Formats that could execute code on load (pickle, ``pyd``) have no decoder: such members stay
``bytes``. ``torch.load`` is only ever called with ``weights_only=True``.
"""

from __future__ import annotations

import functools
import io
import math
import re
import struct
import zipfile
from typing import Any

import msgspec
import numpy as np

from fpipe.decode.extensions import AV_EXTENSIONS
from fpipe.decode.limits import (
    DEFAULT_LIMITS,
    DEFAULT_MAX_ARRAY_BYTES,
    DecodeLimits,
    check_npy,
    limit_hint,
)

__all__ = [
    "AV_EXTENSIONS",
    "TOKEN_DTYPES",
    "decode_av",
    "decode_int",
    "decode_json",
    "decode_msgpack",
    "decode_npy",
    "decode_npz",
    "decode_pth",
    "decode_tenbin",
    "decode_token_array",
    "decode_txt",
]

#: Token dtypes of Megatron's indexed corpora: ``tokens.<dtype>`` members are read as arrays
#: of these (:func:`decode_token_array`).
TOKEN_DTYPES = ("uint8", "int8", "int16", "uint16", "int32", "int64", "float32", "float64")


_json_decoder = msgspec.json.Decoder()
_msgpack_decoder = msgspec.msgpack.Decoder()


def decode_txt(data: bytes) -> str:
    """UTF-8 text (strict: invalid UTF-8 is an error, not replaced).

    Examples:
      >>> decode_txt(b"a cat")
      'a cat'
    """
    return bytes(data).decode("utf-8")


def decode_json(data: bytes) -> Any:
    """JSON with msgspec (objects become dicts, arrays lists).

    Examples:
      >>> decode_json(b'{"caption": "a cat", "n": [1, 2]}')
      {'caption': 'a cat', 'n': [1, 2]}
    """
    return _json_decoder.decode(data)


def decode_msgpack(data: bytes) -> Any:
    """MessagePack with msgspec."""
    return _msgpack_decoder.decode(data)


def decode_int(data: bytes) -> int:
    """An integer written as text (``cls``, ``index``, ...); surrounding whitespace is ignored.

    Examples:
      >>> decode_int(b" 7\\n")
      7
    """
    return int(bytes(data).decode("ascii").strip())


# numpy's header for plain arrays: {'descr': '<i4', 'fortran_order': False, 'shape': (N,), }
_NPY_HEADER = re.compile(
    rb"\{'descr': '([<>|=]?[biufc]\d+)', 'fortran_order': (True|False), "
    rb"'shape': \(((?:\d+, ?)*\d*)\), \}\s*$"
)


@functools.lru_cache(maxsize=1024)
def _npy_header(header: bytes) -> tuple[np.dtype, tuple[int, ...], str, int] | None:
    """(dtype, shape, order, item count) of a standard ``.npy`` header, or None (cached:
    a dataset's arrays share few headers)."""
    m = _NPY_HEADER.match(header)
    if m is None:
        return None
    shape = tuple(int(x) for x in m.group(3).split(b",") if x.strip())
    order = "F" if m.group(2) == b"True" else "C"
    return np.dtype(m.group(1).decode()), shape, order, math.prod(shape)


#: Where numpy's writer starts a small array's data: it pads the header so that the data
#: starts at a multiple of 64 bytes, 128 for arrays of a few dimensions.
_NPY_PREAMBLE = 128
#: The first :data:`_NPY_PREAMBLE` bytes of arrays whose data starts there (magic, version,
#: header: all a parse reads) -> what :func:`npy_layout` made of them. Token ids of one
#: length share a preamble: looked up whole, it spares each array the header's slicing and
#: parse (most of a small array's decode). Bounded: past the limit, new preambles are parsed.
_npy_preambles: dict[bytes, tuple[np.dtype, tuple[int, ...] | None, str, int, int]] = {}
_NPY_PREAMBLES_MAX = 4096


def npy_layout(data) -> tuple[np.dtype, tuple[int, ...] | None, str, int, int] | None:
    """(dtype, shape (None: 1-D), order, item count, data offset) of a ``.npy`` of the
    common layout (``data``: its bytes from the start, at least through the header), or None.
    Also what :mod:`fpipe.storage.read.npy_files` maps index arrays by."""
    if data[:6] != b"\x93NUMPY" or len(data) < 10:
        return None
    major = data[6]
    if major == 1:
        hlen, start = int.from_bytes(data[8:10], "little"), 10
    elif major in (2, 3):
        hlen, start = int.from_bytes(data[8:12], "little"), 12
    else:
        return None
    parsed = _npy_header(bytes(data[start : start + hlen]))
    if parsed is None:
        return None
    dtype, shape, order, count = parsed
    return dtype, (None if len(shape) == 1 else shape), order, count, start + hlen


def _npy_fast(data: bytes, max_bytes: int | None = None) -> np.ndarray | None:
    """Decode the common ``.npy`` layout without ``np.load``'s per-call header compilation.

    Only numeric dtypes are accepted (no object arrays, so nothing can unpickle); anything
    unusual returns None and goes through ``np.load``.
    """
    parsed = _npy_preambles.get(data[:_NPY_PREAMBLE]) if type(data) is bytes else None
    if parsed is None:
        parsed = npy_layout(data)
        if parsed is None:
            return None
        if (
            parsed[4] == _NPY_PREAMBLE
            and type(data) is bytes
            and len(_npy_preambles) < _NPY_PREAMBLES_MAX
        ):
            _npy_preambles[data[:_NPY_PREAMBLE]] = parsed
    dtype, shape, order, count, offset = parsed
    nbytes = count * dtype.itemsize
    if len(data) - offset != nbytes or (max_bytes is not None and nbytes > max_bytes):
        return None  # truncated or padded: let np.load produce its error
    # By position: numpy parses frombuffer's keywords slowly (0.9 us against 0.2 us, as much as
    # the rest of a small array's decode).
    arr = np.frombuffer(data, dtype, count, offset)
    if shape is not None:
        return arr.reshape(shape, order=order).copy("K")
    return arr.copy()


def decode_npy(data: bytes, *, max_bytes: int | None = DEFAULT_MAX_ARRAY_BYTES) -> np.ndarray:
    """A ``.npy`` array; object arrays are refused (``allow_pickle=False``), and so is a header
    declaring more than ``max_bytes`` of array data, or more than the bytes hold (checked before
    anything is allocated)."""
    fast = _npy_fast(data, max_bytes)
    if fast is not None:
        return fast
    check_npy(data, max_bytes)
    return np.load(io.BytesIO(data), allow_pickle=False)


def decode_npz(
    data: bytes, *, max_bytes: int | None = DEFAULT_MAX_ARRAY_BYTES
) -> dict[str, np.ndarray]:
    """A ``.npz`` archive as a dict of arrays (members not named ``*.npy`` stay bytes); object
    arrays are refused, and so is an archive whose members declare more than ``max_bytes`` in
    all (checked from the zip directory before anything is inflated)."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        infos = zf.infolist()
        total = sum(i.file_size for i in infos)
        if max_bytes is not None and total > max_bytes:
            raise ValueError(
                f"npz members declare {total} bytes, over max_array_bytes={max_bytes} "
                f"({limit_hint('max_array_bytes')})"
            )
        out: dict[str, Any] = {}
        for info in infos:  # zipfile stops at each member's declared size and checks its CRC
            raw = zf.read(info)
            name = info.filename
            if name.endswith(".npy"):
                out[name[:-4]] = decode_npy(raw, max_bytes=max_bytes)
            else:
                out[name] = raw
        return out


def decode_pth(data: bytes) -> Any:
    """A ``torch.save`` file, loaded on CPU with ``weights_only=True`` (tensors and plain
    containers only; no arbitrary objects are unpickled)."""
    import torch  # lazy: fpipe.decode must not import torch at import time

    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def decode_token_array(data: bytes, dtype: str) -> Any:
    """Raw little-endian values of ``dtype`` (tokens as Megatron's ``.bin`` holds them) as a
    1-D torch tensor: ``int64`` for an integer dtype, the float dtype itself otherwise.

    Examples:
      >>> decode_token_array(b"\\x01\\x00\\x02\\x00", "uint16")
      tensor([1, 2])
    """
    import torch  # lazy: fpipe.decode must not import torch at import time

    arr = np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<"))
    wide = np.int64 if arr.dtype.kind in "iu" else arr.dtype.newbyteorder("=")
    return torch.from_numpy(arr.astype(wide))


def decode_av(
    data: bytes, *, path: str = "", key: str = "", limits: DecodeLimits = DEFAULT_LIMITS
) -> Any:
    """A lazy audio/video handle, ``fpipe.decode.av.AVDecoder(data, path=, key=, limits=)``;
    nothing is decoded (or even parsed) yet, so a corrupt video fails when frames are
    requested, and a file over one of ``limits`` when its metadata is first read."""
    from fpipe.decode.av.decoder import (
        AVDecoder,  # lazy: PyAV is imported only by fpipe.decode.av.decoder
    )

    return AVDecoder(data, path=path, key=key, limits=limits)


_TENBIN_MAGIC = b"~TenBin~"
_TENBIN_DTYPES = {
    "f2": "<f2", "f4": "<f4", "f8": "<f8", "i1": "i1", "i2": "<i2", "i4": "<i4", "i8": "<i8",
    "u1": "u1", "u2": "<u2", "u4": "<u4", "u8": "<u8",
}  # fmt: skip


def _tenbin_chunks(data: bytes) -> list[memoryview]:
    buf, off, out = memoryview(data), 0, []
    while off < len(buf):
        if bytes(buf[off : off + 8]) != _TENBIN_MAGIC:
            raise ValueError(f"tenbin: magic bytes missing at byte {off}")
        (n,) = struct.unpack("<q", buf[off + 8 : off + 16])
        if n < 0 or off + 16 + n > len(buf):
            raise ValueError(f"tenbin: chunk of {n} bytes at byte {off} runs past the end")
        out.append(buf[off + 16 : off + 16 + n])
        off += 16 + (n + 63) // 64 * 64
    return out


def decode_tenbin(data: bytes) -> list[np.ndarray]:
    """WebDataset's tenbin (``.ten``) member: the list of arrays it holds, as
    ``webdataset.tenbin.decode_buffer`` returns them (read-only views of the bytes).

    Layout: chunks of ``b"~TenBin~"``, an int64 byte count, the bytes padded to 64; chunks
    alternate an int64 header (dtype code such as ``f4``, info, rank, shape) and the data.
    """
    chunks = _tenbin_chunks(bytes(data))
    if len(chunks) % 2:
        raise ValueError("tenbin: a header without its data chunk")
    out = []
    for head, body in zip(chunks[::2], chunks[1::2]):
        h = np.frombuffer(head, dtype="<i8")
        code = int(h[0]).to_bytes(8, "little").rstrip(b"\x00").decode("ascii", "replace")
        if code not in _TENBIN_DTYPES or len(h) < 3 or len(h) < 3 + int(h[2]):
            raise ValueError(f"tenbin: unsupported dtype {code!r} or bad header")
        shape = tuple(int(x) for x in h[3 : 3 + int(h[2])])
        dtype = np.dtype(_TENBIN_DTYPES[code])
        count = int(np.prod(shape, dtype=np.int64))
        out.append(np.frombuffer(body, dtype=dtype, count=count).reshape(shape))
    return out
