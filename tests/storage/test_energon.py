"""Energon-prepared folders: loaded through .tar.idx without preparing, or converted."""

from __future__ import annotations

import tarfile

import numpy as np
import pytest
import yaml

from fpipe.core.errors import ConfigError
from fpipe.storage import open_dataset, prepare_dataset
from tests.storage.helpers import make_energon_dataset


@pytest.mark.parametrize("info_json", [False, True])
def test_loads_without_preparing(tmp_path, info_json):
    expected = make_energon_dataset(tmp_path, shards=2, per_shard=3, info_json=info_json)
    ds = open_dataset(tmp_path)
    assert ds.layout == "energon" and len(ds) == 6
    assert ds.config.sample_type == "CaptioningSample"
    assert ds.config.field_map == {"image": "jpg", "caption": "txt"}
    for i, e in enumerate(expected):
        assert ds.key(i) == e["key"]
        assert ds.read(i) == e["members"]
    assert list(ds.column("shard_id")) == [0, 0, 0, 1, 1, 1]
    assert ds.column("bytes").min() > 0
    assert not (tmp_path / ".fpipe").exists()


def test_energon_split_and_excludes(tmp_path):
    make_energon_dataset(
        tmp_path,
        shards=3,
        per_shard=2,
        split={
            "train": ["shards/part_000.tar", "shards/part_001.tar"],
            "val": ["shards/part_002.tar"],
        },
        exclude=["shards/part_000.tar/1", "shards/part_002.tar"],
    )
    ds = open_dataset(tmp_path)
    assert ds.split_names == ("train", "val")
    assert list(ds.split_indices("train")) == [0, 2, 3]
    assert list(ds.split_indices("val")) == []


