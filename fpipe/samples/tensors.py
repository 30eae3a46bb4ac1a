"""``pin_memory()`` and ``to(device)`` for samples and batches, and the recursion they use.

Every :class:`~fpipe.samples.Sample` and :class:`~fpipe.samples.Batch` has them (Energon's
``Sample`` has ``pin_memory`` through its ``PinMemoryMixin``), so the batch a default task
encoder collates (a batch of the samples' own type) moves to the GPU as ``batch.to("cuda")``.
Both return a new object and leave the original alone. torch is imported inside them only.

Example:
    >>> import torch
    >>> from fpipe.samples import ImageSample
    >>> b = ImageSample(image=torch.zeros(2, 3, dtype=torch.uint8), __key__=["a", "b"])
    >>> b.to("meta").image.device.type, b.image.device.type
    ('meta', 'cpu')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["PinMemoryMixin", "map_tensors"]

T = TypeVar("T")


class PinMemoryMixin:
    """``pin_memory()`` and ``to(device)`` for a dataclass (a sample or a batch)."""

    def pin_memory(self: T, device: Any = None) -> T:
        """A copy whose CPU tensors are in pinned (page-locked) memory, for fast asynchronous
        host-to-device copies. Without an accelerator pinning is impossible, and ``self`` is
        returned unchanged (no copy). ``device`` is passed on to ``Tensor.pin_memory`` where
        given (Energon's signature)."""
        import torch

        acc = getattr(torch, "accelerator", None)
        available = acc.is_available() if acc is not None else torch.cuda.is_available()
        if not available:
            return self
        if device is None:
            return map_tensors(self, lambda t: t.pin_memory())
        return map_tensors(self, lambda t: t.pin_memory(device))

    def to(self: T, device: Any = None, dtype: Any = None, *, non_blocking: bool = False) -> T:
        """A copy with every tensor moved to ``device`` (``"cuda"``, ``torch.device``...) and
        its floating-point tensors cast to ``dtype``, as ``torch.nn.Module.to`` does: integer
        tensors (token ids, labels, lengths) keep their dtype. ``batch.to(torch.bfloat16)``
        (a dtype alone) casts without moving.

        Example:
            >>> import torch
            >>> from fpipe.samples import ImageClassificationSample as S
            >>> b = S(image=torch.zeros(2), label=torch.tensor([1, 2])).to("cpu", torch.float64)
            >>> b.image.dtype, b.label.dtype
            (torch.float64, torch.int64)
        """
        import torch

        if isinstance(device, torch.dtype):
            if dtype is not None:
                raise TypeError("to() takes one dtype: got two (as device and as dtype)")
            device, dtype = None, device
        if dtype is not None and not (dtype.is_floating_point or dtype.is_complex):
            raise TypeError(
                f"to() casts floating-point tensors only, as torch.nn.Module.to does; got "
                f"{dtype} (cast integer fields yourself: batch.replace(label=batch.label.to(...)))"
            )

        def move(t: Any) -> Any:
            floating = t.is_floating_point() or t.is_complex()
            cast = dtype if floating else None
            return t.to(device=device, dtype=cast, non_blocking=non_blocking)

        return map_tensors(self, move)


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
