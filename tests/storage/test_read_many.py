"""``Dataset.read_many``: a batch of samples read at once gives what ``key`` and ``read`` give
one by one, and a sample that cannot be read holds its error without stopping the others."""

from __future__ import annotations

import numpy as np
import pytest

from fpipe.core.errors import BadSampleError
from fpipe.storage import open_dataset, prepare_dataset
from tests.storage.helpers import (
    file_reads,
    make_energon_dataset,
    make_image_caption_dataset,
    write_tar,
)
from tests.storage.test_index_validation import _BAD_MEMBER, corrupt_entry


def _one_by_one(ds, indices, exts):
    out = []
    for i in indices:
        try:
            out.append((ds.key(i), ds.read(i, exts)))
        except Exception as e:  # noqa: BLE001
            out.append((f"#{i}", e))
    return out


def _same(got, want):
    assert len(got) == len(want)
    for (gk, gv), (wk, wv) in zip(got, want):
        if isinstance(wv, Exception):
            assert type(gv) is type(wv) and str(gv) == str(wv)
        else:
            assert (gk, gv) == (wk, wv) and list(gv) == list(wv)  # same members, same order


def _mixed(tmp_path):
    """Samples with missing, empty, gzipped and far-apart members (big ``bin`` between)."""
    import gzip

    big = bytes(range(256)) * 300  # 76,800 bytes: more than the one-read gap
    samples = [
        ("a", {"txt": b"first", "json": b'{"n": 1}', "cls": b"3"}),
        ("b", {"txt": b"", "json": b"{}"}),  # an empty member
        ("c", {"json": b'{"n": 2}'}),  # no txt
        ("d", {"txt.gz": gzip.compress(b"zipped", mtime=0), "json": b"[]"}),
        ("e", {"txt": b"before", "bin": big, "json": b'{"far": true}'}),
        ("f", {"cls": b"7"}),
    ]
    write_tar(tmp_path / "s-0.tar", samples)
    write_tar(tmp_path / "s-1.tar", [(f"x{i}", {"txt": f"t{i}".encode()}) for i in range(5)])
    prepare_dataset(tmp_path)
    return open_dataset(tmp_path)


@pytest.mark.parametrize(
    "exts", [None, frozenset({"txt"}), frozenset({"json", "cls"}), frozenset({"txt", "json"})]
)
def test_tar_batch_equals_one_by_one(tmp_path, exts):
    ds = _mixed(tmp_path)
    order = [9, 0, 4, 4, 2, 10, 3, 1, 5, 6, 8, 7]  # shuffled, a repeat, both shards
    _same(ds.read_many(order, exts), _one_by_one(ds, order, exts))
    _same(ds.read_many(np.asarray(order[:3]), exts), _one_by_one(ds, order[:3], exts))
    assert ds.read_many([], exts) == []


def _reads_of(ds, read) -> list[tuple]:
    """The ``(path, offset, size)`` reads ``read()`` makes through ``ds``'s file layer."""
    return file_reads(ds.reader._files, read)[1]


@pytest.mark.parametrize(
    "exts", [None, frozenset({"txt"}), frozenset({"json", "cls"}), frozenset({"txt", "json"})]
)
def test_byte_ranges_are_the_reads_made(tmp_path, exts):
    """What a prefetch or a read-ahead window fetches (``byte_ranges``, planned for the whole
    batch) is exactly what ``read_many`` and ``read`` then ask for, range by range."""
    ds = _mixed(tmp_path)
    order = [9, 0, 4, 4, 2, 10, 3, 1, 5, 6, 8, 7]
    ranges = ds.reader.byte_ranges(order, exts)
    assert ranges == _reads_of(ds, lambda: _one_by_one(ds, order, exts))  # in sample order
    # read_many reads the samples it planned first (close ones together), then the others
    # one by one: every range lies inside one of its reads, and it makes no more reads
    made = _reads_of(ds, lambda: ds.read_many(order, exts))
    assert _covered(ranges, made) and len(made) <= len(ranges)
    assert ranges == ds.reader.byte_ranges_each(order, exts)  # the one-sample path agrees


def _covered(ranges, reads) -> bool:
    """Whether each ``(path, offset, size)`` of ``ranges`` lies inside one of ``reads``."""
    return all(any(p == q and o <= a and a + n <= o + m for q, o, m in reads) for p, a, n in ranges)


