"""Decoding a sample's members: each by its extension through the decoder registry, a whole
sample by the user's decoder, audio/video as a lazy decoder with its stored metadata and
limits.

:func:`decode_members` decodes a crude sample as Energon's default ``SampleDecoder`` does;
:func:`decode_whole_sample` calls a task encoder's whole-sample ``decoder``. The field-map
cooking of :mod:`fpipe.samples._cook` and :class:`~fpipe.samples._crude.CrudeSample` decode
members through :func:`_decode_member` and the video branch here. Every error is a
:class:`~fpipe.core.errors.BadSampleError` naming the file, the key and the member.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.decode.extensions import is_gz
from fpipe.decode.image import ImageDecodeOptions
from fpipe.decode.registry import decode_by_extension

__all__ = ["as_image_options", "decode_members", "decode_whole_sample"]


def as_image_options(opts: ImageDecodeOptions | Mapping[str, Any] | None) -> Any:
    """Image decode options as a record (a mapping gives its keywords), or None."""
    if opts is None or isinstance(opts, ImageDecodeOptions):
        return opts
    return ImageDecodeOptions(**opts)


def decode_whole_sample(
    decoder: Callable[[dict[str, Any]], Any],
    raw: Mapping[str, Any],
    path: str,
    key: str,
    sample_key: str | None = None,
) -> dict[str, Any]:
    """``decoder({"__key__": key, **raw})``, Energon's call of a whole-sample decoder
    (``sample_key``, when given, is the ``__key__`` it sees; ``key`` names it in errors).

    Raises:
      BadSampleError: the decoder raised (the sample's file and key named) or returned no
        mapping.
    """
    try:
        out = decoder({"__key__": key if sample_key is None else sample_key, **raw})
    except (BadSampleError, ConfigError):
        raise
    except Exception as e:  # noqa: BLE001 - the user's decoder failing on this sample's data
        raise BadSampleError(path, key, f"decoder {decoder!r}: {type(e).__name__}: {e}") from e
    if not isinstance(out, Mapping):
        raise BadSampleError(
            path, key, f"decoder {decoder!r} returned {type(out).__name__}, not a dict"
        )
    return dict(out)


def decode_members(
    raw: Mapping[str, Any],
    *,
    path: str = "",
    key: str = "",
    image_options: ImageDecodeOptions | Mapping[str, Any] | None = None,
    limits: Any = None,
    decode_exts: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Every member of ``raw`` decoded by its extension, as Energon's default ``SampleDecoder``
    decodes a crude sample before its cooker sees it (``txt`` -> str, ``cls`` -> int,
    ``json`` -> objects, images as ``image_options`` say, audio/video -> a lazy
    :class:`fpipe.decode.av.AVDecoder`; unknown extensions stay bytes); values that are not
    bytes and keys starting with ``__`` are kept as they are. ``decode_exts``: how a table's
    columns are decoded (see :func:`cook_sample`).

    Example:
      >>> decode_members({"__key__": "000001", "txt": b"12", "cls": b"3", "bin": b"x"})
      {'__key__': '000001', 'txt': '12', 'cls': 3, 'bin': b'x'}
    """
    opts = as_image_options(image_options)
    exts = decode_exts or {}
    return {
        k: v
        if k.startswith("__") or not isinstance(v, (bytes, bytearray, memoryview))
        else _decode_member(k, exts.get(k, k), bytes(v), path, key, opts, None, limits)
        for k, v in raw.items()
    }


def _decode_member(
    name: str,
    ext: str,
    data: bytes,
    path: str,
    key: str,
    image_options: Any,
    rng: np.random.Generator | None,
    limits: Any,
) -> Any:
    """Member ``name`` decoded as extension ``ext``; an error names both when they differ.
    (Arguments by position: this runs for every member the loader decodes.)"""
    try:
        return decode_by_extension(ext, data, path, key, image_options, rng, limits)
    except BadSampleError as e:
        if ext == name:
            raise
        reason = f"member {name!r} (decoded as {ext!r}): {e.reason}"
        raise BadSampleError(e.path, e.key, reason) from e


def _av_member(name: str, ext: str, av_metadata: Mapping[str, Any] | None, probe_av: bool) -> bool:
    """Whether member ``name``, decoded as extension ``ext``, gets the video branch: stored
    metadata applies to it (or ``probe_av``) and it is audio/video (a built-in AV extension,
    or named in ``av_metadata`` and without a registered decoder). A custom decoder
    registered for the extension keeps precedence."""
    if not (probe_av or (av_metadata and name in av_metadata)) or is_gz(ext):
        return False
    from fpipe.decode import fields
    from fpipe.decode.registry import get_decoder

    fn = get_decoder(ext)
    return fn is fields.decode_av or (fn is None and bool(av_metadata) and name in av_metadata)


def _decode_av_member(
    ext: str,
    data: bytes,
    av_metadata: Mapping[str, Any] | None,
    decode_limits: Any,
    *,
    path: str,
    key: str,
) -> Any:
    """The video branch: a lazy ``AVDecoder`` with the stored metadata and the limits."""
    from fpipe.decode.av.decoder import AVDecoder
    from fpipe.decode.limits import DEFAULT_LIMITS

    meta = av_metadata.get(ext) if av_metadata else None
    limits = decode_limits if decode_limits is not None else DEFAULT_LIMITS
    try:
        dec = AVDecoder(data, metadata=meta, path=path, key=key, limits=limits)
        if meta is None:
            dec.metadata  # noqa: B018 - probe now: corrupt files and limits raise while cooking
    except BadSampleError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of the data is a bad sample
        raise BadSampleError(path, key, f"member {ext!r}: {type(e).__name__}: {e}") from e
    return dec
