"""The ``Batch`` base: a dataclass of collated fields plus the keys of the samples in it.

``pin_memory()`` and ``to(device)`` return a new batch; they recurse into tensors, lists,
tuples, dicts and nested dataclasses (samples or batches). torch is imported inside them only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fpipe.samples.base import BASE_FIELDS

__all__ = ["Batch", "map_tensors"]

B = TypeVar("B", bound="Batch")


@dataclass(kw_only=True, repr=False)
class Batch:
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
        field not given in ``fields`` becomes the list of that attribute of the samples."""
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
            **fields,
        )

    @classmethod
    def derive_from(cls: type[B], other: Batch, **fields: Any) -> B:
        """A new ``cls`` batch with the keys of ``other`` and the given fields."""
        return cls(
            __key__=list(other.__key__),
            __restore_key__=other.__restore_key__,
            __subflavors__=list(other.__subflavors__),
            **fields,
        )

    def replace(self: B, **changes: Any) -> B:
        """A copy with some fields changed (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    def pin_memory(self: B) -> B:
        """A copy whose CPU tensors are in pinned memory (for fast, async host-to-device
        copies). Without an accelerator pinning is impossible and ``self`` is returned."""
        import torch

        acc = getattr(torch, "accelerator", None)
        available = acc.is_available() if acc is not None else torch.cuda.is_available()
        if not available:
            return self
        return map_tensors(self, lambda t: t.pin_memory())

    def to(self: B, device: Any, *, non_blocking: bool = False) -> B:
        """A copy with every tensor moved to ``device`` (``"cuda"``, ``torch.device``...)."""
        return map_tensors(self, lambda t: t.to(device, non_blocking=non_blocking))


def map_tensors(x: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to every torch tensor in ``x``, recursing into lists, tuples (named tuples
    kept), dicts and dataclass instances; everything else is returned as is."""
    import torch

    def go(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return fn(v)
        if isinstance(v, list):
            return [go(i) for i in v]
        if isinstance(v, tuple):
            items = [go(i) for i in v]
            return type(v)(*items) if hasattr(v, "_fields") else tuple(items)
        if isinstance(v, dict):
            out = type(v)() if type(v) is not dict else {}
            for k, i in v.items():
                out[k] = go(i)
            return out
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            changes = {f.name: go(getattr(v, f.name)) for f in dataclasses.fields(v) if f.init}
            return dataclasses.replace(v, **changes)
        return v

    return go(x)
