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
        for ask in ([-1, 0, 1 - n], slice(1, None, 2), np.arange(n) % 3 == 0, -2):
            got, want_ = np.asarray(c.column(name)[ask]), np.asarray(f.column(name)[ask])
            assert got.dtype == want_.dtype and got.tolist() == want_.tolist(), (name, ask)
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


def _batch_only(*a, **k):
    raise AssertionError("one sample's lookup went through the batch lookups")


def test_one_sample_reads_by_int_arithmetic(tmp_path, monkeypatch):
    """A sample's key, members, shard id and derived columns (what a read or a plan of one
    sample asks) are int arithmetic on the arrays, not a batch of one (~20 numpy calls), and
    equal the flat index's, in shards of every kind (_odd_shards)."""
    from fpipe.storage.read.tar.samples import CompactSamples

    c, f = _both(tmp_path, _odd_shards)
    for name in ("rows", "keys", "shard_ids", "_sizes"):
        monkeypatch.setattr(CompactSamples, name, _batch_only)
    for i in range(len(f)):
        assert c.key(i) == f.key(i)
        assert c.reader.members(i) == f.reader.members(i)
        assert c.read(i) == f.read(i)
        for name in f.column_names:
            got, want = c.column(name)[i], f.column(name)[i]
            assert got == want and got.dtype == want.dtype, (name, i)


@pytest.mark.parametrize(
    "entries",
    [
        [(-1, p, 41, 6) for p in range(5)],  # numbers of one width
        [(-1, 0, 7, 4), (-1, 1, 7, 2), (-1, 3, 0, 1)],  # widths differ
        [(0, 0), (0, 1), (0, 2), (0, 3)],  # stored keys, one empty
        [(-1, 0, 9998, 4), (-1, 1, 9998, 4), (-1, 2, 9998, 4)],  # past the width: 10000
        [(-1, 0, -3, 3), (-1, 0, 5, 20), (-1, 0, 10**17, 18), (-1, 0, 2**62, 3)],
        [(-1, 0, 5, 0), (0, 4), (0, 5), (2, -3), (-1, 2, 1, 3), (0, 3)],  # corrupt entries
        [],
    ],
)
def test_a_batch_of_keys_is_each_key(entries):
    """keys_of (numpy, a batch) gives what key_of (one key) gives, corrupt entries included."""
    from fpipe.storage.read.tar.compact_keys import key_of, keys_of

    blob = np.frombuffer(b"abcdefgh", np.uint8)
    off = np.array([0, 1, 3, 3, 8, 20], np.int64)  # row 4 ends past keys.npy
    rows = [e if len(e) == 4 else (*e, 0, 0) for e in entries]
    want = [key_of(*r, off, blob) for r in rows]
    cols = [np.asarray(c, np.int64) for c in zip(*rows)] or [np.zeros(0, np.int64)] * 4
    raw, ok = keys_of(*cols, off, blob)
    assert raw == [b"" if k is None else k for k in want]
    assert ok.tolist() == [k is not None for k in want]


def test_a_corrupt_pattern_entry_fails_alike_one_by_one_and_in_batches(tmp_path):
    """A block outside offset_base.npy: the sample's read fails as a bad sample, its derived
    column as a ConfigError naming it, whether asked alone or in a batch."""
    make_image_caption_dataset(tmp_path, shards=2, per_shard=3)
    prepare_dataset(tmp_path, fields=FIELDS, compact_index=True)
    blocks = tmp_path / ".fpipe/compact/shard/blocks_at.npy"
    kept = np.load(blocks)
    np.save(blocks, np.array([kept[0], 7], np.int64))  # shard 1 (samples 3 to 5)
    ds = open_dataset(tmp_path)
    with pytest.raises(BadSampleError, match=r"corrupt \(member entries of sample 4\)"):
        ds.read(4)
    (_, got), (_, fine) = ds.read_many([4, 1])
    assert isinstance(got, BadSampleError) and isinstance(fine, dict)
    for col in (ds.column("bytes"), ds.column("image.bytes")):
        for ask in (4, [1, 4]):
            with pytest.raises(ConfigError, match="member entries of sample 4 are corrupt"):
                col[ask]
    rows = ds.reader._members.rows(np.array([4, 1, 5]))  # a corrupt sample's rows left out
    assert rows.ok.tolist() == [False, True, False] and set(rows.owner.tolist()) == {1}
    np.save(blocks, kept)
    np.save(tmp_path / ".fpipe/compact/shard/key_width.npy", np.array([0, 6], np.uint8))
    ds = open_dataset(tmp_path)
    with pytest.raises(BadSampleError, match=r"corrupt \(key entry of sample 1\)"):
        ds.key(1)
    (_, got), (key, fine) = ds.read_many([1, 4])
    assert isinstance(got, BadSampleError) and isinstance(fine, dict) and key == ds.key(4)


def test_a_pattern_sample_of_an_index_without_pattern_is_a_bad_sample(tmp_path):
    """info.yaml edited to an empty pattern: a sample of a pattern shard has no members the
    index can place, alone or in a batch (not a sample of no members)."""
    import yaml

    make_image_caption_dataset(tmp_path, shards=2, per_shard=3)
    prepare_dataset(tmp_path, fields=FIELDS, compact_index=True)
    info = tmp_path / ".fpipe/info.yaml"
    data = yaml.safe_load(info.read_text())
    data["compact"]["pattern"] = []
    info.write_text(yaml.safe_dump(data))
    ds = open_dataset(tmp_path)
    with pytest.raises(BadSampleError, match=r"corrupt \(member entries of sample 1\)"):
        ds.read(1)
    [(_, got)] = ds.read_many([1])
    assert isinstance(got, BadSampleError)
    for ask in (1, [1]):
        with pytest.raises(ConfigError, match="member entries of sample 1 are corrupt"):
            ds.column("bytes")[ask]
