"""``loader.config()`` / ``dataset.config()`` with the keys of Energon 7.4's, and the
``dataset_weights`` of a ``BlendDataset`` (Energon's guide code, only the import changed).

Energon 7.4 gives (checked with the real package): the loader ``{"type", "num_workers",
"persistent_workers", "pin_memory", "prefetch_factor", "dataset"}``, a blend ``{"type":
"BlendDataset", "dataset_weights": [(config, weight), ...], "worker_config"}`` and a worker
config ``{"rank", "world_size", "num_workers", "data_parallel_group"}``.
"""

from __future__ import annotations

import json

import pytest

from fpipe.energon import BlendDataset, WorkerConfig, get_savable_loader, get_train_dataset
from tests.distributed.helpers import make_text_dataset

WC = WorkerConfig(rank=0, world_size=1, num_workers=2)
PLAIN = dict(worker_config=WC, shuffle_buffer_size=None, max_samples_per_sequence=None)
LOADER_KEYS = {"type", "num_workers", "persistent_workers", "pin_memory", "prefetch_factor"}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("cfgtree")
    make_text_dataset(root / "a", shards=2, per_shard=3)
    make_text_dataset(root / "b", shards=2, per_shard=4)
    return root


def test_loader_config_has_energons_keys_and_describes_the_plan(root):
    ds = get_train_dataset(root / "a", batch_size=2, **PLAIN)
    config = get_savable_loader(ds).config()
    assert set(config) == LOADER_KEYS | {"dataset"}
    assert (config["num_workers"], config["prefetch_factor"]) == (2, 2)
    node = config["dataset"]
    assert node["batch_size"] == 2 and node["_path"] == str(root / "a")
    assert node["worker_config"] == {
        "rank": 0,
        "world_size": 1,
        "num_workers": 2,
        "data_parallel_group": None,
    }
    assert json.loads(json.dumps(config)) == json.loads(json.dumps(config))  # JSON-able
    # equal datasets give equal trees; another seed another one
    again = get_savable_loader(get_train_dataset(root / "a", batch_size=2, **PLAIN)).config()
    assert again == config
    other = get_train_dataset(root / "a", batch_size=2, seed=7, **PLAIN)
    assert other.config() != node


def test_blend_dataset_weights_and_config(root):
    ds_a = get_train_dataset(root / "a", batch_size=2, **PLAIN)
    ds_b = get_train_dataset(root / "b", batch_size=2, **PLAIN)
    blend = BlendDataset((ds_a, 0.3), (ds_b, 0.7), worker_config=WC)
    assert [w for _, w in blend.dataset_weights] == [0.3, 0.7]
    assert blend.dataset_weights[0][0] is ds_a
    config = get_savable_loader(blend).config()
    node = config["dataset"]
    assert set(node) == {"type", "dataset_weights", "worker_config"}
    assert node["type"] == "BlendDataset"
    assert [(c["_path"], w) for c, w in node["dataset_weights"]] == [
        (str(root / "a"), 0.3),
        (str(root / "b"), 0.7),
    ]
    assert node["dataset_weights"][0][0] == ds_a.config()


def test_worker_config_config_is_energons_and_the_loaders_node(root):
    # Energon's test_save_restore_state_train compares WorkerConfig.config() with this dict
    # before it looks for the same dict in loader.config().
    assert WorkerConfig(rank=1, world_size=2, num_workers=3).config() == {
        "rank": 1,
        "world_size": 2,
        "num_workers": 3,
        "data_parallel_group": None,
    }
    ds = get_train_dataset(root / "a", batch_size=2, **PLAIN)
    assert get_savable_loader(ds).config()["dataset"]["worker_config"] == WC.config()