def test_convert_in_place_leaves_shards_alone(tmp_path):
    expected = make_energon_dataset(
        tmp_path, shards=2, per_shard=3, exclude=["shards/part_001.tar/0"]
    )
    before = {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    rep = prepare_dataset(tmp_path)
    assert rep.source == "energon" and rep.num_samples == 6
    after = {p: p.read_bytes() for p in before}
    assert before == after
    ds = open_dataset(tmp_path)
    assert ds.layout == "tar"
    assert ds.config.sample_type == "CaptioningSample"
    assert [ds.key(i) for i in range(6)] == [e["key"] for e in expected]
    assert list(ds.column("width")) == [e["width"] for e in expected]
    split = yaml.safe_load((tmp_path / ".fpipe" / "split.yaml").read_text())
    assert split["exclude"] == [expected[3]["key"]]  # index exclude rewritten as a key
    assert list(ds.split_indices("train")) == [0, 1, 2, 4, 5]


def test_stale_tar_idx_is_reported(tmp_path):
    make_energon_dataset(tmp_path, shards=1, per_shard=3)
    idx = tmp_path / "shards" / "part_000.tar.idx"
    idx.write_bytes(idx.read_bytes()[:-8])
    ds = open_dataset(tmp_path)
    with pytest.raises(ConfigError, match="stale"):
        ds.read(0)


def test_nv_meta_with_only_dataset_and_split_yaml_opens(tmp_path):
    """The layout of Energon's guide (dataset.yaml and split.yaml written by hand, no
    .info.yaml, no .tar.idx) opens as the prepared folder does: same samples, keys, splits and
    excludes; nothing is written."""
    make_energon_dataset(
        tmp_path,
        shards=3,
        per_shard=2,
        split={"train": ["shards/part_{000..001}.tar"], "val": ["shards/part_002.tar"]},
        exclude=["shards/part_001.tar/1"],
    )
    prepared = open_dataset(tmp_path)
    want = [(prepared.key(i), prepared.read(i)) for i in range(len(prepared))]
    want_splits = [list(prepared.split_indices(s)) for s in ("train", "val")]
    (tmp_path / ".nv-meta" / ".info.yaml").unlink()
    for idx in (tmp_path / "shards").glob("*.idx"):
        idx.unlink()
    files = sorted(p for p in tmp_path.rglob("*"))
    ds = open_dataset(tmp_path)
    assert [(ds.key(i), ds.read(i)) for i in range(len(ds))] == want
    assert [list(ds.split_indices(s)) for s in ("train", "val")] == want_splits
    assert ds.config.field_map == {"image": "jpg", "caption": "txt"}
    assert sorted(p for p in tmp_path.rglob("*")) == files


def test_nv_meta_without_split_or_info_names_the_command(tmp_path):
    make_energon_dataset(tmp_path, shards=1, per_shard=1)
    (tmp_path / ".nv-meta" / ".info.yaml").unlink()
    (tmp_path / ".nv-meta" / "split.yaml").unlink()
    with pytest.raises(ConfigError, match="neither split.yaml nor .info.yaml") as e:
        open_dataset(tmp_path)
    assert f"`fpipe prepare {tmp_path}`" in str(e.value)  # the exact command
    assert "holds dataset.yaml" in str(e.value)  # what the folder holds


def test_prepare_nv_meta_with_only_dataset_and_split_yaml(tmp_path):
    """The layout of Energon's guide: .nv-meta holds dataset.yaml and split.yaml only (no
    .info.yaml, no .tar.idx). `fpipe prepare` indexes it with the user's field map, sample type
    and split; an index-style exclude becomes the sample's key; .nv-meta is left as it was."""
    expected = make_energon_dataset(
        tmp_path,
        shards=3,
        per_shard=2,
        split={"train": ["shards/part_{000..001}.tar"], "val": ["shards/part_002.tar"]},
        exclude=["shards/part_001.tar/1"],
    )
    (tmp_path / ".nv-meta" / ".info.yaml").unlink()
    for idx in (tmp_path / "shards").glob("*.idx"):
        idx.unlink()
    meta = {p.name: p.read_bytes() for p in (tmp_path / ".nv-meta").iterdir()}
    rep = prepare_dataset(tmp_path, progress=False)
    assert rep.num_samples == 6 and rep.splits == {"train": 2, "val": 1}
    assert {p.name: p.read_bytes() for p in (tmp_path / ".nv-meta").iterdir()} == meta
    ds = open_dataset(tmp_path)
    assert ds.layout == "tar" and ds.config.sample_type == "CaptioningSample"
    assert ds.config.field_map == {"image": "jpg", "caption": "txt"}
    assert list(ds.split_indices("train")) == [0, 1, 2]
    assert list(ds.split_indices("val")) == [4, 5]
    split = yaml.safe_load((tmp_path / ".fpipe" / "split.yaml").read_text())
    assert split["exclude"] == [expected[3]["key"]]


def test_bytes_column_matches_idx(tmp_path):
    make_energon_dataset(tmp_path, shards=1, per_shard=3)
    offs = np.fromfile(tmp_path / "shards" / "part_000.tar.idx", dtype="<u8")
    assert list(open_dataset(tmp_path).column("bytes")) == list(np.diff(offs))


def test_split_brace_ranges_load_and_convert(tmp_path):
    # energon prepare writes consecutive shards of a split as one brace range
    make_energon_dataset(
        tmp_path,
        shards=4,
        per_shard=2,
        split={"train": ["shards/part_{000..002}.tar"], "val": ["shards/part_003.tar"]},
    )
    ds = open_dataset(tmp_path)
    assert list(ds.split_indices("train")) == list(range(6))
    assert list(ds.split_indices("val")) == [6, 7]
    rep = prepare_dataset(tmp_path)
    assert rep.splits == {"train": 3, "val": 1}
    split = yaml.safe_load((tmp_path / ".fpipe" / "split.yaml").read_text())
    assert split["split_parts"]["train"] == [f"shards/part_{i:03d}.tar" for i in range(3)]
    assert list(open_dataset(tmp_path).split_indices("train")) == list(range(6))


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT, tarfile.PAX_FORMAT])
def test_member_keys_from_tar_headers(tmp_path, fmt):
    """Join keys of an unprepared Energon folder: read from each sample's first header, with
    long names (GNU/pax extra headers) and POSIX name prefixes parsed too."""
    from fpipe.storage.read.keys import member_key, member_keys
    from tests.storage.helpers import write_tar, write_tar_idx

    keys = ["d" * 60 + "/" + "k" * 60, "short", "dir/x", "é-key"]
    if fmt == tarfile.USTAR_FORMAT:
        keys[0] = "d" * 60 + "/" + "k" * 50  # ustar: a name longer than 100 goes to prefix
    write_tar(tmp_path / "s" / "p0.tar", [(k, {"txt": b"x"}) for k in keys], fmt=fmt)
    write_tar_idx(tmp_path / "s" / "p0.tar")
    (tmp_path / ".nv-meta").mkdir()
    (tmp_path / ".nv-meta" / ".info.yaml").write_text(
        yaml.safe_dump({"shard_counts": {"s/p0.tar": 4}})
    )
    ds = open_dataset(tmp_path)
    assert [member_key(ds, i) for i in range(4)] == keys
    assert member_keys(ds, np.arange(4)).tolist() == [k.encode() for k in keys]
