"""The ``Batch`` base: a dataclass of collated fields plus the keys of the samples in it.

``pin_memory()`` and ``to(device)`` (from :class:`~fpipe.samples.tensors.PinMemoryMixin`)
return a new batch; they recurse into tensors, lists, tuples, dicts and nested dataclasses
(samples or batches). torch is imported inside them only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fpipe.samples.base import BASE_FIELDS, keep_defaults_off_class
from fpipe.samples.tensors import PinMemoryMixin, map_tensors

__all__ = ["Batch", "map_tensors"]

B = TypeVar("B", bound="Batch")


@dataclass(kw_only=True, repr=False)
class Batch(PinMemoryMixin):
    """Base of batches built by a task encoder.

    Examples:
      >>> from dataclasses import dataclass
      >>> from fpipe.samples import TextSample
      >>> @dataclass
      ... class TextBatch(Batch):
      ...     text: list
      >>> b = TextBatch.from_samples([TextSample(text="a", __key__="s/0"),
      ...                             TextSample(text="b", __key__="s/1")])
      >>> b.text, b.__key__
      (['a', 'b'], ['s/0', 's/1'])
    """

    #: The ``__key__`` of each sample, in batch order.
    __key__: list[str] = field(default_factory=list)
    #: The ``__restore_key__`` of each sample, in batch order.
    __restore_key__: tuple[Any, ...] = ()
    #: The ``__subflavors__`` of each sample, in batch order.
    __subflavors__: list[dict[str, Any]] = field(default_factory=list)
    #: The ``__sources__`` of the samples, flattened in batch order (as Energon's batches);
    #: None when no sample has any.
    __sources__: tuple[Any, ...] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Subclasses keep the concise repr (shapes and dtypes, not values): a name in the
        # class's own namespace is one that ``@dataclass`` does not overwrite.
        super().__init_subclass__(**kwargs)
        if "__repr__" not in cls.__dict__:
            cls.__repr__ = Batch.__repr__  # type: ignore[method-assign]

    def __repr__(self) -> str:
        from fpipe.samples.describe import concise_repr

        return concise_repr(self)

    @classmethod
    def from_samples(cls: type[B], samples: Sequence[Any], **fields: Any) -> B:
        """Build a batch from samples: keys are collected from ``samples``; each declared
        field not given in ``fields`` becomes the list of that attribute of the samples;
        ``__sources__`` is the samples' sources in one tuple."""
        for f in dataclasses.fields(cls):
            if (
                f.init
                and f.name not in BASE_FIELDS
                and f.name not in fields
                and samples
                and all(hasattr(s, f.name) for s in samples)
            ):
                fields[f.name] = [getattr(s, f.name) for s in samples]
        return cls(
            __key__=[s.__key__ for s in samples],
            __restore_key__=tuple(s.__restore_key__ for s in samples),
            __subflavors__=[s.__subflavors__ for s in samples],
            __sources__=_flat_sources(samples),
            **fields,
        )

    @classmethod
    def derive_from(cls: type[B], other: Batch, **fields: Any) -> B:
        """A new ``cls`` batch with the keys of ``other`` and the given fields."""
        return cls(
            __key__=list(other.__key__),
            __restore_key__=other.__restore_key__,
            __subflavors__=list(other.__subflavors__),
            __sources__=getattr(other, "__sources__", None),
            **fields,
        )

    def replace(self: B, **changes: Any) -> B:
        """A copy with some fields changed (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)


keep_defaults_off_class(Batch)


def _flat_sources(samples: Sequence[Any]) -> tuple[Any, ...] | None:
    """Every sample's ``__sources__`` in one tuple, None when no sample has any."""
    found = [s for sample in samples for s in (getattr(sample, "__sources__", None) or ())]
    return tuple(found) if found else None
