"""A shard that changed after prepare (rewritten with the same length, reordered, swapped) never
delivers other samples' bytes under a key: every read checks the tar header before the
sample's first member (fpipe's tar layout, local or in a bucket), an Energon range must hold
exactly one whole sample, and opening compares what is cheap (size, mtime)."""

from __future__ import annotations

import os

import pytest

import fpipe
from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.storage import open_dataset, prepare_dataset
from fpipe.storage.read._validate import header_mismatch
from tests.storage.helpers import make_energon_dataset, write_tar, write_tar_idx

SAMPLES = [(f"{i:04d}", {"txt": f"caption {i}".encode()}) for i in range(6)]


def _rewrite(path, samples):
    """Rewrite a shard keeping its modification time (as a copy with ``cp -p`` would)."""
    st = path.stat()
    write_tar(path, samples)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_reordered_shard_is_a_bad_sample_naming_shard_expected_and_found(tmp_path):
    write_tar(tmp_path / "s.tar", SAMPLES)
    prepare_dataset(tmp_path, fields={"text": "txt"}, sample_type="TextSample")
    _rewrite(tmp_path / "s.tar", SAMPLES[::-1])  # same length, same mtime: open cannot tell
    ds = open_dataset(tmp_path)
    with pytest.raises(BadSampleError) as e:
        ds.read(0)
    msg = str(e.value)
    assert e.value.key == "s/0000" and "s.tar" in msg
    assert "'0000.txt'" in msg and "'0005.txt'" in msg and "re-run `fpipe prepare" in msg
    # under the skip policy every sample is left out and counted, none delivered
    kw = dict(batch_size=6, seed=0, num_epochs=1, error_policy="skip")
    loader = fpipe.get_loader(fpipe.get_train_dataset(str(tmp_path), **kw))
    assert [b for b in loader if b is not None and len(b.text)] == []
    assert loader.stats().skipped == 6


def test_swapped_shards_are_caught_per_read_without_the_open_check(tmp_path):
    # two members per sample: the second member's header (between the two) is the one checked
    two = [(k, {**m, "cls": b"1"}) for k, m in SAMPLES]
    for s in range(2):
        write_tar(tmp_path / f"s{s}.tar", two[s * 3 : s * 3 + 3])
    prepare_dataset(tmp_path)
    a, b, tmp = tmp_path / "s0.tar", tmp_path / "s1.tar", tmp_path / "t.tar"
    os.replace(a, tmp), os.replace(b, a), os.replace(tmp, b)
    ds = open_dataset(tmp_path, shard_check="off")
    for i in range(6):
        with pytest.raises(BadSampleError, match="stale shard"):
            ds.read(i)
        with pytest.raises(BadSampleError, match="stale shard"):
            ds.read(i, frozenset({"cls"}))  # one member read: its own header


def test_header_check_accepts_long_and_non_ascii_names(tmp_path):
    import tarfile

    long_key = "d" * 80 + "/" + "k" * 70
    samples = [(long_key, {"seg.bin": b"x"}), ("caf\u00e9-\u00fc", {"txt": b"y"})]
    for fmt in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT):
        root = tmp_path / str(fmt)
        some = samples[: 1 if fmt == tarfile.USTAR_FORMAT else 2]  # ustar: ASCII only
        write_tar(root / "s.tar", some, fmt=fmt)
        prepare_dataset(root)
        ds = open_dataset(root)
        assert {ds.key(i): ds.read(i) for i in range(len(ds))} == {f"s/{k}": m for k, m in some}
    assert header_mismatch(bytes(512), b"a.txt") == "no tar header"


def test_a_header_cut_short_is_no_header():
    # it raised IndexError (exactly the name's length) or matched (the name and a NUL)
    assert header_mismatch(b"a.txt", b"a.txt") == "no tar header"
    assert header_mismatch(b"a.txt\0", b"a.txt") == "no tar header"


def _energon(tmp_path, samples):
    """An Energon folder of one shard holding ``samples`` (and its .tar.idx)."""
    make_energon_dataset(tmp_path, shards=1, per_shard=len(samples))
    shard = tmp_path / "shards" / "part_000.tar"
    write_tar(shard, samples)
    write_tar_idx(shard)
    return shard


def test_energon_shard_out_of_step_with_its_idx(tmp_path):
    # samples of 2, 4, 2 and 4 blocks; reordered as 2, 2, 4, 4 the .tar.idx ranges
    # [0,2) [2,6) [6,8) [8,12) hold: a whole sample, a sample plus the next one's start, the
    # middle of a member, a whole sample
    sizes = [10, 900, 10, 900]
    samples = [(f"{i:04d}", {"txt": b"x" * n}) for i, n in enumerate(sizes)]
    shard = _energon(tmp_path, samples)
    st = shard.stat()
    write_tar(shard, [samples[2], samples[0], samples[3], samples[1]])
    with pytest.raises(ConfigError, match="modified after its .tar.idx was written"):
        open_dataset(tmp_path)  # a newer shard than its index
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    ds = open_dataset(tmp_path)
    with pytest.raises(BadSampleError, match="stale shard.*'0003.txt'") as e:
        ds.read(1)  # used to deliver sample 0000 (the next sample's start after it ignored)
    assert "part_000.tar" in str(e.value) and "energon prepare" in str(e.value)
    with pytest.raises(BadSampleError, match="stale shard"):
        ds.read(2)
    assert ds.read(3) == {"txt": b"x" * 900}
