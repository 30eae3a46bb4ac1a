"""Cooking: raw member bytes ``{ext: bytes}`` -> a typed sample.

Two ways, as in Megatron-Energon:

- **field_map** (dataset.yaml): :func:`cook_sample` decodes only the members the map reads;
  other members are never decoded (a corrupt unused member is harmless).
- **crude** datasets: the raw members become a :class:`CrudeSample` (a dict) and the first
  matching :class:`Cooker` turns it into a sample (:func:`cook_crude_sample`).

Here: the field-map way (:func:`cook_sample`, :func:`cook_fields`). The crude way is
:mod:`fpipe.samples._crude`, decoding members :mod:`fpipe.samples._decode_members`; their
names are importable from here too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from fpipe.core.errors import BadSampleError
from fpipe.decode.image import ImageDecodeOptions
from fpipe.samples._crude import Cooker, CrudeSample, cook_crude_sample, make_crude_sample
from fpipe.samples._decode_members import (
    _av_member,
    _decode_av_member,
    _decode_member,
    as_image_options,
    decode_members,
    decode_whole_sample,
)
from fpipe.samples._field_map import FieldMap, compile_field_map
from fpipe.samples.registry import sample_type_from_name

__all__ = [
    "Cooker",
    "CrudeSample",
    "as_image_options",
    "cook_crude_sample",
    "cook_fields",
    "cook_sample",
    "decode_members",
    "decode_whole_sample",
    "make_crude_sample",
]

_MISSING = object()


def _walk(value: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if isinstance(value, (list, tuple)):
            try:
                value = value[int(part)]
            except (ValueError, IndexError):
                return _MISSING
        elif isinstance(value, Mapping):
            value = value.get(part, _MISSING)
            if value is _MISSING:
                return _MISSING
        else:
            return _MISSING
    return value


def cook_sample(
    raw: Mapping[str, bytes],
    *,
    sample_type: type | str,
    field_map: Mapping[str, str | Sequence[str]] | FieldMap,
    key: str,
    restore_key: tuple[Any, ...] = (),
    subflavors: Mapping[str, Any] | None = None,
    path: str = "",
    image_decode_options: ImageDecodeOptions | Mapping[str, Any] | None = None,
    rng: np.random.Generator | None = None,
    av_metadata: Mapping[str, Any] | None = None,
    decode_limits: Any = None,
    probe_av: bool = False,
    decode_exts: Mapping[str, str] | None = None,
    decoder: Callable[[dict[str, Any]], Any] | None = None,
    sample_key: str | None = None,
    sources: tuple[Any, ...] | None = None,
) -> Any:
    """Build a typed sample from raw members, decoding only the members ``field_map`` reads.

    A field the sample type declares ``str`` (or ``str | None``) gets text: a member that
    decodes to bytes is read as UTF-8 (else a :class:`BadSampleError`), a number becomes its
    text.

    Args:
      raw: member extension -> bytes of one sample (``{"jpg": b"...", "txt": b"..."}``).
      sample_type: a registered sample class or its name (``"CaptioningSample"``).
      field_map: sample field -> source (see :mod:`fpipe.samples._field_map`), or a compiled
        :class:`FieldMap` (compile once per dataset to skip the per-call cache lookup).
      key: the sample key, ``shard/member-key``.
      restore_key: the sample's restore key.
      subflavors: the sample's subflavors.
      path: the shard or file, named in errors.
      image_decode_options: options of the built-in image decoder (record or dict).
      rng: randomness for decoding (random crop), built from the sample's key.
      av_metadata: stored stream metadata (:class:`fpipe.decode.av.AVMetadata`, keyframes
        included) by member key, e.g. ``{"mp4": meta}`` from ``Dataset.av_metadata(i)``; the
        lazy :class:`~fpipe.decode.av.AVDecoder` of that member then seeks without probing,
        and its limits are checked now. A member named here is treated as audio/video even if
        its key is not a media extension (a table column such as ``path``).
      decode_limits: :class:`fpipe.decode.DecodeLimits`, every decoding limit (inflated and
        array sizes, image pixels, audio/video); None: the defaults.
      probe_av: probe an audio/video member without stored metadata now (demux only, no frame
        decoded), so a corrupt file or a file over a limit raises :class:`BadSampleError`
        while cooking rather than when the task encoder decodes it.
      decode_exts: member -> the extension it is decoded as, for members whose name is not
        their type (a table's columns: ``{"image": "jpg", "caption": "txt"}``, from
        ``Dataset.decode_exts(i)``); other members are decoded by their own name.
      decoder: Energon's whole-sample decoder, ``decoder({"__key__": key, **raw}) -> dict``
        (a task encoder's callable ``decoder``): called once, and the field map reads its
        result as it is (nothing is decoded by extension, no text conversion).
      sample_key: the sample's ``__key__`` when it is not ``key`` (samples of an Energon
        folder carry the key inside their shard, as Energon gives it); ``key`` still names the
        sample in errors.
      sources: the sample's ``__sources__`` (:class:`~fpipe.samples.SourceInfo` records).

    Raises:
      BadSampleError: a required field has no member present, or a used member is undecodable.
      ConfigError: unknown sample type or invalid field_map.

    Examples:
      >>> s = cook_sample({"txt": b"hi", "json": b"{}"}, sample_type="TextSample",
      ...                 field_map={"text": "txt"}, key="shard-0/000")
      >>> s.text, s.__key__
      ('hi', 'shard-0/000')
    """
    if not isinstance(sample_type, type):
        sample_type = sample_type_from_name(sample_type)
    return cook_fields(
        raw,
        compile_field_map(sample_type, field_map),
        key,
        restore_key,
        subflavors,
        path,
        as_image_options(image_decode_options),
        rng,
        av_metadata,
        decode_limits,
        probe_av,
        decode_exts,
        decoder,
        sample_key,
        sources,
    )


def cook_fields(
    raw: Mapping[str, bytes],
    fmap: FieldMap,
    key: str,
    restore_key: tuple[Any, ...],
    subflavors: Mapping[str, Any] | None,
    path: str,
    img_opts: ImageDecodeOptions | None,
    rng: np.random.Generator | None,
    av_metadata: Mapping[str, Any] | None,
    decode_limits: Any,
    probe_av: bool,
    decode_exts: Mapping[str, str] | None,
    decoder: Callable[[dict[str, Any]], Any] | None,
    sample_key: str | None,
    sources: tuple[Any, ...] | None,
) -> Any:
    """:func:`cook_sample` with its arguments checked already: a compiled field map and image
    options as a record, every argument given by position. The loader cooks every sample
    through this (binding fifteen keywords costs more than a small sample's decode)."""
    sample_type = fmap.sample_type
    decoded: dict[str, Any] = {}
    if decoder is not None:  # the user's decoder decoded every member already
        raw = decoded = decode_whole_sample(decoder, raw, path, key, sample_key)
    values: dict[str, Any] = {}
    # audio/video members are looked for only where there may be some (what _av_member
    # checks first)
    av = probe_av or bool(av_metadata)
    for spec in fmap.fields:
        value = _MISSING
        for src in spec.sources:
            if src.ext not in raw:
                continue
            whole = decoded.get(src.ext, _MISSING)
            if whole is _MISSING:
                ext = decode_exts.get(src.ext, src.ext) if decode_exts else src.ext
                if av and _av_member(src.ext, ext, av_metadata, probe_av):
                    whole = _decode_av_member(
                        src.ext, raw[src.ext], av_metadata, decode_limits, path=path, key=key
                    )
                else:
                    whole = _decode_member(
                        src.ext, ext, raw[src.ext], path, key, img_opts, rng, decode_limits
                    )
                decoded[src.ext] = whole
            value = _walk(whole, src.path) if src.path else whole
            if value is not _MISSING:
                break
        if value is _MISSING:
            if spec.required:
                tried = ", ".join(str(s) for s in spec.sources)
                present = ", ".join(sorted(k for k in raw if not k.startswith("__")))
                raise BadSampleError(
                    path,
                    key,
                    f"missing field {spec.name!r}: no value at {tried} (members: {present})",
                )
            continue
        if spec.text and decoder is None and isinstance(value, _TEXT_SOURCES):
            value = _as_text(value, spec.name, path, key)
        values[spec.name] = value
    return sample_type(
        __key__=key if sample_key is None else sample_key,
        __restore_key__=tuple(restore_key),
        __subflavors__=dict(subflavors) if subflavors else {},
        __sources__=sources,
        **values,
    )


#: The values :func:`_as_text` changes (others it returns as they are): tested before calling
#: it, as most text fields hold text already.
_TEXT_SOURCES = (bytes, bytearray, memoryview, int, float)


def _as_text(value: Any, field: str, path: str, key: str) -> Any:
    """The value of a field declared ``str``: bytes read as UTF-8, a number as its text."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as e:
            raise BadSampleError(
                path, key, f"field {field!r} is declared str, but its value is not UTF-8: {e}"
            ) from None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value
