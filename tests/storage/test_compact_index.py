"""Index format 4 (tar/compact.py): the compact layout reads exactly what the flat one does.

Each test prepares the same shards twice, compact (the default) and flat
(``compact_index=False``), and compares every read; shards that do not fit the compact
layout (pax or long-name headers, odd member sets, keys that are not consecutive numbers) keep
explicit entries for that shard only."""

from __future__ import annotations

import shutil
import tarfile

import numpy as np
import pytest

from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.storage.prepare import prepare_dataset
from fpipe.storage.read.layouts import open_dataset
from fpipe.storage.read.tar import index as index_mod
from tests.storage.helpers import make_image_caption_dataset, write_tar

FIELDS = {"image": "jpg", "caption": "txt"}


def _both(tmp_path, make, **kw):
    """(compact dataset, flat dataset) of the same shards made by ``make(folder)``."""
    make(tmp_path / "c")
    shutil.copytree(tmp_path / "c", tmp_path / "f")
    prepare_dataset(tmp_path / "c", compact_index=True, **kw)
    prepare_dataset(tmp_path / "f", compact_index=False, **kw)
    return open_dataset(tmp_path / "c"), open_dataset(tmp_path / "f")


def _same_reads(c, f) -> None:
    """Every read of ``c`` equals ``f``'s: keys, members, bytes, columns, batches."""
    n = len(f)
    assert len(c) == n and c.column_names == f.column_names
    for i in range(n):
        assert c.key(i) == f.key(i)
        assert c.reader.members(i) == f.reader.members(i)
        assert c.read(i) == f.read(i)
    for name in f.column_names:
        got, want = np.asarray(c.column(name)), np.asarray(f.column(name))
        assert got.dtype == want.dtype and got.tolist() == want.tolist(), name
        assert c.column(name)[n - 1] == want[n - 1]
    idx = np.arange(n)[::-1].copy()
    assert c.read_many(idx) == f.read_many(idx)
    assert c.read_many(idx, frozenset({"txt"})) == f.read_many(idx, frozenset({"txt"}))
    assert c.reader.member_keys(idx).tolist() == f.reader.member_keys(idx).tolist()
    strip = [(o, s) for _, o, s in f.reader.byte_ranges(idx)]
    assert [(o, s) for _, o, s in c.reader.byte_ranges(idx)] == strip


def test_compact_reads_what_flat_reads(tmp_path):
    make = lambda d: make_image_caption_dataset(d, shards=3, per_shard=4, with_json=False)  # noqa: E731
    c, f = _both(tmp_path, make, fields=FIELDS)
    assert c.record.compact is not None and f.record.compact is None
    _same_reads(c, f)
    assert c.column("width") is c.column("image.width")  # an alias is its column
    # image + caption, consecutive numeric keys: one offset, two sizes and three columns
    per_sample = sorted(
        str(p.relative_to(tmp_path / "c/.fpipe"))
        for p in (tmp_path / "c/.fpipe").rglob("*.npy")
        if np.load(p, mmap_mode="r").shape == (len(c),) and "/shard/" not in str(p)
    )
    assert per_sample == [
        "compact/columns/caption.chars.npy",
        "compact/columns/image.height.npy",
        "compact/columns/image.width.npy",
        "compact/offset.npy",
        "compact/size.0.npy",  # jpg
        "compact/size.1.npy",  # txt
    ]
    assert not (tmp_path / "c/.fpipe/shard_id.npy").exists()


def test_compact_with_a_shard_table(tmp_path, monkeypatch):
    monkeypatch.setattr(index_mod, "SHARD_ARRAYS_FROM", 2)
    c, f = _both(tmp_path, lambda d: make_image_caption_dataset(d, shards=3, per_shard=2))
    assert c.record.shard_arrays and c.record.compact is not None
    _same_reads(c, f)


def _odd_shards(d):
    sample = lambda n: {"bin": bytes(n), "txt": b"t" * (n % 7 + 1)}  # noqa: E731
    write_tar(d / "s0.tar", [(f"{k:04d}", sample(k * 300)) for k in range(4)])
    missing = [(f"{k:04d}", sample(k)) for k in range(4)]
    missing[2] = ("0002", {"bin": b"12"})
    write_tar(d / "s1.tar", missing)
    write_tar(d / "s2.tar", [(k, sample(5)) for k in ("a", "b", "c")])
    long = [("k" * 120 + str(k), sample(600)) for k in range(2)]
    write_tar(d / "s3.tar", long, fmt=tarfile.PAX_FORMAT)
    write_tar(d / "s4.tar", [(f"{k:04d}", sample(9)) for k in (1, 3, 4)])
    write_tar(d / "s5.tar", [("0009", sample(1)), ("10", sample(2))])  # widths differ


