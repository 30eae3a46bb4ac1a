"""Crude samples and their cookers: raw members as a :class:`CrudeSample` (a dict), turned into
a typed sample by the first matching :class:`Cooker` (:func:`cook_crude_sample`), as in
Megatron-Energon.

Nothing is decoded when a crude sample is made (:func:`make_crude_sample`); a cooker decodes
what it reads (:meth:`CrudeSample.decode`), or gets members the loader decoded by extension.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.decode.image import ImageDecodeOptions
from fpipe.samples._decode_members import _decode_member, as_image_options

__all__ = ["Cooker", "CrudeSample", "cook_crude_sample", "make_crude_sample"]


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
