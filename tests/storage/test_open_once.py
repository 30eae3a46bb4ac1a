"""A worker opening a dataset the plan opened parses none of its index files again and checks
its shard list once per process (the first batch of a 1,000-shard dataset waited on each
worker's parse); a folder prepared again is parsed again. What a worker is sent stays small."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import yaml

from fpipe import get_train_dataset
from fpipe.loader._iteration import RecipeDataset
from fpipe.storage import open_dataset
from fpipe.storage.prepare import prepare_dataset
from fpipe.storage.read import open_local, parsed_files
from tests.storage.helpers import make_image_caption_dataset, write_tar


@pytest.fixture
def prepared(tmp_path):
    make_image_caption_dataset(tmp_path, shards=3, per_shard=2, with_json=False)
    prepare_dataset(tmp_path)
    parsed_files.clear()
    return tmp_path


def _counting(monkeypatch) -> dict[str, int]:
    counts = {"yaml": 0, "check_record": 0}
    real_load, real_check = yaml.load, open_local.check_record

    def load(*args, **kwargs):
        counts["yaml"] += 1
        return real_load(*args, **kwargs)

    def check(*args, **kwargs):
        counts["check_record"] += 1
        return real_check(*args, **kwargs)

    monkeypatch.setattr(yaml, "load", load)
    monkeypatch.setattr(open_local, "check_record", check)
    return counts


def test_a_worker_parses_and_checks_nothing_the_plan_did(prepared, monkeypatch):
    ds = get_train_dataset(prepared, batch_size=2, seed=1)
    counts = _counting(monkeypatch)
    worker = ds.materializer.copy()  # what a thread worker gets (a forked one: the same memory)
    assert worker.dataset(0).read(0)
    # the plan checked the counts; the shard paths it left to the first open that reads
    assert counts == {"yaml": 0, "check_record": 1}
    assert ds.materializer.copy().dataset(0).read(0)  # checked once per process
    assert counts == {"yaml": 0, "check_record": 1}


def test_a_folder_prepared_again_is_parsed_again(prepared, monkeypatch):
    assert len(open_dataset(prepared)) == 6
    make_image_caption_dataset(prepared, shards=4, per_shard=2, with_json=False)
    prepare_dataset(prepared)  # a fourth shard: the index folder is replaced
    counts = _counting(monkeypatch)
    assert len(open_dataset(prepared)) == 8  # the new files' values (their prepared record's)
    assert counts["check_record"] == 1


def test_what_a_worker_is_sent_is_small(prepared):
    ds = get_train_dataset(prepared, batch_size=2, seed=1)
    payload = pickle.dumps(RecipeDataset(ds.materializer))
    # the dataset's path and options, no record, index array or shard list (a worker opens
    # the dataset itself): the same size for 3 shards as for 10^4
    assert len(payload) < 4096, len(payload)
    assert b"shard-0001" not in payload


def test_a_256_shard_index_lists_its_shards_as_arrays(tmp_path, monkeypatch):
    """Parsing the shard list as YAML cost ~30 us a shard in every process opening it. Checking
    it calls no plain ``np.unique``, whose first call imports ``numpy.ma`` (~15 ms in each
    worker process, on its first batch's path)."""
    for s in range(256):
        write_tar(tmp_path / f"s{s:04d}.tar", [(f"k{s}", {"txt": b"x"})])
    prepare_dataset(tmp_path)
    info = yaml.safe_load((tmp_path / ".fpipe" / "info.yaml").read_text())
    assert info["num_shards"] == 256 and "shards" not in info
    real_unique = np.unique

    def unique(ar, *args, **kwargs):
        assert args or kwargs, "a plain np.unique imports numpy.ma"
        return real_unique(ar, *args, **kwargs)

    monkeypatch.setattr(np, "unique", unique)
    assert open_dataset(tmp_path).read(255)["txt"] == b"x"  # its shard list checked
