"""The ``Sample`` base: a dataclass with the keys every sample carries.

Samples are plain (not frozen) dataclasses, like Megatron-Energon's, so an Energon user's
``@dataclass class MySample(Sample)`` works unchanged. fpipe itself never mutates a sample: it
builds new ones (``sample.replace(...)``, ``MySample.derive_from(other, ...)``). The base fields
are keyword-only with defaults, so subclasses may declare fields without defaults. Samples, and
the batches a default task encoder collates from them (of the samples' own type), have
``pin_memory()`` and ``to(device)`` (:class:`~fpipe.samples.tensors.PinMemoryMixin`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fpipe.samples.source_info import SourceInfo
from fpipe.samples.tensors import PinMemoryMixin

__all__ = ["BASE_FIELDS", "Sample", "basic_sample_keys", "keep_defaults_off_class"]

#: Names of the fields every sample (and batch) has.
BASE_FIELDS = ("__key__", "__restore_key__", "__subflavors__", "__sources__")

S = TypeVar("S", bound="Sample")


@dataclass(kw_only=True, repr=False)
class Sample(PinMemoryMixin):
    """Base of all typed samples.

    Examples:
      >>> from dataclasses import dataclass
      >>> @dataclass
      ... class Pair(Sample):
      ...     a: str
      ...     b: str
      >>> p = Pair(a="x", b="y", __key__="shard-0/000001")
      >>> p.__key__, Pair.derive_from(p, a="z", b="w").__key__
      ('shard-0/000001', 'shard-0/000001')
    """

    #: ``shard/member-key`` (the shard's path relative to the dataset, then the member key).
    __key__: str = ""
    #: A tuple of str/int that locates the sample again (dataset, shard, index, ...).
    __restore_key__: tuple[Any, ...] = ()
    #: Subflavors from the metadataset (e.g. ``{"source": "coco"}``); used by cookers.
    __subflavors__: dict[str, Any] = field(default_factory=dict)
    #: Where the sample was read from (:class:`~fpipe.samples.SourceInfo`, one per file; a
    #: joined sample one per part); None for a sample built by hand.
    __sources__: tuple[SourceInfo, ...] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Subclasses keep the concise repr (shapes and dtypes, not values): a name in the
        # class's own namespace is one that ``@dataclass`` does not overwrite.
        super().__init_subclass__(**kwargs)
        if "__repr__" not in cls.__dict__:
            cls.__repr__ = Sample.__repr__  # type: ignore[method-assign]

    def __repr__(self) -> str:
        from fpipe.samples.describe import concise_repr

        return concise_repr(self)

    def replace(self: S, **changes: Any) -> S:
        """A copy with some fields changed (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def extend(cls: type[S], src: Any, **fields: Any) -> S:
        """A ``cls`` sample with every field of ``src`` (an instance of a base class of
        ``cls``) and the new ``fields`` (Energon's ``extend``): the usual way to add fields
        to a sample in a subclass.

        Examples:
          >>> from dataclasses import dataclass
          >>> @dataclass
          ... class A(Sample):
          ...     a: int
          >>> @dataclass
          ... class AB(A):
          ...     b: int
          >>> AB.extend(A(a=1, __key__="k"), b=2).b, AB.extend(A(a=1, __key__="k"), b=2).__key__
          (2, 'k')
        """
        if not issubclass(cls, type(src)):
            raise TypeError(
                f"cannot extend a {type(src).__name__} into {cls.__name__}: it is not a subclass"
            )
        for f in dataclasses.fields(src):
            if f.init and f.name not in fields:
                fields[f.name] = getattr(src, f.name)
        return cls(**fields)

    @classmethod
    def derive_from(cls: type[S], base: Any, **fields: Any) -> S:
        """A new ``cls`` sample with the keys of ``base`` (a sample or a crude sample)."""
        return cls(**basic_sample_keys(base), **fields)

    @classmethod
    def from_joined(cls: type[S], *samples: Any, **named: Any) -> S:
        """One sample of ``cls`` from the samples of a join (``join:`` in a metadataset), as
        Energon's default joiner builds it: the keys and subflavors of the first (primary)
        sample, then the fields of every sample in order, later ones taking precedence. A
        missing part (``nonmatch: none``) is None and gives no fields; a field of ``cls``
        that no sample gave is None; ``__sources__`` holds every part's sources, in order.
        Override it (a ``staticmethod`` or ``classmethod``) in a registered sample type to join
        otherwise; named parts (``join:`` as a mapping) come as keyword arguments.

        Examples:
          >>> from dataclasses import dataclass
          >>> @dataclass
          ... class Img(Sample):
          ...     image: str
          >>> @dataclass
          ... class Txt(Sample):
          ...     text: str
          >>> @dataclass
          ... class ImgTxt(Sample):
          ...     image: str
          ...     text: str
          >>> j = ImgTxt.from_joined(Img(image="I", __key__="a/1"), Txt(text="T", __key__="b/1"))
          >>> j.image, j.text, j.__key__
          ('I', 'T', 'a/1')
        """
        parts = [*samples, *named.values()]
        if not parts or parts[0] is None:
            raise ValueError("from_joined needs the primary sample first")
        values: dict[str, Any] = {}
        for part in parts:
            if part is not None:
                for name in _user_fields(type(part))[0]:
                    values[name] = getattr(part, name)
        own, required = _user_fields(cls)
        unknown = sorted(set(values).difference(own))
        if unknown:
            raise TypeError(
                f"{cls.__name__} has no field(s) {', '.join(unknown)} of the joined samples; "
                f"its fields: {', '.join(own)}"
            )
        for name in required:
            values.setdefault(name, None)
        keys = basic_sample_keys(parts[0])
        sources = [s for p in parts if p is not None for s in (p.__sources__ or ())]
        keys["__sources__"] = tuple(sources) if sources else None
        return cls(**keys, **values)


def keep_defaults_off_class(cls: type) -> type:
    """Remove the class attributes that ``@dataclass`` left for the defaults of ``cls``'s
    base fields; ``__init__`` keeps the defaults.

    Energon's ``Sample`` and ``Batch`` are slots dataclasses, so their base fields have no class
    attribute, and a subclass that re-declares one without a value (``__key__: str``, as
    Megatron-LM's samples do) makes it a required field. Here too: otherwise the re-declared
    field would take the inherited value as its default, and a later re-declared field without
    one would fail ("non-default argument follows default argument").
    """
    for name in BASE_FIELDS:
        if name in cls.__dict__:
            delattr(cls, name)
    return cls


keep_defaults_off_class(Sample)


@functools.lru_cache(maxsize=256)
def _user_fields(cls: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(init fields that are not base fields, those of them without a default) of ``cls``."""
    fields = [f for f in dataclasses.fields(cls) if f.init and f.name not in BASE_FIELDS]
    required = [f for f in fields if f.default is f.default_factory is dataclasses.MISSING]
    return tuple(f.name for f in fields), tuple(f.name for f in required)


def basic_sample_keys(sample: Any) -> dict[str, Any]:
    """``{"__key__", "__restore_key__", "__subflavors__", "__sources__"}`` of a sample or
    crude sample, to build another sample from it:
    ``TextSample(**basic_sample_keys(crude), text=...)``."""
    if isinstance(sample, Mapping):
        get = sample.get
        return {
            "__key__": get("__key__", ""),
            "__restore_key__": get("__restore_key__", ()),
            "__subflavors__": get("__subflavors__") or {},
            "__sources__": get("__sources__"),
        }
    return {
        "__key__": sample.__key__,
        "__restore_key__": sample.__restore_key__,
        "__subflavors__": sample.__subflavors__,
        "__sources__": getattr(sample, "__sources__", None),
    }
