"""Decoders by member extension, and ``decode_field``, the one wrapper that turns any failure
into a :class:`BadSampleError` naming the file, the sample key and the member.

Lookup of a member extension such as ``seg.png``: the whole extension first (so a decoder can
be registered for ``seg.png`` only), then its last part (``png``). A trailing ``.gz`` is
gunzipped first (``txt.gz`` -> text). Extensions are compared in lower case. A member with no
decoder stays ``bytes`` (WebDataset's behaviour); pickle formats deliberately have none.

The registry is process-wide. Register custom decoders at import time of the module that
defines them, so DataLoader workers (forked or spawned) see them too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.core.fork_locks import fork_safe_lock
from fpipe.decode import fields
from fpipe.decode.extensions import AV_EXTENSIONS, IMAGE_EXTENSIONS, is_gz, strip_gz
from fpipe.decode.image import ImageDecodeOptions, decode_image_with
from fpipe.decode.limits import DEFAULT_LIMITS, DecodeLimits, gunzip

__all__ = [
    "Decoder",
    "decode_by_extension",
    "decode_field",
    "get_decoder",
    "register_decoder",
    "registered_extensions",
    "unregister_decoder",
]

#: A decoder: encoded member bytes -> value. Raise any exception for undecodable data.
Decoder = Callable[[bytes], Any]

_DEFAULT_IMAGE_OPTIONS = ImageDecodeOptions()


def decode_image_default(data: bytes) -> Any:
    """The built-in image decoder (RGB uint8 CHW torch tensor, default limits)."""
    return decode_image_with(data, _DEFAULT_IMAGE_OPTIONS)


def _builtins() -> dict[str, Decoder]:
    table: dict[str, Decoder] = {}
    for ext in ("txt", "text", "transcript"):
        table[ext] = fields.decode_txt
    for ext in ("json", "jsn"):
        table[ext] = fields.decode_json
    for ext in ("mp", "msgpack"):
        table[ext] = fields.decode_msgpack
    for ext in ("cls", "cls2", "class", "count", "index", "inx", "id"):
        table[ext] = fields.decode_int
    table["npy"] = fields.decode_npy
    table["npz"] = fields.decode_npz
    table["pth"] = fields.decode_pth
    for ext in ("ten", "tb"):  # WebDataset's tenbin
        table[ext] = fields.decode_tenbin
    for dtype in fields.TOKEN_DTYPES:  # Megatron corpora's tokens (and any raw token array)
        table[f"tokens.{dtype}"] = functools.partial(fields.decode_token_array, dtype=dtype)
    for ext in IMAGE_EXTENSIONS:
        table[ext] = decode_image_default
    for ext in AV_EXTENSIONS:
        table[ext] = fields.decode_av
    return table


_BUILTINS: dict[str, Decoder] = _builtins()
_REGISTRY: dict[str, Decoder] = dict(_BUILTINS)


@functools.lru_cache(maxsize=1024)  # twice for every member decoded, with few extensions
def _norm(ext: str) -> str:
    ext = ext.lower()
    return ext[1:] if ext.startswith(".") else ext


def register_decoder(ext: str, fn: Decoder) -> Decoder | None:
    """Use ``fn(data: bytes) -> value`` for members with extension ``ext``.

    ``ext`` is a last extension part (``"png"``) or a whole multi-part extension
    (``"seg.png"``, which then wins over ``"png"`` for that member only). Replaces a built-in
    or an earlier registration; returns the decoder it replaced, or ``None``.

    Examples:
      >>> _ = register_decoder("upper", lambda b: b.decode().upper())
      >>> decode_field("upper", b"abc")
      'ABC'
      >>> _ = unregister_decoder("upper")
    """
    if not callable(fn):
        raise TypeError(f"decoder for {ext!r} must be callable, got {type(fn).__name__}")
    ext = _norm(ext)
    if not ext:
        raise ValueError("decoder extension must not be empty")
    with _ROUTES_LOCK:
        old = _REGISTRY.get(ext)
        _REGISTRY[ext] = fn
        _forget_routes()
    return old


def unregister_decoder(ext: str) -> Decoder | None:
    """Remove a registration; a built-in extension goes back to its built-in decoder."""
    ext = _norm(ext)
    with _ROUTES_LOCK:
        old = _REGISTRY.pop(ext, None)
        if ext in _BUILTINS:
            _REGISTRY[ext] = _BUILTINS[ext]
        _forget_routes()
    return old


def registered_extensions() -> list[str]:
    """All extensions with a decoder, sorted."""
    return sorted(_REGISTRY)


def get_decoder(ext: str) -> Decoder | None:
    """The decoder used for member extension ``ext`` (whole extension, then last part)."""
    ext = _norm(ext)
    fn = _REGISTRY.get(ext)
    if fn is None and "." in ext:
        fn = _REGISTRY.get(ext.rsplit(".", 1)[1])
    return fn


def decode_field(
    ext: str,
    data: bytes,
    *,
    path: str = "",
    key: str = "",
    image_options: ImageDecodeOptions | None = None,
    rng: np.random.Generator | None = None,
    limits: DecodeLimits | None = None,
) -> Any:
    """Decode one member by its extension; any failure is a :class:`BadSampleError`.

    Args:
      ext: the member's extension after the sample key (``"jpg"``, ``"seg.png"``, ``"txt.gz"``).
      data: the member's bytes.
      path, key: the shard (or file) and the sample key, named in errors.
      image_options: options for the built-in image decoder (default: RGB CHW uint8 tensor at
        the decoded size). A custom decoder registered for an image extension ignores them.
      rng: randomness for image augmentation in decoding (``crop="random"``).
      limits: :class:`~fpipe.decode.limits.DecodeLimits` (default: ``DecodeLimits()``), used
        by the built-in decoders: inflated ``.gz`` members, ``.npy`` / ``.npz`` arrays, image
        pixels and audio/video (handed to the lazy ``AVDecoder``); over a limit is a bad sample.

    Examples:
      >>> decode_field("json", b'{"a": [1, {"b": 2}]}')
      {'a': [1, {'b': 2}]}
      >>> decode_field("bin", b"raw")
      b'raw'
    """
    return decode_by_extension(ext, data, path, key, image_options, rng, limits)


#: How a member extension is decoded, worked out once per extension (and again after a
#: decoder is registered or removed, which empties the table): whether it is gunzipped first,
#: which of the calls below it takes, and its decoder (None: the bytes as they are).
_ROUTES: dict[str, tuple[bool, int, Decoder | None]] = {}
_PLAIN, _ARRAY, _IMAGE, _AV = range(4)
_MAX_ROUTES = 4096  # extensions come from data: the table is emptied rather than grown past it
#: Registrations so far. A route worked out while a decoder was registered (another thread)
#: may hold the decoder before it: it is used for that member and not kept.
_GENERATION = 0
#: Held while the table is changed (register, unregister, a route kept): not while decoding.
_ROUTES_LOCK = fork_safe_lock(globals(), "_ROUTES_LOCK")


def _forget_routes() -> None:
    """Under ``_ROUTES_LOCK``: the decoders changed, every route is worked out again."""
    global _GENERATION
    _GENERATION += 1
    _ROUTES.clear()


def _route(ext: str) -> tuple[bool, int, Decoder | None]:
    generation = _GENERATION
    norm = _norm(ext)
    gz = is_gz(norm) or norm == "gz"
    if gz:
        norm = "" if norm == "gz" else strip_gz(norm)
    fn = get_decoder(norm) if norm else None
    if fn is decode_image_default:
        how = _IMAGE
    elif fn is fields.decode_av:
        how = _AV
    elif fn is fields.decode_npy or fn is fields.decode_npz:
        how = _ARRAY
    else:
        how = _PLAIN
    route = (gz, how, fn)
    with _ROUTES_LOCK:
        if generation == _GENERATION:
            if len(_ROUTES) >= _MAX_ROUTES:
                _ROUTES.clear()
            _ROUTES[ext] = route
    return route


def decode_by_extension(
    ext: str,
    data: bytes,
    path: str,
    key: str,
    image_options: ImageDecodeOptions | None,
    rng: np.random.Generator | None,
    limits: DecodeLimits | None,
) -> Any:
    """:func:`decode_field` with every argument given by position: the loader decodes each
    member it reads through this (keywords cost more to bind than a small member's decode)."""
    route = _ROUTES.get(ext)
    if route is None:
        route = _route(ext)
    gz, how, fn = route
    lim = DEFAULT_LIMITS if limits is None else limits
    try:
        if gz:
            data = gunzip(data, lim.max_inflated_bytes)
        if fn is None:
            return data
        if how == _PLAIN:
            return fn(data)
        if how == _ARRAY:
            return fn(data, max_bytes=lim.max_array_bytes)
        if how == _IMAGE:
            opts = _DEFAULT_IMAGE_OPTIONS if image_options is None else image_options
            return decode_image_with(data, opts, limits=lim, rng=rng, path=path, key=key)
        return fields.decode_av(data, path=path, key=key, limits=lim)
    except ConfigError:
        raise
    except BadSampleError as e:
        raise BadSampleError(e.path, e.key, f"member {ext!r}: {e.reason}") from e
    except Exception as e:  # any decoder failure is a bad sample, named by file/key/member
        raise BadSampleError(
            path, key, f"cannot decode member {ext!r}: {type(e).__name__}: {e}"
        ) from e
