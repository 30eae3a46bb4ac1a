"""The member table: memory and files linear in members whatever the number of distinct
extensions; indexes of format 1 (two arrays per extension) still read."""

from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pytest
import yaml

from fpipe.core.errors import ConfigError
from fpipe.storage import open_dataset, prepare_dataset
from fpipe.storage.prepare.check import check_dataset
from fpipe.storage.prepare.shards import MAX_EXTENSION_FIELDS
from tests.storage.helpers import make_image_caption_dataset, write_tar


def _files(folder) -> int:
    return sum(len(names) for _, _, names in os.walk(folder))


def test_distinct_extensions_keep_memory_and_files_linear_in_members(tmp_path):
    n = 500  # every sample has a txt and a member with an extension no other sample has
    samples = [(f"{i:05d}", {"txt": f"t{i}".encode(), f"e{i}": bytes([i % 256])}) for i in range(n)]
    write_tar(tmp_path / "s.tar", samples)
    tracemalloc.start()
    try:
        report = prepare_dataset(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert report.num_samples == n and len(report.members) == n + 1
    # per-extension arrays of length n took 12 MB and 1,511 files here (47 MB at n=1000: O(n^2))
    assert peak < 4 * 2**20, peak
    assert _files(tmp_path / ".fpipe") < 20
    ds = open_dataset(tmp_path)
    for i in (0, 1, 377, n - 1):
        assert ds.read(i) == samples[i][1]
        assert ds.read(i, frozenset({"txt"})) == {"txt": samples[i][1]["txt"]}
    # only the extension every sample has gets per-field columns
    assert set(ds.column_names) == {"shard_id", "bytes", "txt.bytes", "txt.chars"}
    assert list(ds.column("bytes")[:2]) == [3, 3]


def test_at_most_max_extension_fields_get_columns(tmp_path):
    exts = [f"x{j:03d}" for j in range(MAX_EXTENSION_FIELDS + 6)]
    samples = [(f"{i}", {e: b"ab"[: 1 + (j < 3)] for j, e in enumerate(exts)}) for i in range(2)]
    samples[0][1]["x999"] = b"rare"
    write_tar(tmp_path / "s.tar", samples)
    prepare_dataset(tmp_path)
    ds = open_dataset(tmp_path)
    fields = {c.rsplit(".", 1)[0] for c in ds.column_names if c.endswith(".bytes")}
    assert fields == set(exts[:MAX_EXTENSION_FIELDS])  # ties: by name; x999 is the rarest
    assert ds.read(0) == samples[0][1] and ds.read(1) == samples[1][1]


def _to_format_1(index) -> None:
    """Rewrite a prepared index as fpipe wrote it before the member table: members/<ext>.
    offset|size.npy of length n, -1 where absent, and ``version: 1``."""
    info = yaml.safe_load((index / "info.yaml").read_text())
    start, ext, offset, size = (
        np.load(index / "members" / f"{a}.npy") for a in ("start", "ext", "offset", "size")
    )
    n = len(start) - 1
    sample = np.repeat(np.arange(n), np.diff(start))
    for e, name in enumerate(info["members"]):
        off, sz = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
        off[sample[ext == e]], sz[sample[ext == e]] = offset[ext == e], size[ext == e]
        np.save(index / "members" / f"{name}.offset.npy", off)
        np.save(index / "members" / f"{name}.size.npy", sz)
    for a in ("start", "ext", "offset", "size"):
        (index / "members" / f"{a}.npy").unlink()
    info["version"] = 1
    del info["num_members"]
    (index / "info.yaml").write_text(yaml.safe_dump(info, sort_keys=False))


def test_an_index_of_format_1_still_reads(tmp_path):
    expected = make_image_caption_dataset(tmp_path, shards=2, per_shard=3)
    prepare_dataset(tmp_path, fields={"image": "jpg", "caption": "txt"}, compact_index=False)
    _to_format_1(tmp_path / ".fpipe")
    ds = open_dataset(tmp_path)
    assert ds.record.num_members is None
    assert [ds.read(i) for i in range(6)] == [e["members"] for e in expected]
    assert ds.read(2, frozenset({"txt"})) == {"txt": expected[2]["members"]["txt"]}
    assert ds.read_many([3, 0]) == [(ds.key(i), expected[i]["members"]) for i in (3, 0)]
    assert check_dataset(tmp_path, progress=False).ok
    size = np.load(tmp_path / ".fpipe" / "members" / "jpg.size.npy")
    np.save(tmp_path / ".fpipe" / "members" / "jpg.size.npy", size.astype(np.float32))
    with pytest.raises(ConfigError, match="jpg.size.npy"):
        open_dataset(tmp_path).read(0)


def test_a_part_of_format_1_is_refused_by_merge(tmp_path):
    make_image_caption_dataset(tmp_path, shards=2, per_shard=2)
    for i in range(2):
        prepare_dataset(tmp_path, part=(i, 2))
    _to_format_1(tmp_path / ".fpipe-parts" / "part-1-of-2")
    with pytest.raises(ConfigError, match="older fpipe.*--part i/n"):
        prepare_dataset(tmp_path, merge=True)
