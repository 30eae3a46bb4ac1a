"""Shard listing, member names and the tar header walk (fast path and tarfile fallback)."""

from __future__ import annotations

import gzip
import io
import tarfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fpipe.storage import open_dataset, prepare_dataset
from fpipe.storage.read.webdataset import (
    ShardError,
    _checksum_ok,
    expand_braces,
    iter_samples,
    list_shards,
    split_name,
)
from tests.storage.helpers import jpeg_bytes, write_tar


def test_split_name_follows_webdataset():
    assert split_name("a/b.c/001.seg.png") == ("a/b.c/001", "seg.png")
    assert split_name("x.txt.gz") == ("x", "txt.gz")
    assert split_name("noext") is None
    assert split_name("dir/.hidden") is None
    assert split_name("__info__/x.json") is None  # Energon-style meta folder
    assert split_name("__key__.json") == ("__key__", "json")


def test_expand_braces():
    assert expand_braces("s-{0..2}.tar") == ["s-0.tar", "s-1.tar", "s-2.tar"]
    assert expand_braces("{a,b}/{008..010}") == [
        "a/008",
        "a/009",
        "a/010",
        "b/008",
        "b/009",
        "b/010",
    ]
    assert expand_braces("plain") == ["plain"]


def test_list_shards_nested_braces_and_hidden(tmp_path):
    for name in ["a/s-0.tar", "a/b/s-1.tar", "c.tgz", "d.tar.gz", ".fpipe/x.tar", "e.txt"]:
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"")
    assert list_shards(tmp_path) == ["a/b/s-1.tar", "a/s-0.tar", "c.tgz", "d.tar.gz"]
    assert list_shards(tmp_path, ["a/s-{0..1}.tar", "a/b/*.tar"]) == ["a/b/s-1.tar", "a/s-0.tar"]


def _walk(data: bytes, plan=lambda e: -1):
    return list(iter_samples(io.BytesIO(data), len(data), plan))


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT])
def test_walk_long_names_and_formats(tmp_path, fmt):
    long_key = "d" * 60 + "/" + "k" * 120  # > 100 chars: GNU longname / pax path / ustar prefix
    samples = [(long_key, {"txt": b"hello", "seg.png": b"xx"}), ("short", {"txt": b"hi"})]
    if fmt == tarfile.USTAR_FORMAT:
        samples[0] = ("d" * 60 + "/" + "k" * 90, samples[0][1])
    path = write_tar(tmp_path / "s.tar", samples, fmt=fmt, dirs=True)
    got = _walk(path.read_bytes())
    assert [g[0] for g in got] == [samples[0][0], "short"]
    assert got[0][1] == ["txt", "seg.png"] and got[0][4]["txt"] == b"hello"
    data = path.read_bytes()
    for _, exts, offs, sizes, content in got:
        for e, o, s in zip(exts, offs, sizes):
            assert data[o : o + s] == content[e]


def test_walk_pax_headers_with_unicode(tmp_path):
    path = write_tar(
        tmp_path / "u.tar", [("clé/été", {"txt": "ü".encode()})], fmt=tarfile.PAX_FORMAT
    )
    ((key, exts, _, _, content),) = _walk(path.read_bytes())
    assert key == "clé/été" and content["txt"] == "ü".encode()


def test_walk_plan_reads_prefix_only(tmp_path):
    img = jpeg_bytes(50, 40)
    path = write_tar(tmp_path / "p.tar", [("a", {"jpg": img, "cls": b"1"})])
    ((_, _, _, _, content),) = _walk(path.read_bytes(), lambda e: 10 if e == "jpg" else 0)
    assert content == {"jpg": img[:10]}


def test_walk_nonconsecutive_key_is_new_sample(tmp_path):
    path = write_tar(
        tmp_path / "n.tar", [("a", {"txt": b"1"}), ("b", {"txt": b"2"}), ("a", {"cls": b"3"})]
    )
    assert [g[0] for g in _walk(path.read_bytes())] == ["a", "b", "a"]


def test_walk_truncated_and_corrupt(tmp_path):
    path = write_tar(tmp_path / "t.tar", [("a", {"txt": b"x" * 600}), ("b", {"txt": b"y" * 600})])
    data = path.read_bytes()
    cut = data[:2300]  # inside the data of b.txt
    it = iter_samples(io.BytesIO(cut), len(cut), lambda e: 0)
    assert next(it)[0] == "a"
    with pytest.raises(ShardError) as ei:
        next(it)
    assert ei.value.key == "b" and "truncated" in ei.value.reason
    bad = bytearray(data)
    bad[1536 + 124 : 1536 + 130] = b"zzzzzz"  # corrupt b's header (size field + checksum)
    with pytest.raises(ShardError, match="corrupt tar header"):
        _walk(bytes(bad))


def test_gzip_shard_and_gz_members_end_to_end(tmp_path):
    members = {"txt.gz": gzip.compress(b"zipped caption"), "jpg": jpeg_bytes(12, 9)}
    write_tar(tmp_path / "a.tar.gz", [("k1", members), ("k2", members)], compress=True)
    write_tar(tmp_path / "p.tgz", [("k3", {"txt": b"plain"})], compress=True)
    rep = prepare_dataset(tmp_path)
    assert rep.num_samples == 3 and not rep.problems
    ds = open_dataset(tmp_path)
    assert ds.read(0) == {"txt": b"zipped caption", "jpg": members["jpg"]}
    assert ds.key(2) == "p/k3" and ds.read(2) == {"txt": b"plain"}
    assert list(ds.column("txt.chars")) == [14, 14, 5]
    assert list(ds.column("jpg.width"))[:2] == [12, 12]
    assert (tmp_path / ".fpipe" / "decompressed" / "a.tar").exists()


def _plain_checksum_ok(h: bytes) -> bool:
    """The definition: the stored octal checksum is the byte sum with the field as spaces."""
    try:
        stored = int(h[148:156].split(b"\0", 1)[0].strip() or b"-1", 8)
    except ValueError:
        return False
    return sum(h) - sum(h[148:156]) + 256 == stored


@given(
    name=st.integers(0, 10**12),
    size=st.integers(0, 8**11 - 1),
    edits=st.lists(st.tuples(st.integers(0, 511), st.integers(0, 255)), max_size=3),
    checksum=st.one_of(st.none(), st.integers(0, 8**6 - 1)),
)
def test_header_checksum_is_the_byte_sum(name, size, edits, checksum):
    ti = tarfile.TarInfo(f"shard/{name:013d}.seg.png")
    ti.size = size
    h = bytearray(ti.tobuf(format=tarfile.GNU_FORMAT)[:512])
    if checksum is not None:  # a stored value that may or may not be the sum
        h[148:156] = b"%06o\0 " % checksum
    for i, v in edits:
        h[i] = v
    assert _checksum_ok(bytes(h)) == _plain_checksum_ok(bytes(h))
    # the same sum modulo 65521 but not modulo 2 (or the reverse) is refused
    for delta in (1, 65521, 131042):
        bad = bytearray(h)
        want = sum(h) - sum(h[148:156]) + 256 + delta
        bad[148:156] = b"%06o\0 " % want if want < 8**6 else b"7777777\0"
        assert not _checksum_ok(bytes(bad))
