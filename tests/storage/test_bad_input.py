"""Bad input at prepare time is reported with file and key; at read time it raises."""

from __future__ import annotations

import gzip
import json
import os
import tracemalloc
import zlib

import pytest

from fpipe.core.errors import BadSampleError, ConfigError, EmptyIndexError
from fpipe.storage import open_dataset, prepare_dataset
from tests.storage.helpers import jpeg_bytes, make_image_caption_dataset, write_tar


def _problems(root):
    lines = (root / ".fpipe" / "problems.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines]


def test_truncated_shard_keeps_complete_samples(tmp_path):
    make_image_caption_dataset(tmp_path, shards=2, per_shard=4)
    shard = tmp_path / "shard-0001.tar"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    rep = prepare_dataset(tmp_path, fields={"image": "jpg", "caption": "txt"})
    assert 4 <= rep.num_samples < 8
    (prob,) = rep.problems
    assert prob.path == "shard-0001.tar" and prob.key.startswith("shard-0001/0000")
    assert "truncated" in prob.reason
    info = (tmp_path / ".fpipe" / "info.yaml").read_text()
    assert "problems: 1" in info and "shard_errors: 1" in info
    assert _problems(tmp_path)[0]["path"] == "shard-0001.tar"


def test_corrupt_shard_header(tmp_path):
    write_tar(tmp_path / "c.tar", [("a", {"txt": b"1"}), ("b", {"txt": b"2"})])
    data = bytearray((tmp_path / "c.tar").read_bytes())
    data[1024:1100] = b"\x01" * 76  # garbage over b's header name
    (tmp_path / "c.tar").write_bytes(bytes(data))
    (tmp_path / "empty.tar").write_bytes(b"garbage, not a tar" * 40)
    with pytest.raises(EmptyIndexError) as raised:  # 'a' was still open when the shard broke
        prepare_dataset(tmp_path)
    rep = raised.value.report
    by_path = {p.path: p for p in rep.problems}
    assert "corrupt tar header" in by_path["c.tar"].reason and by_path["c.tar"].key == "c/a"
    assert "corrupt tar header" in by_path["empty.tar"].reason
    assert rep.num_samples == 0  # 'a' was still open when the shard broke


def test_missing_required_field(tmp_path):
    write_tar(
        tmp_path / "m.tar",
        [
            ("a", {"jpg": jpeg_bytes(4, 4), "txt": b"x"}),
            ("b", {"jpg": jpeg_bytes(4, 4)}),
            ("c", {"png": b"?", "txt": b"y"}),
        ],
    )
    rep = prepare_dataset(tmp_path, fields=["image=jpg", "caption=txt"])
    assert rep.num_samples == 1
    reasons = {p.key: p.reason for p in rep.problems}
    assert reasons["m/b"] == "missing field 'caption' (txt)"
    assert reasons["m/c"] == "missing field 'image' (jpg)"
    assert open_dataset(tmp_path).key(0) == "m/a"


def test_alternatives_and_json_path_missing(tmp_path):
    write_tar(
        tmp_path / "j.tar",
        [
            ("a", {"png": b"\x89PNG", "json": b'{"c": "x"}'}),
            ("b", {"jpg": jpeg_bytes(3, 2), "json": b'{"d": 1}'}),
            ("c", {"jpg": jpeg_bytes(3, 2), "json": b"{broken"}),
        ],
    )
    with pytest.raises(EmptyIndexError) as raised:
        prepare_dataset(tmp_path, fields={"image": "jpg,png", "caption": "json[c]"})
    reasons = {p.key: p.reason for p in raised.value.report.problems}
    assert "undecodable image header" in reasons["j/a"]  # png alternative chosen, bad header
    assert reasons["j/b"] == "missing field 'caption' (json[c])"
    assert "not valid JSON" in reasons["j/c"]


def test_undecodable_image_and_bad_gzip_and_duplicates(tmp_path):
    write_tar(
        tmp_path / "b.tar",
        [
            ("good", {"jpg": jpeg_bytes(5, 6), "txt.gz": gzip.compress(b"ok")}),
            ("badimg", {"jpg": b"\xff\xd8\xff garbage", "txt.gz": gzip.compress(b"ok")}),
            ("badgz", {"jpg": jpeg_bytes(5, 6), "txt.gz": b"not gzip"}),
        ],
    )
    write_tar(tmp_path / "d.tar", [("dup", {"txt": b"1"}), ("dup", {"txt": b"2"})])
    rep = prepare_dataset(tmp_path)  # crude: every image/text member is checked
    reasons = {p.key: p.reason for p in rep.problems}
    assert "undecodable image header" in reasons["b/badimg"]
    assert "corrupt gzip member 'txt.gz'" in reasons["b/badgz"]
    assert "duplicate members" in reasons["d/dup"]
    ds = open_dataset(tmp_path)
    assert len(ds) == 1 and ds.read(0)["txt"] == b"ok"


def test_read_failure_names_file_and_key(tmp_path):
    make_image_caption_dataset(tmp_path, shards=1, per_shard=3)
    prepare_dataset(tmp_path)
    ds = open_dataset(tmp_path)
    shard = tmp_path / "shard-0000.tar"
    shard.write_bytes(shard.read_bytes()[:1024])  # shard shrank after prepare
    with pytest.raises(BadSampleError) as ei:
        ds.read(2)
    assert ei.value.path.endswith("shard-0000.tar") and ei.value.key == "shard-0000/000002"
    with pytest.raises(ConfigError, match="re-run `fpipe prepare"):
        open_dataset(tmp_path)  # opening again: the shard changed since it was indexed
    shard.unlink()
    with pytest.raises(ConfigError, match="cannot be read"):
        open_dataset(tmp_path)
    ds2 = open_dataset(tmp_path, shard_check="off")  # reads fail per sample instead
    with pytest.raises(BadSampleError, match="shard-0000/000001"):
        ds2.read(1)


@pytest.mark.parametrize("cut", ["padding", "boundary"])
def test_truncation_anywhere_is_reported_with_shard_and_key(tmp_path, cut):
    """Cut inside the zero padding after a member, or exactly at a member boundary: prepare
    keeps the complete samples and reports the shard and the last key (an empty header read
    used to count as the end of the archive)."""
    samples = [(f"{i:04d}", {"txt": f"caption number {i}".encode()}) for i in range(10)]
    write_tar(tmp_path / "t.tar", samples)
    data = (tmp_path / "t.tar").read_bytes()
    # sample 0: header at 0, data at 512..512+len, padding to 1024; sample 1 starts at 1024
    end = 600 if cut == "padding" else 1024
    (tmp_path / "t.tar").write_bytes(data[:end])
    rep = prepare_dataset(tmp_path, fields={"text": "txt"})
    assert rep.num_samples == 1
    (prob,) = rep.problems
    assert prob.path == "t.tar" and prob.key == "t/0000"
    assert ("padding" if cut == "padding" else "end-of-archive") in prob.reason


def _tar_gz_with_huge_member(path, declared: int) -> None:
    """A .tar.gz whose second member's header declares ``declared`` bytes (base-256 size)."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for key, data in (("0000", b"first"), ("0001", b"second")):
            info = tarfile.TarInfo(f"{key}.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    raw = bytearray(buf.getvalue())
    header = raw[1024:1536]
    header[124:136] = b"\x80" + declared.to_bytes(11, "big")  # GNU base-256 size field
    header[148:156] = b"        "
    header[148:156] = f"{sum(header):06o}\0 ".encode()
    raw[1024:1536] = header
    path.write_bytes(gzip.compress(bytes(raw)))


def test_tar_gz_member_declaring_2_to_62_bytes_is_reported(tmp_path):
    _tar_gz_with_huge_member(tmp_path / "g.tar.gz", 2**62)
    rep = prepare_dataset(tmp_path, fields={"text": "txt"})  # no MemoryError
    assert rep.num_samples == 1
    (prob,) = rep.problems
    assert prob.path == "g.tar.gz" and "0001" in prob.key


def test_corrupt_tar_gz_is_a_bad_sample_and_leaves_no_partial_copy(tmp_path):
    write_tar(tmp_path / "z.tar", [(f"{i:04d}", {"txt": b"x" * 3000}) for i in range(6)])
    (tmp_path / "z.tar.gz").write_bytes(gzip.compress((tmp_path / "z.tar").read_bytes()))
    (tmp_path / "z.tar").unlink()
    prepare_dataset(tmp_path, fields={"text": "txt"})
    data = bytearray((tmp_path / "z.tar.gz").read_bytes())
    data[30:80] = b"\xff" * 50  # corrupt the deflate stream, same size and mtime kept
    st = (tmp_path / "z.tar.gz").stat()
    (tmp_path / "z.tar.gz").write_bytes(bytes(data))
    os.utime(tmp_path / "z.tar.gz", ns=(st.st_atime_ns, st.st_mtime_ns))
    ds = open_dataset(tmp_path)
    with pytest.raises(BadSampleError, match="gzip"):
        ds.read(0)
    left = list((tmp_path / ".fpipe").rglob("*.tmp-*"))
    assert not left, left
    with pytest.raises(EmptyIndexError) as raised:  # no zlib.error escapes prepare
        prepare_dataset(tmp_path, fields={"text": "txt"})
    rep = raised.value.report
    assert rep.problems and rep.problems[0].path == "z.tar.gz"


def _gzip_bomb(size: int) -> bytes:
    """A gzip member of a few KB inflating to ``size`` bytes of text."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    return c.compress(b"a" * size) + c.flush()


def test_txt_gz_bomb_is_counted_not_held_inflated(tmp_path):
    """A text field's `.chars` column counts a .gz member's characters as it inflates: peak
    memory is one chunk, not the member inflated (and decoded) whole."""
    size = 16 << 20
    write_tar(
        tmp_path / "s.tar",
        [("bomb", {"txt.gz": _gzip_bomb(size)}), ("ok", {"txt.gz": gzip.compress("é!".encode())})],
    )
    tracemalloc.start()
    try:
        rep = prepare_dataset(tmp_path, workers=1)  # in process; crude: a txt.chars column
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rep.num_samples == 2 and not rep.problems
    assert peak < size // 4, f"prepare peaked at {peak / 2**20:.1f} MiB"
    chars = open_dataset(tmp_path).column("txt.chars").tolist()
    assert chars == [size, 2]


def test_gz_member_over_the_inflate_limit_is_left_out_at_prepare(tmp_path):
    from fpipe.decode.limits import DecodeLimits
    from fpipe.storage.prepare.scan import ScanOptions, scan_shard

    write_tar(
        tmp_path / "s.tar",
        [("bomb", {"txt.gz": _gzip_bomb(4 << 20)}), ("ok", {"txt.gz": gzip.compress(b"ok")})],
    )
    scan = scan_shard(
        str(tmp_path), "s.tar", ScanOptions(limits=DecodeLimits(max_inflated_bytes=1 << 20))
    )
    assert scan.keys == ["ok"]
    ((path, key, reason),) = scan.problems
    assert (path, key) == ("s.tar", "s/bomb")
    assert "'txt.gz'" in reason and "max_inflated_bytes=1048576" in reason