def test_shards_that_do_not_fit_keep_explicit_entries(tmp_path):
    c, f = _both(tmp_path, _odd_shards)
    _same_reads(c, f)
    idx = tmp_path / "c/.fpipe/compact/shard"
    explicit_members = (np.load(idx / "members_at.npy") >= 0).tolist()
    explicit_keys = (np.load(idx / "keys_at.npy") >= 0).tolist()
    # s0 plain; s1 a sample without txt; s2 letters; s3 pax headers, long names; s4 gaps
    assert explicit_members == [False, True, False, True, False, False]
    assert explicit_keys == [False, False, True, True, True, True]


def test_a_corrupt_compact_array_names_its_file(tmp_path):
    make_image_caption_dataset(tmp_path, shards=2, per_shard=3)
    prepare_dataset(tmp_path, fields=FIELDS, compact_index=True)
    offset = tmp_path / ".fpipe/compact/offset.npy"
    data = offset.read_bytes()
    offset.write_bytes(data[: len(data) - 3])  # cut short
    with pytest.raises(ConfigError, match=r"compact/offset.npy: .*re-run `fpipe prepare`"):
        open_dataset(tmp_path).read(0)
    np.save(offset, np.zeros(2, np.uint32))  # 2 of 6 samples
    with pytest.raises(ConfigError, match=r"compact/offset.npy: shape \(2,\)"):
        open_dataset(tmp_path)
    np.save(offset, np.zeros(6, np.uint32))
    shard = tmp_path / ".fpipe/compact/shard/key_width.npy"
    np.save(shard, np.zeros(5, np.uint8))  # 5 of 2 shards
    with pytest.raises(ConfigError, match=r"shard/key_width.npy: shape \(5,\)"):
        open_dataset(tmp_path)


@pytest.mark.parametrize("what", ["members_at", "keys_at"])
def test_an_explicit_entry_out_of_range_is_a_bad_sample(tmp_path, what):
    c, _ = _both(tmp_path, _odd_shards)
    at = tmp_path / f"c/.fpipe/compact/shard/{what}.npy"
    arr = np.load(at)
    arr[3] = 10**6  # shard s3's entries: past the explicit table
    np.save(at, arr)
    ds = open_dataset(tmp_path / "c")
    first = int(ds.record.shard_starts()[3])
    with pytest.raises(BadSampleError, match="the index is corrupt"):
        ds.read(first)
    (key, got), (_, fine) = ds.read_many([first, 0])
    assert isinstance(got, BadSampleError) and isinstance(fine, dict)
    assert ds.read(0) == fine  # the other shards read as before


def test_planning_a_compact_index_maps_no_per_sample_array(tmp_path, monkeypatch):
    from fpipe import get_train_dataset
    from fpipe.loader.topology import Topology
    from fpipe.storage.read import record as record_mod

    make_image_caption_dataset(tmp_path, shards=4, per_shard=8)
    prepare_dataset(tmp_path, fields=FIELDS, compact_index=True)
    assert (tmp_path / ".fpipe/compact/offset.npy").exists()  # the compact layout
    loaded = []
    real = record_mod.load_array
    monkeypatch.setattr(record_mod, "load_array", lambda p, *a: (loaded.append(p), real(p, *a))[1])
    ds = get_train_dataset(
        tmp_path,
        batch_size=4,
        shuffle_buffer_size=8,
        max_samples_per_sequence=4,
        topology=Topology(rank=1, world_size=2),
    )
    state = ds.plan.init()
    for _ in range(3):
        state, got = ds.plan.next(state, 1)
        assert len(got[0].refs) == 4
    assert loaded == []


def test_an_explicit_entry_in_an_index_without_explicit_rows_is_a_bad_sample(tmp_path):
    make_image_caption_dataset(tmp_path, shards=2, per_shard=3)
    prepare_dataset(tmp_path, fields=FIELDS, compact_index=True)
    at = tmp_path / ".fpipe/compact/shard/members_at.npy"
    np.save(at, np.array([-1, 0], np.int64))  # shard 1 "explicit", but no explicit rows
    ds = open_dataset(tmp_path)
    with pytest.raises(BadSampleError, match="the index is corrupt"):
        ds.read(3)
    assert ds.read(0)["jpg"][:2] == b"\xff\xd8"
