"""Energon's ``MapDataset`` / ``BatchDataset`` over the dataset of a factory
(``get_dataset_from_config(...).build()``), as Energon 7.4's test_dataset.py chains them: the
dataset is built again with the map as a task-encoder step and the batch size in the plan, so
it stays one plan (the same batches for any number of workers)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fpipe.core.errors import ConfigError
from fpipe.energon import (
    BatchDataset,
    CaptioningSample,
    MapDataset,
    WorkerConfig,
    generic_batch,
    get_dataset_from_config,
    get_loader,
    get_val_dataset,
)
from tests.storage.helpers import make_energon_dataset

WC = WorkerConfig(rank=0, world_size=1, num_workers=0)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("mapbatch")
    make_energon_dataset(root, shards=2, per_shard=5)  # CaptioningSample: jpg + txt
    return root


def caption_bytes(x):
    """The caption as a uint8 tensor of its bytes (Energon's test maps the samples so)."""
    return CaptioningSample(
        __key__=x.__key__,
        __restore_key__=x.__restore_key__,
        __subflavors__=x.__subflavors__,
        image=x.image,
        caption=torch.tensor(np.frombuffer(x.caption.encode(), dtype=np.uint8)),
    )


def _factory(folder, training=False):
    return get_dataset_from_config(
        folder, split_part="train", training=training, worker_config=WC,
        sample_type=CaptioningSample,
    )  # fmt: skip


def test_map_then_batch_as_energon_chains_them(folder):
    factory = _factory(folder)
    plain = [s.caption for s in get_loader(factory.build())]
    mapped = MapDataset(factory.build(), caption_bytes, worker_config=WC)
    assert len(mapped) == 10
    samples = list(get_loader(mapped))
    assert [bytes(s.caption.numpy()).decode() for s in samples] == plain
    assert samples[0].image.dtype == torch.float32  # Energon's factories decode torchrgb
    assert float(samples[0].image.max()) <= 1.0
    batched = BatchDataset(mapped, batch_size=4, batcher=generic_batch, worker_config=WC)
    assert len(batched) == 3
    batches = list(get_loader(batched))
    assert [b.image.shape[0] for b in batches] == [4, 4, 2]
    got = [bytes(row.numpy()).rstrip(b"\0").decode() for b in batches for row in b.caption]
    assert got == plain  # captions padded with zeros to the longest of the batch
    # a map over a BatchDataset maps the batches
    counted = MapDataset(batched, lambda b: len(b.__key__), worker_config=WC)
    assert list(get_loader(counted)) == [4, 4, 2]


def test_the_same_batches_with_workers(folder):
    mapped = MapDataset(_factory(folder).build(), caption_bytes, worker_config=WC)
    batched = BatchDataset(mapped, batch_size=3, batcher=generic_batch, worker_config=WC)
    one = [b.__key__ for b in get_loader(batched, num_workers=0)]
    two = [b.__key__ for b in get_loader(batched, num_workers=2)]
    assert one == two and [len(k) for k in one] == [3, 3, 3, 1]


def test_training_batches_and_refusals(folder):
    train = BatchDataset(_factory(folder, training=True).build(), batch_size=4,
                         batcher=generic_batch, drop_last=True, worker_config=WC)  # fmt: skip
    keys = [k for _, b in zip(range(5), get_loader(train)) for k in b.__key__]
    assert len(keys) == 20 and len(set(keys[:10])) == 10  # one epoch, then the next
    with pytest.raises(ConfigError, match="wraps the dataset of a factory"):
        MapDataset(get_val_dataset(folder, split_part="train", batch_size=2), caption_bytes)
    batched = BatchDataset(_factory(folder).build(), batch_size=2, batcher=generic_batch)
    with pytest.raises(ConfigError, match="wraps a dataset of single samples"):
        BatchDataset(batched, batch_size=2, batcher=generic_batch)
    with pytest.raises(ConfigError, match="validation pass keeps every sample"):
        BatchDataset(_factory(folder).build(), batch_size=3, batcher=generic_batch,
                     drop_last=True)  # fmt: skip
