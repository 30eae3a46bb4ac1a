"""Index format 3: the shard list as arrays, so opening and planning cost O(1) per shard.

A 1,000-shard index must open and plan without a per-shard stat, name or array read, and a
worker reading many datasets keeps a bounded number of files open."""

from __future__ import annotations

import os

import numpy as np
import pytest
import yaml

from fpipe.core.errors import ConfigError
from fpipe.storage.prepare import prepare_dataset
from fpipe.storage.read import reader as reader_mod
from fpipe.storage.read.layouts import open_dataset
from fpipe.storage.read.tar import index as index_mod
from tests.storage.helpers import make_image_caption_dataset


@pytest.fixture
def arrays_from_two(monkeypatch):
    """Shard lists of 2+ shards written as arrays (format 3)."""
    monkeypatch.setattr(index_mod, "SHARD_ARRAYS_FROM", 2)


def test_format3_reads_what_format2_reads(tmp_path, arrays_from_two):
    make_image_caption_dataset(tmp_path, shards=3, per_shard=2)
    prepare_dataset(tmp_path, compact_index=False)  # the flat layout: format 3
    info = yaml.safe_load((tmp_path / ".fpipe/info.yaml").read_text())
    assert info["version"] == 3 and info["num_shards"] == 3 and "shards" not in info
    ds = open_dataset(tmp_path)
    assert ds.shards == ("shard-0000.tar", "shard-0001.tar", "shard-0002.tar")
    assert ds.key(5) == "shard-0002/000005"
    assert ds.read(3)["jpg"][:2] == b"\xff\xd8"
    assert ds.record.shard_starts().tolist() == [0, 2, 4, 6]


def test_format3_refuses_a_shard_path_out_of_the_folder(tmp_path, arrays_from_two):
    make_image_caption_dataset(tmp_path, shards=2, per_shard=1)
    prepare_dataset(tmp_path)
    names = tmp_path / ".fpipe/shards/names.npy"
    blob = np.load(names).tobytes().replace(b"shard-0001.tar", b"../rd-0001.tar")
    np.save(names, np.frombuffer(blob, np.uint8))
    with pytest.raises(ConfigError, match="leaves the dataset folder"):
        open_dataset(tmp_path)


def test_format3_checks_a_changed_shard_when_first_read(tmp_path, arrays_from_two):
    make_image_caption_dataset(tmp_path, shards=2, per_shard=1)
    prepare_dataset(tmp_path)
    with open(tmp_path / "shard-0001.tar", "ab") as f:
        f.write(b"\0" * 512)
    ds = open_dataset(tmp_path)  # opening stats no shard
    assert ds.read(0)["jpg"][:2] == b"\xff\xd8"
    with pytest.raises(ConfigError, match="shard changed since it was indexed"):
        ds.read(1)


def test_planning_a_1000_shard_index_reads_no_shard_entry(tmp_path, monkeypatch):
    """get_train_dataset + the first recipes: no shard stat, no per-shard name built, and
    only a handful of index arrays mapped (not one per shard)."""
    from fpipe import get_train_dataset
    from fpipe.loader.topology import Topology
    from fpipe.storage.read.tar.shard_table import ShardTable

    make_image_caption_dataset(tmp_path, shards=1, per_shard=1)
    prepare_dataset(tmp_path, compact_index=False)  # a real dataset.yaml; index replaced below
    idx = tmp_path / ".fpipe"
    n, shards = 5000, 1000
    files = index_mod.shard_table_files(
        [{"name": f"s-{i:04d}.tar", "samples": 5} for i in range(shards)]
    )
    for rel, arr in files.items():
        (idx / rel).parent.mkdir(parents=True, exist_ok=True)
        np.save(idx / rel, arr)
    info = yaml.safe_load((idx / "info.yaml").read_text())
    info.update(version=3, num_samples=n, num_shards=shards, num_members=n, columns={})
    info.pop("shards")
    (idx / "info.yaml").write_text(yaml.safe_dump(info))
    for rel, dtype, size in [
        ("shard_id.npy", np.int32, n),
        ("keys.offsets.npy", np.int64, n + 1),
        ("members/start.npy", np.int64, n + 1),
        ("members/ext.npy", np.int32, n),
        ("members/offset.npy", np.int64, n),
        ("members/size.npy", np.int64, n),
    ]:
        np.save(idx / rel, np.zeros(size, dtype))
    stats, entries = [], []
    real_stat, real_getitem = os.stat, ShardTable.__getitem__
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: (stats.append(p), real_stat(p, *a, **k))[1])
    monkeypatch.setattr(
        ShardTable, "__getitem__", lambda self, i: (entries.append(i), real_getitem(self, i))[1]
    )
    ds = get_train_dataset(
        tmp_path,
        batch_size=4,
        shuffle_buffer_size=100,
        max_samples_per_sequence=10,
        topology=Topology(rank=3, world_size=8),
    )
    state = ds.plan.init()
    for _ in range(3):
        state, got = ds.plan.next(state, 1)
        assert len(got[0].refs) == 4
    assert not [p for p in stats if str(p).endswith(".tar")]
    assert entries == []


def test_files_stay_bounded_across_many_datasets(tmp_path, monkeypatch):
    """Every dataset has its own file cache; together they keep at most PROCESS_MAX_OPEN
    files open (a worker of a 10,000-dataset blend)."""
    monkeypatch.setattr(reader_mod, "PROCESS_MAX_OPEN", 8)
    paths = []
    for i in range(20):
        p = tmp_path / f"f{i}"
        p.write_bytes(b"x" * 16)
        paths.append(str(p))
    caches = [reader_mod.FileCache(4) for _ in range(20)]
    for cache, path in zip(caches, paths):
        assert cache.pread(path, 0, 4) == b"xxxx"
    assert sum(len(c) for c in caches) == 8
    assert caches[0].pread(paths[0], 4, 4) == b"xxxx"  # an evicted file is opened again
    assert sum(len(c) for c in caches) == 8
    for c in caches:
        c.close()
