"""Collate: pad and stack tensors, make lists of everything else.

Example:
    >>> import torch
    >>> b = collate([torch.ones(2), torch.ones(3)])
    >>> b.shape, b[0].tolist()
    (torch.Size([2, 3]), [1.0, 1.0, 0.0])
    >>> collate(["a", "b"])
    ['a', 'b']
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from fpipe.encode import batch_memory

__all__ = ["collate", "collate_samples", "pad_stack", "pad_stack_lengths"]


def pad_stack(tensors: Sequence[torch.Tensor], pad_value: float = 0) -> torch.Tensor:
    """Stack tensors of equal rank, padding each dimension at the end to the largest size.

    In a DataLoader worker that sends the batch as collated, the result is allocated in shared
    memory (see :mod:`fpipe.encode.batch_memory`); its values are the same everywhere."""
    first = tensors[0]
    if _plain_cpu(tensors):
        # numpy does the copy on this thread: torch's intra-op pool can stall for milliseconds
        # on a busy machine, which dominates small batches at num_workers=0.
        arrays = [t.numpy() for t in tensors]
        if all(a.shape == arrays[0].shape for a in arrays):
            out = _new_batch((len(arrays), *arrays[0].shape), arrays[0].dtype)
            np.stack(arrays, out=out.numpy())
            return out
    elif all(t.shape == first.shape for t in tensors):
        return torch.stack(list(tensors), out=_shared_like(tensors, (len(tensors), *first.shape)))
    if any(t.dim() != first.dim() for t in tensors):
        ranks = sorted({t.dim() for t in tensors})
        raise ValueError(f"cannot pad-stack tensors of different ranks {ranks}")
    shape = [max(t.shape[d] for t in tensors) for d in range(first.dim())]
    if _plain_cpu(tensors):
        out = _new_batch((len(tensors), *shape), tensors[0].numpy().dtype, pad_value)
        out_np = out.numpy()
        for i, t in enumerate(tensors):
            out_np[(i, *(slice(0, s) for s in t.shape))] = t.numpy()
        return out
    out = _shared_like(tensors, (len(tensors), *shape))
    if out is None:
        out = first.new_full((len(tensors), *shape), pad_value)
    else:
        out.fill_(pad_value)
    for i, t in enumerate(tensors):
        out[(i, *(slice(0, s) for s in t.shape))] = t
    return out


def pad_stack_lengths(
    tensors: Sequence[torch.Tensor], pad_value: float = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`pad_stack` plus the length of each tensor's last dimension before padding (int64
    ``[B]``): audio ``[C, S_i]`` -> ``([B, C, max S], lengths)``.

    >>> x, n = pad_stack_lengths([torch.ones(1, 3), torch.ones(1, 5)])
    >>> x.shape, n.tolist(), x[0, 0].tolist()
    (torch.Size([2, 1, 5]), [3, 5], [1.0, 1.0, 1.0, 0.0, 0.0])
    """
    lengths = torch.tensor([t.shape[-1] for t in tensors], dtype=torch.int64)
    return pad_stack(tensors, pad_value), lengths


#: The torch dtypes whose CPU tensors ``.numpy()`` views (no bfloat16, complex32, float8...).
_NUMPY_DTYPES = frozenset(
    {
        torch.bool,
        *(torch.uint8, torch.uint16, torch.uint32, torch.uint64),
        *(torch.int8, torch.int16, torch.int32, torch.int64),
        *(torch.float16, torch.float32, torch.float64, torch.complex64, torch.complex128),
    }
)


def _plain_cpu(tensors: Sequence[torch.Tensor]) -> bool:
    """True where ``t.numpy()`` of every tensor is a view of it, all of one dtype: CPU, strided,
    a dtype numpy has, no autograd, no lazy conjugate or negative bit (``x.conj()``,
    ``x.conj().imag``). Strides are not checked: numpy views any strides torch makes."""
    dtype = tensors[0].dtype
    return dtype in _NUMPY_DTYPES and all(
        t.dtype == dtype
        and t.device.type == "cpu"
        and t.layout == torch.strided
        and not t.requires_grad
        and not t.is_conj()
        and not t.is_neg()
        for t in tensors
    )


