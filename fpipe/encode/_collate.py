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
    if not tensors:
        raise ValueError("pad_stack needs at least one tensor, got an empty sequence")
    first = tensors[0]
    rows = _short_rows(tensors, pad_value)
    if rows is not None:
        return rows
    if _numpy_viewable(tensors):
        # numpy does the copy on this thread: torch's intra-op pool can stall for milliseconds
        # on a busy machine, which dominates small batches at num_workers=0.
        out = _pad_stack_numpy([t.numpy() for t in tensors], pad_value)
        if out is not None:
            return out
    elif all(t.shape == first.shape for t in tensors):
        return torch.stack(list(tensors), out=_shared_like(tensors, (len(tensors), *first.shape)))
    ranks = {t.dim() for t in tensors}
    if len(ranks) > 1:
        raise ValueError(f"cannot pad-stack tensors of different ranks {sorted(ranks)}")
    shape = list(map(max, zip(*(t.shape for t in tensors), strict=True)))
    out = _shared_like(tensors, (len(tensors), *shape))
    if out is None:
        out = first.new_full((len(tensors), *shape), pad_value)
    else:
        out.fill_(pad_value)
    _copy_padded(out, tensors)
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


def _numpy_viewable(tensors: Sequence[torch.Tensor]) -> bool:
    """True where ``t.numpy()`` of every tensor is a view of it, all of one dtype: CPU, strided,
    a dtype numpy has, no autograd, no lazy conjugate or negative bit (``x.conj()``,
    ``x.conj().imag``). Strides are not checked: numpy views any strides torch makes."""
    dtype = tensors[0].dtype
    return dtype in _NUMPY_DTYPES and all(
        t.dtype == dtype
        and t.is_cpu
        and t.layout == torch.strided
        and not t.requires_grad
        and not t.is_conj()
        and not t.is_neg()
        for t in tensors
    )


#: Elements of one tensor below which torch copies it on the calling thread (ATen's
#: ``GRAIN_SIZE``): ``torch.cat`` of such tensors never waits on the intra-op pool.
_SERIAL_NUMEL = 32768


def _short_rows(tensors: Sequence[torch.Tensor], pad_value: float) -> torch.Tensor | None:
    """:func:`pad_stack` of 1-D tensors of one dtype numpy has, each shorter than
    :data:`_SERIAL_NUMEL` (token ids): one ``torch.cat`` copies them all (a ``.numpy()`` view
    of each costs more than its copy), and one mask places the rows. None for other tensors,
    and where the concatenation is not what :func:`_numpy_viewable` admits (another device,
    sparse, autograd, a lazy conjugate or negative bit): the general path decides."""
    dtype = tensors[0].dtype
    if dtype not in _NUMPY_DTYPES:
        return None
    lengths = []
    for t in tensors:  # per row: two attributes and its length, not the six checks of a view
        if t.dtype != dtype or t.dim() != 1:
            return None
        lengths.append(t.shape[0])
    longest = max(lengths)
    if longest >= _SERIAL_NUMEL:
        return None
    try:
        cat = torch.cat(list(tensors))
    except RuntimeError:  # devices differ: the general path says so
        return None
    if not (
        cat.is_cpu
        and cat.layout == torch.strided
        and not cat.requires_grad
        and not cat.is_conj()
        and not cat.is_neg()
    ):
        return None
    flat = cat.numpy()
    n = len(lengths)
    if min(lengths) == longest:
        out = _new_batch((n, longest), flat.dtype)
        out.numpy()[...] = flat.reshape(n, longest)
        return out
    out = _new_batch((n, longest), flat.dtype, pad_value)
    rows = np.fromiter(lengths, dtype=np.int64, count=n)
    out.numpy()[np.arange(longest) < rows[:, None]] = flat
    return out


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
    shared memory, for the torch paths (dtypes numpy lacks, conjugate views) to write into; None
    elsewhere, and for tensors that need torch's own result (other devices, sparse, mixed
    dtypes, autograd)."""
    first = tensors[0]
    if not batch_memory.collate_into_shared() or not all(
        t.is_cpu and t.layout == torch.strided and t.dtype == first.dtype and not t.requires_grad
        for t in tensors
    ):
        return None
    return batch_memory.shared_empty(shape, first.dtype)


def _numpy_stackable(arrays: Sequence[np.ndarray]) -> bool:
    """True where :func:`_pad_stack_numpy` gives what ``pad_stack`` of the arrays as tensors
    gives (or None): one native numeric dtype, and not 0-d (``np.ascontiguousarray`` makes a
    0-d array 1-D on the tensor path)."""
    dtype = arrays[0].dtype
    if dtype.kind not in "biufc" or not dtype.isnative or arrays[0].ndim == 0:
        return False
    return all(a.dtype == dtype for a in arrays)


def _pad_stack_numpy(arrays: Sequence[np.ndarray], pad_value: float) -> torch.Tensor | None:
    """:func:`pad_stack` computed in numpy, for arrays of one dtype: the views of tensors
    :func:`_numpy_viewable` admits, or arrays :func:`_numpy_stackable` admits. Rows of 1-D
    arrays are placed with one mask, not one copy each. None where the ranks differ."""
    first = arrays[0]
    shapes = [a.shape for a in arrays]
    if shapes.count(first.shape) == len(shapes):
        out = _new_batch((len(arrays), *first.shape), first.dtype)
        np.stack(arrays, out=out.numpy())
        return out
    if any(len(s) != first.ndim for s in shapes):
        return None
    if first.ndim == 1:
        lengths = np.fromiter((s[0] for s in shapes), dtype=np.int64, count=len(shapes))
        out = _new_batch((len(arrays), int(lengths.max())), first.dtype, pad_value)
        out_np = out.numpy()
        out_np[np.arange(out_np.shape[1]) < lengths[:, None]] = np.concatenate(arrays)
        return out
    shape = list(map(max, zip(*shapes, strict=True)))
    out = _new_batch((len(arrays), *shape), first.dtype, pad_value)
    _copy_padded(out.numpy(), arrays)
    return out


def _copy_padded(out: Any, parts: Sequence[Any]) -> None:
    """``out[i]``'s leading corner = ``parts[i]``, for torch tensors and numpy arrays alike."""
    for i, part in enumerate(parts):
        out[(i, *(slice(0, n) for n in part.shape))] = part


