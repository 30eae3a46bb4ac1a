"""A validation loader's batches on a rank as Energon 7.4 gives them: each of the rank's workers
batches its own part and the loader takes one batch of each in turn (the numbers below are the
real Energon's on 35 samples in 5 shards of 7, Energon's guide code with only the import
changed). fpipe's own ``distribution="global"`` keeps its global batches."""

from __future__ import annotations

import pytest

from fpipe.energon import WorkerConfig, get_loader, get_val_dataset
from fpipe.plan.worker_batches import worker_batch_layout
from tests.distributed.helpers import make_text_dataset


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("valworkers") / "v"
    make_text_dataset(root, shards=5, per_shard=7)  # keys 0..34 in order
    return root


# (rank, world_size, num_workers, batch_size) -> Energon's batch sizes on that rank
ENERGON = {
    (0, 1, 4, 8): [8, 8, 8, 8, 1, 1, 1],
    (0, 1, 0, 8): [8, 8, 8, 8, 3],
    (1, 2, 0, 8): [8, 8, 1],
    (0, 2, 2, 8): [8, 8, 1, 1],
    (0, 32, 0, 1): [1, 1],
    (0, 1, 2, 5): [5, 5, 5, 5, 5, 5, 3, 2],
    (2, 3, 2, 4): [4, 4, 2, 1],
}


@pytest.mark.parametrize("setup", list(ENERGON))
def test_val_length_and_batches_are_energons(root, setup):
    rank, world, workers, bs = setup
    wc = WorkerConfig(rank=rank, world_size=world, num_workers=workers)
    ds = get_val_dataset(root, split_part="train", batch_size=bs, worker_config=wc)
    loader = get_loader(ds, num_workers=0)
    sizes = [len(b.__key__) for b in loader]
    assert (len(loader), sizes) == (len(ENERGON[setup]), ENERGON[setup])


def test_energons_sample_order_with_four_workers(root):
    wc = WorkerConfig(rank=0, world_size=1, num_workers=4)
    ds = get_val_dataset(root, split_part="train", batch_size=8, worker_config=wc)
    batches = [list(b.__key__) for b in get_loader(ds, num_workers=0)]
    # Energon's workers read 0-8, 9-17, 18-26, 27-34; their second batches are 8, 17, 26
    assert [int(b[0][-2:]) for b in batches] == [0, 9, 18, 27, 8, 17, 26]
    # the loader's own workers do not change the batches
    assert [list(b.__key__) for b in get_loader(ds, num_workers=2)] == batches


def test_fpipes_global_distribution_keeps_its_length(root):
    wc = WorkerConfig(rank=0, world_size=1, num_workers=4)
    ds = get_val_dataset(root, split_part="train", batch_size=8, worker_config=wc,
                         distribution="global")  # fmt: skip
    assert len(ds) == 5


def test_layout_covers_every_sample_once_over_the_ranks():
    seen = []
    for rank in range(3):
        order, sizes = worker_batch_layout(55, rank=rank, world_size=3, workers=5, batch_size=4)
        assert sum(sizes) == len(order)
        seen.extend(order.tolist())
    assert sorted(seen) == list(range(55))
