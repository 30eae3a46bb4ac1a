"""Decoders for non-image fields: each is ``fn(data: bytes) -> value`` and never runs code.

Formats that could execute code on load (pickle, ``pyd``) have no decoder: such members stay
``bytes``. ``torch.load`` is only ever called with ``weights_only=True``.
"""

from __future__ import annotations

import io
from typing import Any

import msgspec
import numpy as np

__all__ = [
    "AV_EXTENSIONS",
    "decode_av",
    "decode_int",
    "decode_json",
    "decode_msgpack",
    "decode_npy",
    "decode_npz",
    "decode_pth",
    "decode_txt",
]

#: Member extensions returned as a lazy :class:`fpipe.decode.av.AVDecoder` handle.
AV_EXTENSIONS = ("avi", "flac", "m4a", "mkv", "mov", "mp3", "mp4", "ogg", "wav", "webm")

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


def decode_npy(data: bytes) -> np.ndarray:
    """A ``.npy`` array; object arrays are refused (``allow_pickle=False``)."""
    return np.load(io.BytesIO(data), allow_pickle=False)


def decode_npz(data: bytes) -> dict[str, np.ndarray]:
    """A ``.npz`` archive as a dict of arrays; object arrays are refused."""
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        return {name: z[name] for name in z.files}


def decode_pth(data: bytes) -> Any:
    """A ``torch.save`` file, loaded on CPU with ``weights_only=True`` (tensors and plain
    containers only; no arbitrary objects are unpickled)."""
    import torch  # lazy: fpipe.decode must not import torch at import time

    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def decode_av(data: bytes, *, path: str = "", key: str = "") -> Any:
    """A lazy audio/video handle, ``fpipe.decode.av.AVDecoder(data, path=, key=)``; nothing is
    decoded (or even parsed) yet, so a corrupt video fails when frames are requested."""
    from fpipe.decode.av import AVDecoder  # lazy: PyAV is imported only by fpipe.decode.av

    return AVDecoder(data, path=path, key=key)
