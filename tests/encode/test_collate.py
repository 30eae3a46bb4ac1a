"""collate and pad_stack: numpy arrays padded in numpy give the same tensor as padding them as
tensors; what numpy cannot view goes through torch; errors say what is wrong and where."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from fpipe.encode import batch_memory
from fpipe.encode._collate import collate, collate_samples, pad_stack

_RNG = np.random.default_rng(0)


def _arrays(dtype, shapes):
    return [(_RNG.integers(1, 9, size=s)).astype(dtype) for s in shapes]


@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool", "float16", "float64", "complex64"])
@pytest.mark.parametrize(
    "shapes",
    [
        [(3,), (5,), (0,), (5,)],  # ragged 1-D (token ids), an empty one
        [(4,), (4,)],  # equal: stacked
        [(2, 3), (1, 4), (2, 2)],  # ragged 2-D
        [(1, 2, 3), (2, 1, 1)],
    ],
)
def test_numpy_arrays_collate_like_their_tensors(dtype, shapes):
    arrays = _arrays(dtype, shapes)
    got = collate(arrays)
    want = pad_stack([torch.from_numpy(np.ascontiguousarray(a)) for a in arrays])
    assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)


@pytest.mark.parametrize(
    "arrays",
    [
        [np.array(3, np.int32), np.array(4, np.int32)],  # 0-d: become [B, 1] as before
        [np.arange(3, dtype=np.int32), np.arange(2, dtype=np.int64)],  # mixed dtypes
        [np.arange(3, dtype=">i4"), np.arange(5, dtype=">i4")],  # non-native byte order
        [np.arange(6, dtype=np.int32)[::2], np.arange(2, dtype=np.int32)],  # strided view
    ],
)
def test_other_arrays_keep_their_result(arrays):
    try:
        want = pad_stack([torch.from_numpy(np.ascontiguousarray(a)) for a in arrays])
    except (TypeError, ValueError) as e:  # what torch refuses, collate refuses too
        with pytest.raises(type(e)):
            collate(arrays)
        return
    got = collate(arrays)
    assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)


def test_ranks_differ_is_an_error():
    with pytest.raises(ValueError, match="different ranks"):
        collate([np.zeros(3, np.int32), np.zeros((1, 3), np.int32)])


_COMPLEX = torch.tensor([[1 + 2j, 3 - 4j], [5 + 6j, -7 - 8j]])


@pytest.mark.parametrize(
    "tensors",
    [
        [_COMPLEX.conj(), _COMPLEX],  # conjugate bit: x.conj() is a lazy view
        [_COMPLEX.conj(), _COMPLEX[:1].conj()],  # ragged
        [_COMPLEX.conj().imag, _COMPLEX.imag],  # negative bit: .imag of a conjugate view
        [_COMPLEX.conj().imag[:1], _COMPLEX.imag],
        [torch.ones(2, 3).to(torch.float8_e4m3fn), torch.ones(1, 3).to(torch.float8_e4m3fn)],
        [_COMPLEX[0].conj(), _COMPLEX[1][:1].conj()],  # rows (token-id sized)
        [_COMPLEX[0].conj().imag, _COMPLEX[1].imag[:1]],
    ],
    ids=["conj", "conj ragged", "neg", "neg ragged", "float8 ragged", "conj rows", "neg rows"],
)
def test_tensors_numpy_cannot_view_are_stacked_by_torch(tensors):
    got = pad_stack(tensors)
    want = _padded_by_hand(tensors, 0)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert not got.is_conj() and not got.is_neg()
    assert torch.equal(got.flatten().view(torch.uint8), want.flatten().view(torch.uint8))  # bits


def _padded_by_hand(tensors, pad_value):
    shape = [max(n) for n in zip(*(t.shape for t in tensors), strict=True)]
    want = torch.full((len(tensors), *shape), pad_value, dtype=tensors[0].dtype)
    for i, t in enumerate(tensors):
        want[(i, *(slice(0, n) for n in t.shape))] = t.resolve_conj().resolve_neg()
    return want


@pytest.mark.parametrize("dtype", [torch.int32, torch.bool, torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "shapes", [[(3,), (5,), (0,)], [(2, 3), (1, 4)], [(4,), (4,)], [(), ()]], ids=str
)
def test_pad_stack_of_tensors_is_padding_by_hand(dtype, shapes):
    tensors = [torch.from_numpy(a).to(dtype) for a in _arrays("int64", shapes)]
    tensors[0] = tensors[0].t() if tensors[0].dim() == 2 else tensors[0]  # a strided view
    for pad_value in (0, 1):
        got, want = pad_stack(tensors, pad_value), _padded_by_hand(tensors, pad_value)
        assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)


@pytest.mark.parametrize(
    "rows",
    [
        lambda b: [b[::2], b[:3], b[5:5]],  # a strided view, an empty row
        lambda b: [b[:4], b[4:8]],  # equal lengths
        lambda b: [torch.arange(40_000, dtype=b.dtype), b[:3]],  # a row torch copies in parallel
    ],
    ids=["ragged", "equal", "long"],
)
def test_rows_of_tensors_are_padded_as_by_hand(rows):
    tensors = rows(torch.arange(12, dtype=torch.int32))
    for pad_value in (0, 7):
        got, want = pad_stack(tensors, pad_value), _padded_by_hand(tensors, pad_value)
        assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)


def test_rows_that_need_autograd_keep_it():
    rows = [torch.ones(2, requires_grad=True), torch.ones(3)]
    got = pad_stack(rows)
    assert got.requires_grad and got.tolist() == [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]


def test_sparse_tensors_are_stacked_by_torch(monkeypatch):
    sparse = [torch.tensor([0.0, 2.0]).to_sparse(), torch.tensor([3.0, 0.0]).to_sparse()]
    want = torch.stack(sparse)
    assert torch.equal(pad_stack(sparse).to_dense(), want.to_dense())
    monkeypatch.setattr(batch_memory, "in_worker_process", lambda: True)
    with batch_memory.sent_as_collated():  # not into a dense shared segment
        assert torch.equal(pad_stack(sparse).to_dense(), want.to_dense())


def test_pad_stack_of_nothing_is_a_value_error():
    with pytest.raises(ValueError, match="at least one tensor"):
        pad_stack([])


@dataclasses.dataclass
class _Sample:
    __key__: str
    tokens: np.ndarray


_OBJECT_LATER = [np.arange(3), np.array([1, None], dtype=object)]  # dtype=object after the first


def test_an_error_collating_a_dict_field_names_the_field():
    samples = [{"meta": {"tokens": a}, "n": 1} for a in _OBJECT_LATER]
    with pytest.raises(TypeError, match=r"batch field 'meta\.tokens': can't convert np\.ndarray"):
        collate(samples)
    with pytest.raises(ValueError, match=r"batch field 'x': cannot pad-stack .* different ranks"):
        collate_samples([{"x": torch.zeros(2)}, {"x": torch.zeros((1, 2))}])


def test_an_error_collating_a_sample_field_names_the_field():
    samples = [_Sample(f"k{i}", a) for i, a in enumerate([torch.zeros(2), torch.zeros((1, 2))])]
    with pytest.raises(ValueError, match="batch field 'tokens': cannot pad-stack"):
        collate_samples(samples)
    # numpy arrays (and numbers) of a sample batch stay a list, as Energon's generic_batch
    arrays = [_Sample(f"k{i}", a) for i, a in enumerate(_OBJECT_LATER)]
    got = collate_samples(arrays).tokens
    assert isinstance(got, list) and all(g is a for g, a in zip(got, _OBJECT_LATER, strict=True))
