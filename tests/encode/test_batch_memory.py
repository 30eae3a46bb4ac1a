"""collate in a DataLoader worker that sends the batch as collated: the batch is built in shared
memory, with the values, dtype and shape it has anywhere else; elsewhere, in ordinary memory."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.utils.data

from fpipe.encode import batch_memory
from fpipe.encode._collate import collate, collate_samples, pad_stack

_RNG = np.random.default_rng(0)


def _arrays(dtype, shapes):
    return [_RNG.integers(0, 9, size=s).astype(dtype) for s in shapes]


def _tensors(dtype, shapes, requires_grad=False):
    made = [torch.from_numpy(_RNG.integers(0, 9, size=s)).to(dtype) for s in shapes]
    return [t.requires_grad_(requires_grad) for t in made]


@dataclasses.dataclass
class _Sample:
    __key__: str
    image: torch.Tensor
    tokens: np.ndarray
    caption: str


CASES = {
    "images uint8": lambda: collate(_tensors(torch.uint8, [(3, 8, 8)] * 4)),
    # over batch_memory's populate threshold: its pages mapped in one call first
    "images uint8 96 KiB": lambda: collate(_tensors(torch.uint8, [(3, 64, 64)] * 8)),
    "ragged tensors float32": lambda: collate(_tensors(torch.float32, [(2, 3), (1, 4)])),
    "pad value": lambda: pad_stack(_tensors(torch.int64, [(2,), (4,)]), pad_value=-1),
    "0-d tensors": lambda: collate(_tensors(torch.int32, [(), ()])),
    "bfloat16 equal": lambda: collate(_tensors(torch.bfloat16, [(2, 3)] * 3)),
    "bfloat16 ragged": lambda: pad_stack(_tensors(torch.bfloat16, [(2,), (3,)]), pad_value=7),
    "mixed dtypes": lambda: pad_stack([torch.ones(2, dtype=torch.int32), torch.ones(3)]),
    "autograd": lambda: pad_stack(_tensors(torch.float32, [(2,), (2,)], requires_grad=True)),
    "conj ragged": lambda: pad_stack([t.conj() for t in _tensors(torch.complex64, [(2,), (3,)])]),
    "arrays equal": lambda: collate(_arrays(np.uint8, [(4, 5)] * 3)),
    "arrays ragged 1-D": lambda: collate(_arrays(np.int32, [(3,), (0,), (5,)])),
    "arrays ragged 2-D bool": lambda: collate(_arrays(bool, [(2, 3), (1, 4)])),
    "arrays complex64": lambda: collate(_arrays(np.complex64, [(2,), (3,)])),
    "samples": lambda: collate_samples(
        [
            _Sample(f"k{i}", torch.full((3, 2, 2), i, dtype=torch.uint8), np.arange(i + 1), "c")
            for i in range(3)
        ]
    ),
}


def _tensors_of(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if dataclasses.is_dataclass(value):
        return [t for f in dataclasses.fields(value) for t in _tensors_of(getattr(value, f.name))]
    return []


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_worker_path_gives_the_same_batch(case, monkeypatch):
    seed = _RNG.bit_generator.state
    want = CASES[case]()
    _RNG.bit_generator.state = seed
    monkeypatch.setattr(batch_memory, "in_worker_process", lambda: True)
    with batch_memory.sent_as_collated():
        got = CASES[case]()
    pairs = list(zip(_tensors_of(got), _tensors_of(want), strict=True))
    assert pairs or isinstance(got, torch.Tensor)
    for g, w in pairs:
        assert g.dtype == w.dtype and g.shape == w.shape and torch.equal(g, w)
        assert g.requires_grad == w.requires_grad
        # torch's own result where it must be (autograd, mixed dtypes); shared everywhere else
        assert g.is_shared() == (case not in ("autograd", "mixed dtypes"))
        assert not w.is_shared()


def test_a_worker_collates_in_ordinary_memory_unless_the_batch_is_sent_as_collated(monkeypatch):
    monkeypatch.setattr(batch_memory, "in_worker_process", lambda: True)
    images = _tensors(torch.uint8, [(3, 8, 8)] * 4)
    assert not collate(images).is_shared()  # a hook may replace it: a segment would be wasted
    with batch_memory.sent_as_collated(False):
        assert not collate(images).is_shared()
    with batch_memory.sent_as_collated():
        assert collate(images).is_shared()


class _Batches(torch.utils.data.Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        images = [torch.full((3, 4, 4), i + k, dtype=torch.uint8) for k in range(4)]
        plain = collate(images)  # a user's own call: the caller may replace the tensor
        with batch_memory.sent_as_collated():
            batch = collate(images)
        return batch, batch.is_shared(), plain.is_shared(), batch_memory.in_worker_process()


def test_a_batch_built_in_a_worker_is_already_shared():
    loader = torch.utils.data.DataLoader(_Batches(), batch_size=None, num_workers=1)
    for i, (batch, shared, plain_shared, in_worker) in enumerate(loader):
        assert in_worker and shared  # so pickling sends the handle, not a second copy
        assert not plain_shared
        with batch_memory.sent_as_collated():  # the main process: ordinary memory
            want = collate([torch.full((3, 4, 4), i + k, dtype=torch.uint8) for k in range(4)])
        assert torch.equal(batch, want) and not want.is_shared()
