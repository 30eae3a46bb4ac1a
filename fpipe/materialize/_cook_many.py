"""Cooking the samples of a recipe that one dataset holds in one pass, where that is plain.

A typed sample of small members (token ids, text, labels) costs more in the calls around its
decode than in the decode: the materializer's ``sample``, ``cook``, ``cook_fields``, the
registry's dispatch, each a frame and a few attribute lookups, for every sample.
:func:`cook_many` cooks the samples of one dataset read together (``Materializer.reads``)
in one loop: the field map, the decoders and the shard names are looked up once for them all,
each member goes straight to its decoder, and each sample is built with its ``__sources__``.

Only what gives exactly the sample :func:`fpipe.materialize._cook.cook` gives, with no
user code run outside the sample's hooks: a field map (not crude samples, no whole-sample
``decoder``), no joins, no typed table columns or stored audio/video metadata, each field
read from whole members (no path into a JSON) of extensions no other field reads, decoded by
fpipe's own decoders of small values (``.npy`` arrays, :data:`_PLAIN_DECODERS`, or none: the
bytes), into one of fpipe's sample types (no ``__post_init__``). A sample that does not go
through as planned (a member missing, a decode failing, a ``str`` field whose value is not
text yet) is left as it was read: the materializer cooks it alone, the usual way, which
raises the error it always raised, at its place in the recipe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from fpipe.decode import fields as _fields
from fpipe.decode.extensions import is_gz
from fpipe.decode.limits import DEFAULT_LIMITS
from fpipe.decode.registry import get_decoder

if TYPE_CHECKING:  # the materializer calls these with itself
    from fpipe.materialize._cook import _Cooking
    from fpipe.materialize.materializer import Materializer

__all__ = ["Cooked", "cook_many", "plain_fields"]


class _Alone(Exception):
    """A sample left to be cooked alone."""


class Cooked:
    """A sample :func:`cook_many` cooked, in place of its read in ``Materializer.reads``."""

    __slots__ = ("key", "sample")

    def __init__(self, key: str, sample: Any):
        self.key, self.sample = key, sample


#: fpipe's decoders of small values cooked in one pass: pure functions of the bytes.
_PLAIN_DECODERS = frozenset(
    {
        _fields.decode_txt,
        _fields.decode_json,
        _fields.decode_msgpack,
        _fields.decode_int,
    }
)


def plain_fields(mat: Materializer, how: _Cooking) -> tuple[tuple[str, str, bool], ...] | None:
    """``(field, member extension, text)`` of each field of the samples ``how`` cooks, where
    :func:`cook_many` may cook them (see the module's docstring), else None."""
    if how.crude or how.decode_exts is not None or how.av_metadata is not None:
        return None
    if mat.sample_decoder is not None or how.src.join or how.field_map is None:
        return None
    fmap = how.field_map
    cls = fmap.sample_type
    if not cls.__module__.startswith("fpipe.") or hasattr(cls, "__post_init__"):
        return None
    out = []
    for spec in fmap.fields:
        if len(spec.sources) != 1 or spec.sources[0].path:
            return None
        out.append((spec.name, spec.sources[0].ext, spec.text))
    exts = [ext for _, ext, _ in out]
    norm = [e.lower().removeprefix(".") for e in exts]  # as the registry reads them
    if len(set(exts)) != len(exts) or any(is_gz(e) or e == "gz" for e in norm):
        return None  # one decode shared by two fields; inflated within limits
    return tuple(out)


#: How a field's member is decoded (:func:`_decoders`): kept as bytes, ``fn(data)``, or
#: ``fn(data, max_bytes=...)`` (``.npy``).
_BYTES, _CALL, _ARRAY = range(3)


def _decoders(plain: tuple, limits) -> list | None:
    """Each field's decode: ``(how, decoder, max_bytes)`` (``how``: :data:`_BYTES`,
    :data:`_CALL` or :data:`_ARRAY`), looked up now (a decoder registered since is used);
    None where one is not fpipe's plain decoder."""
    out: list[tuple[int, Any, Any]] = []
    for _, ext, _ in plain:
        fn = get_decoder(ext)
        if fn is None:
            out.append((_BYTES, None, None))
        elif fn is _fields.decode_npy:
            lim = DEFAULT_LIMITS if limits is None else limits
            out.append((_ARRAY, fn, lim.max_array_bytes))
        elif fn in _PLAIN_DECODERS:
            out.append((_CALL, fn, None))
        else:
            return None
    return out


def cook_many(
    mat: Materializer,
    how: _Cooking,
    plain: tuple,
    dataset: int,
    indices: np.ndarray,
    epochs: np.ndarray,
    reads: list,
) -> list:
    """``reads`` (``(key, members)`` of samples ``indices`` of dataset ``dataset``, as read,
    of epochs ``epochs``) with each sample that cooks plainly as :class:`Cooked`; the others
    as they were (the materializer cooks them alone)."""
    decoders = _decoders(plain, mat.decode_limits)
    if decoders is None:
        return reads
    cls = how.field_map.sample_type
    names = how.names
    wanted = how.wanted
    subflavors = how.src.subflavors
    energon = names.energon
    locate = names.locate  # shard ids remembered for the batch (Materializer._cook_many)
    specs = [(f, ext, text, *dec) for (f, ext, text), dec in zip(plain, decoders)]
    npy_fast = _fields._npy_fast
    texts = (str, np.ndarray)
    out = list(reads)
    rows = zip(indices.tolist(), epochs.tolist(), reads)
    for j, (index, epoch, read) in enumerate(rows):
        key, raw = read
        if isinstance(raw, Exception):
            continue
        try:
            # the fields and the sample's keys in one dict, the class's keywords (a dict
            # of the fields merged into the call's keywords would cost as much as the call)
            kw: dict[str, Any] = {}
            for field, ext, text, kind, fn, max_bytes in specs:
                data = raw[ext]
                if kind == _CALL:
                    value = fn(data)
                elif kind == _ARRAY:  # decode_npy: its common layout, else all of it
                    value = npy_fast(data, max_bytes)
                    if value is None:
                        value = fn(data, max_bytes=max_bytes)
                else:
                    value = data
                if text and not isinstance(value, texts):
                    raise _Alone  # made text (or refused) the usual way
                kw[field] = value
            _, inner, kw["__sources__"] = locate(index, key, raw, wanted)
            kw["__key__"] = inner if energon else key
            kw["__restore_key__"] = (dataset, index, epoch)
            kw["__subflavors__"] = dict(subflavors) if subflavors else {}
            sample = cls(**kw)
        except Exception:  # noqa: BLE001 - cooked alone, the usual way, which names the error
            continue
        out[j] = Cooked(key, sample)
    return out
