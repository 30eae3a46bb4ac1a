"""Energon's MixBatchDataset: its tests test_mixing_homogeneous / test_mixing_heterogeneous as
written (scaled down), plus fpipe's promises: the same batches for any number of workers, and
an exact resume in the middle of the stream."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Union

import pytest
import torch

from fpipe.core.errors import ConfigError
from fpipe.energon import (
    Batch,
    MixBatchDataset,
    TaskEncoder,
    WorkerConfig,
    get_loader,
    get_savable_loader,
    get_train_dataset,
    homogeneous_concat_mix,
)
from tests.storage.energon741 import make_energon741_dataset

no_worker_config = WorkerConfig(rank=0, world_size=1, num_workers=0)


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix") / "ds"
    make_energon741_dataset(root, shards=4, per_shard=4, split_ratio=(1, 0, 0))
    return str(root)


# Energon's test classes with Energon 7.4's batch fields (its Batch has no __subflavor__ but
# __sources__), at module level so that worker processes can unpickle the batches.
@dataclass
class TestBatch(Batch):
    __test__ = False  # not a pytest class
    __key__: list[str]
    __restore_key__: tuple[Union[str, int], ...]
    __subflavors__: list[dict[str, Any]]
    __sources__: Any
    image: torch.Tensor
    caption: list[str]
    source: int


@dataclass
class TestBatch2(TestBatch):
    __test__ = False


class TestTaskEncoder(TaskEncoder):
    __test__ = False

    def __init__(self, source: int, batch_cls: type = TestBatch):
        self.source = source
        self.batch_cls = batch_cls

    def encode_batch(self, batch):
        return self.batch_cls(**dataclasses.asdict(batch), source=self.source)


def _mix(path, worker_config=no_worker_config, **kwargs):
    def part(source, batch_cls):
        return get_train_dataset(
            path,
            batch_size=1,
            worker_config=worker_config,
            task_encoder=TestTaskEncoder(source=source, batch_cls=batch_cls),
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
        )

    classes = kwargs.pop("classes", (TestBatch, TestBatch))
    return MixBatchDataset(
        (part(0, classes[0]), 2),
        (part(1, classes[1]), 8),
        batch_size=10,
        worker_config=worker_config,
        **kwargs,
    )


def test_mixing_homogeneous(dataset_path):
    loader = get_loader(
        _mix(dataset_path, batch_mix_fn=homogeneous_concat_mix), worker_config=no_worker_config
    )
    source_hist = {0: 0, 1: 0}
    for _, sample in zip(range(50), loader):
        assert isinstance(sample, TestBatch)
        assert sample.image.shape[:2] == (10, 3)
        assert len(sample.__key__) == 10 and len(sample.source) == 10
        for source in sample.source:
            source_hist[source] += 1
    assert 60 <= source_hist[0] <= 140  # weight 2 of 10 of 500 draws
    assert 360 <= source_hist[1] <= 440


def test_mixing_heterogeneous(dataset_path):
    loader = get_loader(
        _mix(dataset_path, classes=(TestBatch, TestBatch2)), worker_config=no_worker_config
    )
    source_hist = {0: 0, 1: 0}
    for _, samples in zip(range(50), loader):
        assert len(samples) == 10
        for sample in samples:
            assert sample.image.shape[:2] == (1, 3)
            assert type(sample) is (TestBatch if sample.source == 0 else TestBatch2)
            source_hist[sample.source] += 1
    assert 60 <= source_hist[0] <= 140
    assert 360 <= source_hist[1] <= 440
    mixed = _mix(dataset_path, classes=(TestBatch, TestBatch2), batch_mix_fn=homogeneous_concat_mix)
    with pytest.raises(ConfigError, match="different types"):
        next(iter(get_loader(mixed)))


def _view(batch):
    return list(batch.__key__), list(batch.source), batch.image


def _same(a, b):
    assert len(a) == len(b)
    for (ka, sa, ia), (kb, sb, ib) in zip(a, b):
        assert (ka, sa) == (kb, sb) and torch.equal(ia, ib)


def test_mixing_same_for_any_workers_and_exact_resume(dataset_path):
    ds = _mix(dataset_path, batch_mix_fn=homogeneous_concat_mix)
    assert len(ds) == 4  # ceil((16 + 16) / 10), Energon's length
    plain = [_view(b) for _, b in zip(range(8), get_loader(ds))]
    assert {s for _, sources, _ in plain for s in sources} == {0, 1}
    two = WorkerConfig(rank=0, world_size=1, num_workers=2)
    workers = get_loader(_mix(dataset_path, two, batch_mix_fn=homogeneous_concat_mix))
    _same([_view(b) for _, b in zip(range(8), workers)], plain)
    loader = get_savable_loader(ds)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.save_state_rank()
    again = get_savable_loader(_mix(dataset_path, batch_mix_fn=homogeneous_concat_mix))
    again.restore_state_rank(state)
    _same([_view(b) for _, b in zip(range(5), again)], plain[3:])


def test_mix_batch_dataset_checks_its_worker_config(dataset_path):
    other = WorkerConfig(rank=1, world_size=2, num_workers=0)
    with pytest.raises(ConfigError, match="worker_config"):
        MixBatchDataset(
            (get_train_dataset(dataset_path, batch_size=1, worker_config=no_worker_config), 1),
            batch_size=2,
            worker_config=other,
        )
