"""An ``encode_batch`` written as a generator (Energon's guide form): each batch it yields is
delivered as a batch of its own, and a snapshot between two batches of one planned batch
resumes exactly there. The expected batches are the real Energon 7.4's on 35 samples in batches
of 5 (no workers), the script's import changed only."""

from __future__ import annotations

import pytest

from fpipe.energon import DefaultTaskEncoder, WorkerConfig, get_loader, get_val_dataset
from tests.distributed.helpers import make_text_dataset


class Split(DefaultTaskEncoder):
    def encode_batch(self, batch):
        keys = list(batch.__key__)
        for i in range(0, len(keys), 2):
            yield {"keys": keys[i : i + 2]}


def _energon_batches() -> list[list[int]]:
    """Energon's: each batch of 5 split into 2, 2, 1."""
    out = []
    for lo in range(0, 35, 5):
        out += [[lo, lo + 1], [lo + 2, lo + 3], [lo + 4]]
    return out


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("genbatch") / "v"
    make_text_dataset(root, shards=5, per_shard=7)
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    return get_val_dataset(
        root, split_part="train", batch_size=5, worker_config=wc, task_encoder=Split()
    )


def _numbers(batches) -> list[list[int]]:
    return [[int(k[-2:]) for k in b["keys"]] for b in batches]


def test_each_yielded_batch_is_delivered(dataset):
    loader = get_loader(dataset, num_workers=0)
    assert len(loader) == 7  # Energon's: the planned batches
    assert _numbers(loader) == _energon_batches()
    # any number of workers: the same batches
    threads = get_loader(dataset, num_workers=2, worker_mode="thread")
    assert _numbers(threads) == _energon_batches()


@pytest.mark.parametrize("cut", [1, 2, 4])
def test_restore_between_batches_of_one_recipe(dataset, cut):
    loader = get_loader(dataset, num_workers=0)
    it = iter(loader)
    head = [next(it) for _ in range(cut)]
    state = loader.state_dict()
    fresh = get_loader(dataset, num_workers=0)
    fresh.load_state_dict(state)
    assert _numbers(head) + _numbers(fresh) == _energon_batches()