def _new_batch(shape: Sequence[int], dtype: np.dtype, fill: float | None = None) -> torch.Tensor:
    """A CPU tensor of numpy ``dtype`` to collate into through ``.numpy()``: in shared memory in
    a DataLoader worker that sends it as it is (the hop to the main process then copies
    nothing); every element ``fill`` (as ``np.full`` sets it), or uninitialized."""
    if batch_memory.collate_into_shared():
        out = batch_memory.shared_empty(shape, torch.from_numpy(np.empty(0, dtype)).dtype)
        if fill is not None:
            np.copyto(out.numpy(), fill, casting="unsafe")
        return out
    return torch.from_numpy(np.empty(shape, dtype) if fill is None else np.full(shape, fill, dtype))


def _shared_like(tensors: Sequence[torch.Tensor], shape: Sequence[int]) -> torch.Tensor | None:
    """An uninitialized shared-memory tensor of the tensors' one dtype where collate builds in
    shared memory, for the torch paths (bfloat16, complex32) to write into; None elsewhere, and
    for tensors that need torch's own result (other devices, mixed dtypes, autograd)."""
    first = tensors[0]
    if not batch_memory.collate_into_shared() or not all(
        t.device.type == "cpu" and t.dtype == first.dtype and not t.requires_grad for t in tensors
    ):
        return None
    return batch_memory.shared_empty(shape, first.dtype)


def _pad_stack_arrays(arrays: Sequence[np.ndarray], pad_value: float = 0) -> torch.Tensor | None:
    """What ``pad_stack`` of the arrays as tensors gives, computed in numpy (rows of 1-D
    arrays placed with one mask, not one copy each); None unless every array has the same
    native numeric dtype and rank >= 1 (the tensor path handles the rest)."""
    first = arrays[0]
    dtype = first.dtype
    if dtype.kind not in "biufc" or not dtype.isnative or first.ndim == 0:
        return None
    shapes = [a.shape for a in arrays]
    if any(a.dtype != dtype for a in arrays) or any(len(s) != first.ndim for s in shapes):
        return None
    if shapes.count(first.shape) == len(shapes):
        out = _new_batch((len(arrays), *first.shape), dtype)
        np.stack(arrays, out=out.numpy())
        return out
    if first.ndim == 1:
        lengths = np.fromiter((s[0] for s in shapes), dtype=np.int64, count=len(shapes))
        out = _new_batch((len(arrays), int(lengths.max())), dtype, pad_value)
        out_np = out.numpy()
        out_np[np.arange(out_np.shape[1]) < lengths[:, None]] = np.concatenate(arrays)
        return out
    shape = [max(s[d] for s in shapes) for d in range(first.ndim)]
    out = _new_batch((len(arrays), *shape), dtype, pad_value)
    out_np = out.numpy()
    for i, a in enumerate(arrays):
        out_np[(i, *(slice(0, n) for n in a.shape))] = a
    return out


def collate(values: Sequence[Any]) -> Any:
    """One batch field from per-sample values.

    Tensors and numpy arrays -> one padded, stacked tensor; ints/floats/bools -> a 1-D tensor;
    dicts -> a dict of collated values; anything else (str, None, PIL images...) -> a list.
    """
    if not values:
        return []
    first = values[0]
    if all(isinstance(v, torch.Tensor) for v in values):
        return pad_stack(values)
    if all(isinstance(v, np.ndarray) for v in values) and first.dtype != object:
        out = _pad_stack_arrays(values)
        if out is not None:
            return out
        return pad_stack([torch.from_numpy(np.ascontiguousarray(v)) for v in values])
    if all(isinstance(v, numbers.Number) and not isinstance(v, complex) for v in values):
        return torch.tensor(values)
    if all(isinstance(v, dict) for v in values) and all(v.keys() == first.keys() for v in values):
        return {k: collate([v[k] for v in values]) for k in first}
    return list(values)


def collate_samples(samples: Sequence[Any]) -> Any:
    """Collate samples of one dataclass type into one instance of that type (Energon's default
    batch): each field holds the collated values; ``__key__`` etc. become lists."""
    first = samples[0]
    if dataclasses.is_dataclass(first) and all(type(s) is type(first) for s in samples):
        fields = {}
        for f in dataclasses.fields(first):
            if not f.init:
                continue
            values = [getattr(s, f.name) for s in samples]
            fields[f.name] = list(values) if f.name.startswith("__") else collate(values)
        return type(first)(**fields)
    if all(isinstance(s, dict) for s in samples):
        return collate(list(samples))
    return list(samples)
