"""Energon's len() of training and validation datasets and loaders (batches of one epoch, also
when repeating; virtual_epoch_length; limit counts batches), and Energon's get_loader /
get_savable_loader keywords."""

from __future__ import annotations

import itertools
import warnings

import pytest

import fpipe
from fpipe.core.errors import ConfigError
from fpipe.core.testing import run
from fpipe.loader import WorkerConfig
from tests.distributed.helpers import batch_keys, build_dataset, make_text_dataset

WC = WorkerConfig(rank=0, world_size=1, num_workers=0)


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    return make_text_dataset(tmp_path_factory.mktemp("elen"), shards=5, per_shard=10)  # 50


# --- item 4: lengths ---------------------------------------------------------------------------


def test_a_repeating_dataset_has_the_length_of_one_epoch(text):
    cases = itertools.product((1, 2, 3), (4, 11), (True, False), ("global", "per_rank"))
    for world, b, drop_last, dist in cases:
        for rank in range(world):
            kw = dict(rank=rank, world_size=world, batch_size=b, drop_last=drop_last,
                      distribution=dist)  # fmt: skip
            endless = build_dataset(text, **kw)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                one_epoch = build_dataset(text, num_epochs=1, **kw)
            # exact: the batches that one epoch of samples makes on this rank
            assert len(endless) == len(run(one_epoch.plan)[1]), (world, rank, b, drop_last, dist)
            assert len(fpipe.get_loader(endless)) == len(endless)
    # Energon's test_dataset_len numbers: 50 samples, batches of 11 (Energon rounds up: its
    # batch_drop_last defaults to False; fpipe's drop_last to True)
    assert len(fpipe.get_train_dataset(text, batch_size=11, worker_config=WC,
                                       shuffle_buffer_size=None, max_samples_per_sequence=None,
                                       drop_last=False)) == 5  # fmt: skip


def test_virtual_epoch_length_is_the_length(text):
    ds = fpipe.get_train_dataset(
        text,
        batch_size=11,
        worker_config=WC,
        virtual_epoch_length=12,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
    )
    loader = fpipe.get_loader(ds)
    assert len(ds) == len(loader) == 12 == len(list(loader))


def test_shuffle_over_epochs_multiplier_keeps_the_length_of_one_pass(text):
    ds = fpipe.get_train_dataset(text, batch_size=10, worker_config=WC,
                                 shuffle_over_epochs_multiplier=3, shuffle_buffer_size=None,
                                 max_samples_per_sequence=2)  # fmt: skip
    assert len(ds) == 5
    finite = fpipe.get_train_dataset(text, batch_size=10, worker_config=WC, num_epochs=3,
                                     shuffle_over_epochs_multiplier=3, shuffle_buffer_size=None,
                                     max_samples_per_sequence=2)  # fmt: skip
    assert len(finite) == 15 == len(list(fpipe.get_loader(finite)))


def test_a_weighted_blend_has_the_length_of_its_datasets_together(text, tmp_path):
    other = make_text_dataset(tmp_path / "b", shards=2, per_shard=7)  # 14
    meta = tmp_path / "blend.yaml"
    meta.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        f"      - weight: 1\n        path: {text}\n      - weight: 3\n        path: {other}\n"
    )
    ds = fpipe.get_train_dataset(
        str(meta),
        batch_size=8,
        worker_config=WC,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
    )
    assert len(ds) == (50 + 14) // 8  # Energon: the inner lengths summed, weights disregarded


def test_val_limit_counts_batches_and_every_loop_is_the_same_pass(text):
    full = fpipe.get_val_dataset(text, split_part="train", batch_size=11, worker_config=WC)
    assert len(full) == 5  # ceil(50 / 11), the short last batch kept
    loader = fpipe.get_loader(full)
    passes = [[batch_keys(b) for b in loader] for _ in range(3)]
    assert passes[0] == passes[1] == passes[2] and [len(b) for b in passes[0]] == [11] * 4 + [6]
    limited = fpipe.get_val_dataset(text, split_part="train", batch_size=11, worker_config=WC,
                                    limit=2)  # fmt: skip
    loader = fpipe.get_loader(limited)
    assert len(limited) == len(loader) == 2
    assert [batch_keys(b) for b in loader] == passes[0][:2] == [batch_keys(b) for b in loader]
    # more than there is: the whole pass; 0: no limit (Energon: `limit > 0`)
    for limit in (9, 0):
        ds = fpipe.get_val_dataset(text, split_part="train", batch_size=11, worker_config=WC,
                                   limit=limit)  # fmt: skip
        assert len(ds) == 5 == len(list(fpipe.get_loader(ds)))


def test_val_limit_on_two_ranks_takes_the_first_global_batches(text):
    per_rank = []
    for rank in range(2):
        wc = WorkerConfig(rank=rank, world_size=2, num_workers=0)
        ds = fpipe.get_val_dataset(text, split_part="train", batch_size=5, worker_config=wc,
                                   limit=2)  # fmt: skip
        per_rank.append([k for b in fpipe.get_loader(ds) for k in batch_keys(b)])
        assert len(ds) == 2
    one = fpipe.get_val_dataset(text, split_part="train", batch_size=10, worker_config=WC)
    first_two_global = [
        k for b in itertools.islice(fpipe.get_loader(one), 2) for k in batch_keys(b)
    ]
    assert sorted(per_rank[0] + per_rank[1]) == sorted(first_two_global)  # 20 samples, once


# --- item 3: loader keywords -------------------------------------------------------------------


def test_get_savable_loader_takes_energons_keywords(text):
    ds = fpipe.get_train_dataset(text, batch_size=5, worker_config=WC, shuffle_buffer_size=4,
                                 max_samples_per_sequence=3, seed=3)  # fmt: skip
    plain = [batch_keys(b) for b in itertools.islice(fpipe.get_savable_loader(ds), 6)]
    energon = fpipe.get_savable_loader(
        ds, worker_config=WC, checkpoint_every_sec=5, checkpoint_every_min_n_samples=7,
        n_checkpoints=2, gc_collect_every_n_steps=10, cache_pool=object(),
        watchdog_timeout_seconds=30,
    )  # fmt: skip
    assert [batch_keys(b) for b in itertools.islice(energon, 6)] == plain
    assert [batch_keys(b) for b in itertools.islice(fpipe.get_loader(ds, worker_config=WC), 6)] \
        == plain  # fmt: skip
    other = WorkerConfig(rank=0, world_size=1, num_workers=2)
    with pytest.raises(ConfigError, match="does not match the dataset"):
        fpipe.get_savable_loader(ds, worker_config=other)


def test_fail_on_timeout_stops_instead_of_replacing_workers(text):
    ds = fpipe.get_train_dataset(text, batch_size=5, worker_config=WC, shuffle_buffer_size=None,
                                 max_samples_per_sequence=None)  # fmt: skip
    loader = fpipe.get_loader(ds, fail_on_timeout=True, watchdog_timeout_seconds=12.5)
    assert loader._healer is None and loader.timeout == 12.5
    assert fpipe.get_loader(ds)._healer is not None