def collate(values: Sequence[Any]) -> Any:
    """One batch field from per-sample values.

    Tensors and numpy arrays -> one padded, stacked tensor; ints/floats/bools -> a 1-D tensor;
    dicts -> a dict of collated values; anything else (str, None, PIL images...) -> a list.
    An error collating a value of dicts names its field (``batch field 'meta.tokens': ...``).
    """
    return _collate(values, "")


#: The errors stacking raises (torch, numpy, pad_stack) that get the field's name prepended.
_NAMED_ERRORS = (TypeError, ValueError, RuntimeError)


def _collate(values: Sequence[Any], field: str) -> Any:
    """:func:`collate` of the values of ``field`` (a dotted path; "" where unknown)."""
    if not values:
        return []
    try:
        out = _stacked(values)
    except _NAMED_ERRORS as e:
        if not field or type(e) not in _NAMED_ERRORS:  # a subclass may take other arguments
            raise
        raise type(e)(f"batch field {field!r}: {e}") from e
    if out is not None:
        return out
    first = values[0]
    if all(isinstance(v, dict) for v in values) and all(v.keys() == first.keys() for v in values):
        return {
            k: _collate([v[k] for v in values], f"{field}.{k}" if field else str(k)) for k in first
        }
    return list(values)


def _stacked(values: Sequence[Any]) -> torch.Tensor | None:
    """Tensors, numpy arrays or numbers as one tensor; None for other values."""
    first = values[0]
    if all(isinstance(v, torch.Tensor) for v in values):
        return pad_stack(values)
    if all(isinstance(v, np.ndarray) for v in values) and first.dtype != object:
        out = _pad_stack_numpy(values, 0) if _numpy_stackable(values) else None
        if out is not None:
            return out
        return pad_stack([torch.from_numpy(np.ascontiguousarray(v)) for v in values])
    if all(isinstance(v, numbers.Number) and not isinstance(v, complex) for v in values):
        return torch.tensor(values)
    return None


def collate_samples(samples: Sequence[Any]) -> Any:
    """Collate samples of one dataclass type into one instance of that type (Energon's default
    batch, ``generic_batch`` on each field): tensors are padded and stacked, dicts collated key
    by key, dataclasses by their ``from_samples`` (else field by field), and everything else
    (numbers, strings, numpy arrays, None) becomes a list, as Energon delivers it;
    ``__key__`` etc. become lists. Dict samples are collated key by key the same way. An
    error collating a field names it. (:func:`collate` stacks numbers and arrays too.)"""
    first = samples[0]
    if dataclasses.is_dataclass(first) and all(type(s) is type(first) for s in samples):
        fields = {}
        for f in dataclasses.fields(first):
            if not f.init:
                continue
            values = [getattr(s, f.name) for s in samples]
            fields[f.name] = (
                list(values) if f.name.startswith("__") else _batch_field(values, f.name)
            )
        return type(first)(**fields)
    if all(isinstance(s, dict) for s in samples):
        return _batch_field(list(samples), "")
    return list(samples)


def _batch_field(values: Sequence[Any], field: str) -> Any:
    """Energon's ``generic_batch`` of one field's values (see :func:`collate_samples`), with
    fpipe's :func:`pad_stack` for tensors."""
    first = values[0]
    if all(isinstance(v, torch.Tensor) for v in values):
        return _collate(values, field)
    if all(isinstance(v, dict) for v in values) and all(v.keys() == first.keys() for v in values):
        return {
            k: _batch_field([v[k] for v in values], f"{field}.{k}" if field else str(k))
            for k in first
        }
    if (
        dataclasses.is_dataclass(first)
        and not isinstance(first, type)
        and all(type(v) is type(first) for v in values)
    ):
        if hasattr(first, "from_samples"):
            return type(first).from_samples(list(values))
        return collate_samples(values)
    return list(values)
