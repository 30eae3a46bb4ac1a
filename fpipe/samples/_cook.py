"""Cooking: raw member bytes ``{ext: bytes}`` -> a typed sample.

Two ways, as in Megatron-Energon:

- **field_map** (dataset.yaml): :func:`cook_sample` decodes only the members the map reads;
  other members are never decoded (a corrupt unused member is harmless).
- **crude** datasets: the raw members become a :class:`CrudeSample` (a dict) and the first
  matching :class:`Cooker` turns it into a sample (:func:`cook_crude_sample`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.decode.extensions import is_gz
from fpipe.decode.image import ImageDecodeOptions
from fpipe.decode.registry import decode_by_extension
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


def as_image_options(opts: ImageDecodeOptions | Mapping[str, Any] | None) -> Any:
    """Image decode options as a record (a mapping gives its keywords), or None."""
    if opts is None or isinstance(opts, ImageDecodeOptions):
        return opts
    return ImageDecodeOptions(**opts)


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


class CrudeSample(dict):
    """Raw fields of one sample: ``__key__``, ``__restore_key__``, ``__subflavors__``,
    ``__path__`` and one entry per member (extension -> bytes), as a dict.

    Examples:
      >>> c = make_crude_sample({"txt": b"hello"}, key="s/0")
      >>> c["__key__"], c.decode("txt")
      ('s/0', 'hello')
    """

    def decode(
        self,
        ext: str,
        *,
        image_options: ImageDecodeOptions | Mapping[str, Any] | None = None,
        rng: np.random.Generator | None = None,
        limits: Any = None,
    ) -> Any:
        """Decode member ``ext`` with the registry (a table's column by its type, see
        ``__decode_exts__``); errors name this sample's file and key.

        ``limits``: a :class:`fpipe.decode.DecodeLimits`; None: the loader's (carried in the
        sample as ``__decode_limits__``), or the defaults. A member the loader decoded already
        (crude samples reach cookers decoded by extension, as in Energon) is returned as it is.
        """
        path, key = self.get("__path__", ""), self.get("__key__", "")
        if limits is None:
            limits = self.get("__decode_limits__")
        if ext not in self:
            present = ", ".join(sorted(k for k in self if not k.startswith("__")))
            raise BadSampleError(path, key, f"missing member {ext!r} (members: {present})")
        if not isinstance(self[ext], (bytes, bytearray, memoryview)):
            return self[ext]
        return _decode_member(
            ext,
            (self.get("__decode_exts__") or {}).get(ext, ext),
            self[ext],
            path,
            key,
            as_image_options(image_options),
            rng,
            limits,
        )


def make_crude_sample(
    raw: Mapping[str, bytes],
    *,
    key: str,
    restore_key: tuple[Any, ...] = (),
    subflavors: Mapping[str, Any] | None = None,
    path: str = "",
    decode_limits: Any = None,
    decode_exts: Mapping[str, str] | None = None,
    shard: str = "",
    sources: tuple[Any, ...] | None = None,
) -> CrudeSample:
    """Wrap raw members into a :class:`CrudeSample` (nothing is decoded). ``decode_limits``
    (the loader's :class:`fpipe.decode.DecodeLimits`) is kept as ``__decode_limits__`` and
    ``decode_exts`` (how a table's columns are decoded, see :func:`cook_sample`) as
    ``__decode_exts__``, for :meth:`CrudeSample.decode`; ``shard``: the shard's name, kept as
    Energon's ``__shard__`` when given; ``sources``: the sample's ``__sources__``
    (:class:`~fpipe.samples.SourceInfo` records), kept when given."""
    crude = CrudeSample(raw)
    crude["__key__"] = key
    crude["__restore_key__"] = tuple(restore_key)
    crude["__subflavors__"] = dict(subflavors) if subflavors else {}
    crude["__path__"] = path
    if shard:
        crude["__shard__"] = shard
    if sources is not None:
        crude["__sources__"] = tuple(sources)
    if decode_limits is not None:
        crude["__decode_limits__"] = decode_limits
    if decode_exts:
        crude["__decode_exts__"] = dict(decode_exts)
    return crude


@dataclasses.dataclass(frozen=True)
class Cooker:
    """A user function ``cook(crude) -> sample`` and when it applies.

    Attributes:
      cook: turns a :class:`CrudeSample` into a sample.
      has_subflavors: applies only if the sample's subflavors contain all these items.
      condition: applies only if ``condition(crude)`` is true.
    """

    cook: Callable[[CrudeSample], Any]
    has_subflavors: Mapping[str, Any] | None = None
    condition: Callable[[CrudeSample], bool] | None = None

    def is_match(self, crude: Mapping[str, Any]) -> bool:
        """Whether this cooker applies to ``crude``."""
        if self.has_subflavors:
            sub = crude.get("__subflavors__") or {}
            for k, v in self.has_subflavors.items():
                if k not in sub or sub[k] != v:
                    return False
        return self.condition is None or bool(self.condition(crude))


def cook_crude_sample(
    crude: CrudeSample,
    cookers: Sequence[Cooker | Callable[[CrudeSample], Any]],
    aux: Mapping[str, Any] | None = None,
) -> Any:
    """Cook ``crude`` with the first matching cooker (a bare function always matches);
    ``aux``: file stores passed to it as keywords (Energon's ``cook(sample, **aux)``).

    Raises:
      ConfigError: no cooker matches (the message names the key and subflavors).
    """
    for c in cookers:
        if isinstance(c, Cooker):
            if c.is_match(crude):
                return c.cook(crude, **(aux or {}))
        else:
            return c(crude, **(aux or {}))
    raise ConfigError(
        f"no cooker matches crude sample {crude.get('__key__', '')!r} of "
        f"{crude.get('__path__', '')!r} with subflavors {crude.get('__subflavors__')}; "
        "add a Cooker whose has_subflavors matches"
    )
