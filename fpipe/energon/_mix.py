"""Energon's batch-mixing helpers for ``MixBatchDataset(batch_mix_fn=...)``: concatenate the
drawn batches into one (tensors along the first dimension, zero-padded to the largest size of
every other dimension), field by field for dicts, dataclasses and named tuples."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from fpipe.core.errors import ConfigError

__all__ = ["concat_pad", "generic_concat", "homogeneous_concat_mix"]


def concat_pad(batch: list[Any]) -> torch.Tensor:
    """The tensors of ``batch`` joined along dimension 0; each other dimension is the largest
    among them, the rest filled with zeros (a tensor of the first one's dtype and device)."""
    first = batch[0]
    sizes = [max(int(t.shape[d]) for t in batch) for d in range(1, first.ndim)]
    out = first.new_zeros((sum(int(t.shape[0]) for t in batch), *sizes))
    row = 0
    for t in batch:
        n = int(t.shape[0])
        out[(slice(row, row + n), *(slice(0, int(s)) for s in t.shape[1:]))] = t
        row += n
    return out


def generic_concat(batch: list[Any]) -> Any:
    """``batch`` joined by the type of its first element: tensors by :func:`concat_pad`; dicts,
    dataclasses and named tuples field by field (the same type back); anything else stays the
    list."""
    first = batch[0]
    if isinstance(first, torch.Tensor):
        return concat_pad(batch)
    if isinstance(first, dict):
        return {k: generic_concat([b[k] for b in batch]) for k in first}
    if dataclasses.is_dataclass(first) and not isinstance(first, type):
        names = [f.name for f in dataclasses.fields(first) if f.init]
        return type(first)(**{n: generic_concat([getattr(b, n) for b in batch]) for n in names})
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*(generic_concat([getattr(b, n) for b in batch]) for n in first._fields))
    return batch


def homogeneous_concat_mix(samples: list[Any]) -> Any:
    """A ``batch_mix_fn`` that concatenates batches of one type (:func:`generic_concat`); a
    ConfigError when the drawn batches are of different types (mix those with the default,
    which gives the list)."""
    kinds = {type(s).__qualname__ for s in samples}
    if len(kinds) > 1:
        raise ConfigError(
            f"homogeneous_concat_mix: the mixed batches are of different types {sorted(kinds)}; "
            "give the datasets task encoders that make one batch type, or leave batch_mix_fn "
            "out to get the list of batches"
        )
    return generic_concat(samples)
