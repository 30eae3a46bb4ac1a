"""``FileStoreCachePool`` (Energon's prefetching cache pool, ``cache/file_cache_pool.py``):
references to one file share one read and one local copy, the copy is deleted when the last
reference has read it or was dropped, a full folder makes a reference read the store
directly, and the data is the store's either way."""

from __future__ import annotations

import gc
import time

import pytest

from fpipe.energon import DecodeFileStore, FileStore, FileStoreCachePool, SourceInfo


class DictStore(FileStore):
    def __init__(self, data):
        self.data, self.reads = data, []

    def __getitem__(self, name):
        self.reads.append(name)
        info = SourceInfo(dataset_path="mem", index=name, shard_name="", file_names=(name,))
        return self.data[name], info

    def get_path(self):
        return "mem"


class Upper:
    def decode(self, fname, data):
        return f"{fname}:{data.decode().upper()}"


@pytest.fixture
def pool(tmp_path):
    pools = []

    def make(**kw):
        pools.append(FileStoreCachePool(parent_cache_dir=tmp_path, **kw))
        return pools[-1]

    yield make
    for p in pools:
        p.close()


def test_references_share_one_read_and_one_copy(pool):
    p, store = pool(), DictStore({"a": b"x" * 10})
    one, two = p.get_lazy(store, "a"), p.get_lazy(store, "a")
    assert one.entry is two.entry and one.entry.refcount == 2
    one.entry.send_to_cache_future.result()
    assert len(list(p.cache_dir.iterdir())) == 1 and store.reads == ["a"]
    sample = {"__sources__": ()}
    assert one.get(sample) == b"x" * 10 and sample["__sources__"][0].file_names == ("a",)
    assert len(list(p.cache_dir.iterdir())) == 1  # the second reference still wants it
    assert two.get() == b"x" * 10
    assert not list(p.cache_dir.iterdir()) and p.current_cache_size == 0
    assert store.reads == ["a"]  # both read the local copy


def test_a_dropped_reference_frees_its_copy(pool):
    p, store = pool(), DictStore({"a": b"1"})
    lazy = p.get_lazy(store, "a")
    lazy.entry.send_to_cache_future.result()
    assert p.current_cache_count == 1
    del lazy
    gc.collect()
    assert p.current_cache_count == 0 and not list(p.cache_dir.iterdir())


def test_a_full_folder_means_a_direct_read_and_a_requeue(pool):
    p, store = pool(num_workers=1, max_cache_count=1), DictStore({"a": b"1", "b": b"22"})
    a = p.get_lazy(store, "a")
    b1, b2 = p.get_lazy(store, "b"), p.get_lazy(store, "b")
    a.entry.send_to_cache_future.result()
    time.sleep(0.2)  # b's read is done and waits for room
    assert not b1.entry.send_to_cache_future.done()
    assert b1.get() == b"22"  # read directly; b queued again for b2
    assert a.get() == b"1"  # frees the room
    assert b2.entry.send_to_cache_future.result(timeout=5) is True
    assert b2.get() == b"22" and p.current_cache_count == 0


@pytest.mark.parametrize("method", ["raw", "pickle"])
def test_decoded_stores_decode_either_way(pool, method):
    """method="pickle" keeps the decoded value in the worker's memory: nothing is written to disk
    for it, so nothing is ever unpickled."""
    p = pool(method=method)
    store = DecodeFileStore(DictStore({"f": b"abc"}), decoder=Upper())
    lazy = p.get_lazy(store, "f")
    lazy.entry.send_to_cache_future.result()
    assert any(p.cache_dir.iterdir()) == (method == "raw")
    assert lazy.get() == "f:ABC"


def test_to_cache_and_close(pool, tmp_path):
    p = pool()
    value = {"k": (1, 2)}
    lazy = p.to_cache(value, "name")
    assert lazy.get() is value and lazy.get() is value  # held in memory, never serialized
    assert not any(p.cache_dir.iterdir())
    p.close()
    assert not p.cache_dir.exists()
    with pytest.raises(RuntimeError, match="closed"):
        p.get_lazy(DictStore({}), "a")
