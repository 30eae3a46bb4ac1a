"""Energon's split of the data to ranks (Energon 7.4 test_jsonl_dataset
test_metadataset_multirank, test_metadataset_fewsamp test_too_few_samples): each dataset is
split over ``num_workers * world_size`` global workers, the leftover samples spread in Energon's
order, shifted by the samples of the datasets blended before it. Every sample is on one rank.
``fpipe.energon.get_train_dataset`` uses it with ``repeat=False``; ``distribution="energon"``
asks for it on a repeating stream."""

from __future__ import annotations

import textwrap
from collections import Counter

import pytest

import fpipe
from fpipe.energon import WorkerConfig, get_train_dataset
from fpipe.plan.worker_split import remainder_order, worker_range
from tests.distributed.helpers import batch_keys, make_text_dataset

PLAIN = dict(shuffle_buffer_size=None, max_samples_per_sequence=None)
#: Energon's rank lengths for 55 + 7 + 55 samples on 100 ranks (test_too_few_samples)
TWO = {0, 3, 6, 12, 18, 25, 31, 37, 43, 50, 56, 62, 68, 75, 81, 87, 93}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("ranksplit")
    make_text_dataset(root / "ds1", shards=5, per_shard=11)  # 55
    make_text_dataset(root / "ds2", shards=1, per_shard=7)  # 7
    make_text_dataset(root / "ds3", shards=5, per_shard=11)  # 55
    (root / "blend.yaml").write_text(
        textwrap.dedent(
            """\
            __module__: megatron.energon
            __class__: MetadatasetV2
            splits:
              train:
                blend:
                  - {weight: 1, path: ds1}
                  - {weight: 1, path: ds2}
                  - {weight: 1, path: ds3}
            """
        )
    )
    return root


def _keys(ds):
    with fpipe.get_loader(ds, num_workers=0) as loader:
        return [k for b in loader for k in batch_keys(b)]


def test_remainder_order_spreads_the_leftovers():
    assert remainder_order(16) == [0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15]
    assert sorted(remainder_order(15)) == list(range(15))


def test_55_samples_on_3_ranks_of_5_workers(root):
    lens, seen = [], Counter()
    for rank in range(3):
        wc = WorkerConfig(rank=rank, world_size=3, num_workers=5)
        ds = get_train_dataset(root / "ds1", worker_config=wc, batch_size=1, repeat=False,
                               **PLAIN)  # fmt: skip
        keys = _keys(ds)
        lens.append(len(ds))
        assert len(keys) == len(ds)
        seen.update(keys)
    assert lens == [19, 19, 17]
    assert len(seen) == 55 and set(seen.values()) == {1}  # nothing lost, nothing twice


def test_117_samples_on_100_ranks(root):
    lens = []
    for rank in range(100):
        wc = WorkerConfig(rank=rank, world_size=100, num_workers=0)
        ds = get_train_dataset(root / "blend.yaml", worker_config=wc, batch_size=1,
                               distribution="energon", **PLAIN)  # fmt: skip
        lens.append(len(ds))
        if rank in (0, 1, 3):  # repeating: the rank's own samples over and over
            with fpipe.get_loader(ds, num_workers=0) as loader:
                got = [(s.dataset_path, s.index) for _, b in zip(range(10), loader)
                       for sources in b.__sources__ for s in sources]  # fmt: skip
            assert len(set(got)) == len(ds), (rank, got)
    assert lens == [2 if r in TWO else 1 for r in range(100)]
    assert sum(lens) == 55 + 7 + 55


def test_fpipe_keeps_its_global_default_and_an_explicit_choice(root):
    wc = WorkerConfig(rank=2, world_size=3, num_workers=5)
    # a repeating stream keeps the global distribution in fpipe.energon too
    assert get_train_dataset(root / "ds1", worker_config=wc, batch_size=1,
                             **PLAIN).distribution == "global"  # fmt: skip
    assert fpipe.get_train_dataset(root / "ds1", worker_config=wc, batch_size=1, repeat=False,
                                   **PLAIN).distribution == "global"  # fmt: skip
    explicit = get_train_dataset(root / "ds1", worker_config=wc, batch_size=1, repeat=False,
                                 distribution="global", **PLAIN)  # fmt: skip
    assert explicit.distribution == "global" and len(explicit) == 18
    assert worker_range(55, rank=2, world_size=3, workers=5) == (38, 55)


def test_a_rank_state_restores_on_its_rank(root):
    wc = WorkerConfig(rank=1, world_size=3, num_workers=2)
    make = lambda: get_train_dataset(root / "blend.yaml", worker_config=wc, batch_size=2,  # noqa: E731
                                     distribution="energon", **PLAIN)  # fmt: skip
    with fpipe.get_loader(make(), num_workers=0) as loader:
        it = iter(loader)
        [next(it) for _ in range(3)]
        state = loader.save_state_rank()
        want = [batch_keys(next(it)) for _ in range(4)]
    with fpipe.get_loader(make(), num_workers=0) as again:
        again.restore_state_rank(state)
        it = iter(again)
        assert [batch_keys(next(it)) for _ in range(4)] == want
