"""A Megatron-LM-style multimodal data provider, ported from Energon by its import line only.

It does what Megatron-LM's ``examples/multimodal/dataloader_provider.py`` does with Energon: a
training dataset (``virtual_epoch_length``, ``handler=``, ``image_decode="pil"``, the worker
config), every validation dataset of the metadataset (``get_val_datasets``), each wrapped in
``LimitDataset(RepeatDataset(...), length=eval_iters * num_microbatches,
reset_after_epoch=True)``, a savable training loader built with ``worker_config=`` and restored
from ``save_state_rank()``, one loader per validation dataset, and a cyclic iterator around
each. Only the import below names fpipe; the rest is written against Energon's API.
"""

from __future__ import annotations

import sys
import textwrap
import traceback

import pytest
from PIL import Image

from fpipe.energon import (  # was: from megatron.energon import (...)
    DefaultTaskEncoder,
    LimitDataset,
    RepeatDataset,
    WorkerConfig,
    get_loader,
    get_savable_loader,
    get_train_dataset,
    get_val_datasets,
)
from tests.storage.energon741 import make_energon741_dataset

MICRO_BATCH_SIZE, EVAL_ITERS, NUM_MICROBATCHES, NUM_WORKERS = 2, 3, 2, 2


def print_error_handler(exc, key, *args):
    """Megatron-LM's handler: report the failing sample and go on."""
    print(f"exception in the dataloader for sample {key}, skipped", file=sys.stderr)
    traceback.print_exception(exc)


class TaskEncoder(DefaultTaskEncoder):
    """Keeps the PIL images (image_decode="pil") and the captions."""

    def encode_sample(self, sample):
        assert isinstance(sample.image, Image.Image), type(sample.image)
        return sample


def datasets_provider(path, task_encoder, worker_config):
    train_dataset = get_train_dataset(
        path,
        batch_size=MICRO_BATCH_SIZE,
        task_encoder=task_encoder,
        virtual_epoch_length=1000,
        max_samples_per_sequence=100,
        shuffle_buffer_size=100,
        worker_config=worker_config,
        packing_buffer_size=None,
        handler=print_error_handler,
        image_decode="pil",
    )
    val_datasets = get_val_datasets(
        path,
        batch_size=MICRO_BATCH_SIZE,
        task_encoder=task_encoder,
        worker_config=worker_config,
        packing_buffer_size=None,
        handler=print_error_handler,
        image_decode="pil",
    )
    val_datasets_without_source_datasets = [
        LimitDataset(
            RepeatDataset(val_ds, worker_config=worker_config),
            length=EVAL_ITERS * NUM_MICROBATCHES,
            worker_config=worker_config,
            reset_after_epoch=True,
        )
        for val_ds, _src_ds in val_datasets
    ]
    return train_dataset, val_datasets_without_source_datasets, None


def cyclic_iter(loader):
    while True:
        yield from loader


def dataloaders_provider(path, state=None):
    worker_config = WorkerConfig(
        rank=0,
        world_size=1,
        num_workers=NUM_WORKERS,
        worker_debug_path=None,
        worker_log_level=0,
    )
    train_ds, valid_ds, _ = datasets_provider(path, TaskEncoder(), worker_config)
    train_loader = get_savable_loader(train_ds, worker_config=worker_config)
    if state is not None:
        train_loader.restore_state_rank(state)
    valid_loaders = [get_loader(ds, worker_config=worker_config) for ds in valid_ds]
    return train_loader, valid_loaders


@pytest.fixture(scope="module")
def metadataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("megatron")
    for name in ("coco", "cc3m"):  # 10 shards of 3 samples: 8 for train, 1 val, 1 test
        make_energon741_dataset(root / name, shards=10, per_shard=3)
    path = root / "blend.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            __module__: megatron.energon
            __class__: MetadatasetV2
            splits:
              train:
                blend:
                  - {weight: 2, path: ./coco}
                  - {weight: 1, path: ./cc3m}
              val:
                blend:
                  - {path: ./coco}
                  - {path: ./cc3m, split_part: test}
            """
        )
    )
    return str(path)


def _keys(batch):
    return list(batch.__key__)


def test_provider_trains_validates_and_resumes(metadataset):
    train_loader, valid_loaders = dataloaders_provider(metadataset)
    it = iter(cyclic_iter(train_loader))
    first = [next(it) for _ in range(4)]
    assert all(isinstance(img, Image.Image) for b in first for img in b.image)
    assert all(len(b.__key__) == MICRO_BATCH_SIZE for b in first)
    state = train_loader.save_state_rank()
    rest = [_keys(next(it)) for _ in range(3)]
    resumed, _ = dataloaders_provider(metadataset, state)
    again = iter(cyclic_iter(resumed))
    assert [_keys(next(again)) for _ in range(3)] == rest  # exact resume

    assert len(valid_loaders) == 2  # one per validation dataset of the metadataset
    for loader in valid_loaders:
        # 3 samples per split, batches of 2: repeated, then cut at eval_iters * microbatches
        one = [_keys(b) for b in loader]
        assert len(one) == EVAL_ITERS * NUM_MICROBATCHES
        assert [_keys(b) for b in loader] == one  # reset_after_epoch: each pass starts over