@pytest.mark.parametrize("what", [*_BAD_MEMBER, "key offsets"])
def test_byte_ranges_of_a_bad_entry_are_its_reads(tmp_path, what):
    make_image_caption_dataset(tmp_path, shards=2, per_shard=4)
    prepare_dataset(tmp_path, fields={"image": "jpg", "caption": "txt"}, compact_index=False)
    corrupt_entry(tmp_path / ".fpipe", what)
    ds = open_dataset(tmp_path)
    order, exts = [6, 5, 4, 0], frozenset({"jpg", "txt"})
    ranges = ds.reader.byte_ranges(order, exts)
    assert ranges == ds.reader.byte_ranges_each(order, exts)
    made = _reads_of(ds, lambda: ds.read_many(order, exts))
    # a sample whose key cannot be read fails before its read: its range is fetched unused
    assert (_covered(ranges, made) or what == "key offsets") and len(made) <= len(ranges)


def test_energon_and_out_of_range_fall_back_to_one_by_one(tmp_path):
    make_energon_dataset(tmp_path, shards=2, per_shard=3)
    ds = open_dataset(tmp_path)
    _same(ds.read_many([5, 0, 3], None), _one_by_one(ds, [5, 0, 3], None))
    got = ds.read_many([1, 99], None)
    assert got[0] == (ds.key(1), ds.read(1)) and isinstance(got[1][1], IndexError)


@pytest.mark.parametrize("exts", [frozenset({"jpg"}), frozenset({"jpg", "txt"})])
@pytest.mark.parametrize("what", [*_BAD_MEMBER, "key offsets"])
def test_bad_entry_is_that_sample_s_error_only(tmp_path, what, exts):
    make_image_caption_dataset(tmp_path, shards=2, per_shard=4)
    prepare_dataset(tmp_path, fields={"image": "jpg", "caption": "txt"}, compact_index=False)
    corrupt_entry(tmp_path / ".fpipe", what)
    ds = open_dataset(tmp_path)
    order = [6, 5, 4, 0]
    got = ds.read_many(order, exts)
    _same(got, _one_by_one(ds, order, exts))
    # sample 6's rows now start inside sample 4's: with two members wanted, the header checked
    # (the second member's) is another sample's, so it is refused too
    six = what == "rows backwards" and len(exts) == 2
    # key 4 running into key 5 is not the name in sample 4's tar header: refused as well
    four = what == "key offsets"
    assert [isinstance(v, Exception) for _, v in got] == [six, True, four, False]
    assert isinstance(got[1][1], BadSampleError) and "index is corrupt" in str(got[1][1])
    if six:
        assert "stale shard" in str(got[0][1]) and "member '000005." in str(got[0][1])


def test_truncated_shard_names_file_and_key(tmp_path):
    make_image_caption_dataset(tmp_path, shards=1, per_shard=3)
    prepare_dataset(tmp_path)
    shard = tmp_path / "shard-0000.tar"
    ds = open_dataset(tmp_path)
    shard.write_bytes(shard.read_bytes()[:1024])  # shard shrank after it was opened
    (k0, v0), (k2, v2) = ds.read_many([0, 2])
    assert isinstance(v2, BadSampleError) and "shard truncated" in v2.reason
    assert v2.path.endswith("shard-0000.tar") and v2.key == k2 == "shard-0000/000002"
    assert isinstance(v0, BadSampleError) or set(v0) == {"jpg", "txt", "json"}


def test_loader_raises_or_skips_the_unreadable_sample_only(tmp_path):
    """A batch is read ahead in one go; the sample whose entry is corrupt is raised (naming
    shard and key) or skipped and counted in its turn, the others of its batch are kept."""
    import fpipe

    make_image_caption_dataset(tmp_path, shards=2, per_shard=4)
    prepare_dataset(
        tmp_path, fields={"image": "jpg", "caption": "txt"}, split="1,0,0", compact_index=False
    )
    corrupt_entry(tmp_path / ".fpipe", "negative size")
    kw = dict(batch_size=4, seed=0, num_epochs=1, shuffle_buffer_size=1)
    with pytest.raises(BadSampleError, match="index is corrupt") as ei:
        list(fpipe.get_loader(fpipe.get_train_dataset(tmp_path, **kw)))
    assert ei.value.path == "shard-0001.tar" and ei.value.key == "shard-0001/000005"
    loader = fpipe.get_loader(fpipe.get_train_dataset(tmp_path, error_policy="skip", **kw))
    keys = [k for b in loader for k in b.__key__]
    assert len(keys) == 7 and "shard-0001/000005" not in keys
    assert loader.stats().skipped == 1
