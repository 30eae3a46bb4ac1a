"""`prepare_dataset` end to end: index, columns, yaml files, splits, workers, parts."""

from __future__ import annotations

import io
import json
import shutil
import sys
import textwrap

import numpy as np
import pytest
import yaml

from fpipe.core.errors import ConfigError
from fpipe.storage import open_dataset, prepare_dataset
from fpipe.storage.read.tar.index import load_array
from tests.storage.helpers import make_image_caption_dataset


@pytest.fixture
def ds_dir(tmp_path):
    expected = make_image_caption_dataset(tmp_path / "d", shards=3, per_shard=4)
    return tmp_path / "d", expected


def test_roundtrip_keys_bytes_and_columns(ds_dir):
    root, expected = ds_dir
    rep = prepare_dataset(root, fields=["image=jpg", "caption=txt"])
    assert rep.num_samples == 12 and rep.num_shards == 3 and not rep.problems
    ds = open_dataset(root)
    assert len(ds) == 12
    assert ds.config.sample_type == "CaptioningSample"
    assert ds.config.field_map == {"image": "jpg", "caption": "txt"}
    for i, e in enumerate(expected):
        assert ds.key(i) == e["key"]
        assert ds.read(i) == e["members"]
    assert list(ds.column("width")) == [e["width"] for e in expected]
    assert list(ds.column("image.height")) == [e["height"] for e in expected]
    assert list(ds.column("caption.chars")) == [len(e["caption"]) for e in expected]
    assert list(ds.column("bytes")) == [sum(map(len, e["members"].values())) for e in expected]
    assert list(ds.column("shard_id")) == [0] * 4 + [1] * 4 + [2] * 4
    assert set(ds.column_names) >= {"shard_id", "bytes", "width", "height", "caption.chars"}
    with pytest.raises(KeyError, match="no column"):
        ds.column("nope")
    with pytest.raises(IndexError):
        ds.read(12)


def test_index_is_columnar_npy_and_memory_mapped(ds_dir):
    root, _ = ds_dir
    prepare_dataset(root, fields={"image": "jpg"}, compact_index=False)  # the flat layout
    d = root / ".fpipe"
    assert load_array(d / "members" / "offset.npy").dtype == np.int64
    assert load_array(d / "members" / "start.npy").shape == (13,)
    arr = np.load(d / "columns" / "image.width.npy", mmap_mode="r", allow_pickle=False)
    assert isinstance(arr, np.memmap) and arr.shape == (12,)
    assert np.load(d / "keys.offsets.npy").shape == (13,)
    info = yaml.safe_load((d / "info.yaml").read_text())
    assert info["num_samples"] == 12 and info["problems"] == 0
    assert [s["name"] for s in info["shards"]] == [f"shard-{i:04d}.tar" for i in range(3)]


def test_samples_with_different_members(tmp_path):
    from tests.storage.helpers import write_tar

    write_tar(tmp_path / "s.tar", [("a", {"txt": b"1", "cls": b"0"}), ("b", {"txt": b"2"})])
    prepare_dataset(tmp_path)
    ds = open_dataset(tmp_path)
    assert ds.read(0) == {"txt": b"1", "cls": b"0"} and ds.read(1) == {"txt": b"2"}
    assert [len(ds.reader.members(i)) for i in (0, 1)] == [2, 1]
    assert list(ds.column("cls.bytes")) == [1, -1]
    assert ds.config.sample_type == "CrudeSample" and ds.config.field_map == {}


def test_json_fields_and_columns(ds_dir):
    root, expected = ds_dir
    prepare_dataset(
        root,
        fields={"image": "jpg", "caption": "json[caption]"},
        columns=["score=json[score]", "ntags=len(json[tags])", "miss=json[nope]"],
    )
    ds = open_dataset(root)
    assert ds.config.field_map["caption"] == "json[caption]"
    assert np.allclose(ds.column("score"), [int(e["key"][-6:]) / 10 for e in expected])
    assert ds.column("ntags").dtype == np.int64
    assert list(ds.column("ntags")) == [int(e["key"][-6:]) % 4 for e in expected]
    assert np.isnan(ds.column("miss")).all()
    assert list(ds.column("caption.chars")) == [len(e["caption"]) for e in expected]


def test_extra_columns_function(ds_dir, tmp_path, monkeypatch):
    root, expected = ds_dir
    mod = tmp_path / "mylen.py"
    mod.write_text(
        textwrap.dedent("""
        def tokens(sample):
            return {"tokens": len(sample["txt"].split()), "has_json": "json" in sample}
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    rep = prepare_dataset(
        root, fields={"image": "jpg", "caption": "txt"}, extra_columns_fn="mylen:tokens"
    )
    assert not rep.problems
    ds = open_dataset(root)
    assert list(ds.column("tokens")) == [len(e["caption"].split()) for e in expected]
    assert list(ds.column("has_json")) == [1] * 12


def test_split_ratios_explicit_and_exclude(ds_dir):
    root, expected = ds_dir
    prepare_dataset(root, split="1,1,1")
    ds = open_dataset(root)
    assert list(ds.split_indices("train")) == [0, 1, 2, 3]
    assert list(ds.split_indices("val")) == [4, 5, 6, 7]
    assert list(ds.split_indices("test")) == [8, 9, 10, 11]
    with pytest.raises(ConfigError, match="no split 'dev'"):
        ds.split_indices("dev")
    split = yaml.safe_load((root / ".fpipe" / "split.yaml").read_text())
    assert split["split_parts"]["val"] == ["shard-0001.tar"]

    prepare_dataset(
        root,
        split={"train": ["shard-000{0,2}.tar"], "val": "shard-0001.tar"},
        exclude=["shard-0000.tar/1", expected[9]["key"], "shard-0001.tar"],
    )
    ds = open_dataset(root)
    assert list(ds.split_indices("train")) == [0, 2, 3, 8, 10, 11]
    assert list(ds.split_indices("val")) == []


def test_no_split_means_all(ds_dir):
    root, _ = ds_dir
    prepare_dataset(root)
    assert list(open_dataset(root).split_indices("train")) == list(range(12))


def test_split_seed_shuffles_shards(ds_dir):
    root, _ = ds_dir
    rep = prepare_dataset(root, split="2,1", split_seed=3)
    assert rep.splits == {"train": 2, "val": 1}


def test_workers_give_same_index(ds_dir, tmp_path):
    root, expected = ds_dir
    prepare_dataset(root, fields={"image": "jpg"}, workers=2)
    ds = open_dataset(root)
    assert [ds.key(i) for i in range(len(ds))] == [e["key"] for e in expected]
    assert list(ds.column("width")) == [e["width"] for e in expected]


def test_parts_then_merge(ds_dir):
    root, expected = ds_dir
    for i in range(2):
        rep = prepare_dataset(root, fields={"image": "jpg"}, part=f"{i}/2")
        assert rep.part == (i, 2)
    assert not (root / ".fpipe").exists()
    with pytest.raises(ConfigError):
        prepare_dataset(root, part="2/2")
    rep = prepare_dataset(root, fields={"image": "jpg"}, merge=True, split="2,1")
    assert rep.num_samples == 12 and rep.num_shards == 3
    ds = open_dataset(root)
    assert [ds.key(i) for i in range(12)] == [e["key"] for e in expected]
    assert [ds.read(i) for i in range(12)] == [e["members"] for e in expected]
    assert list(ds.column("shard_id")) == [0] * 4 + [1] * 4 + [2] * 4
    assert not (root / ".fpipe-parts").exists()


def _index_bytes(root):
    return {
        str(f.relative_to(root)): f.read_bytes()
        for f in sorted((root / ".fpipe").rglob("*"))
        if f.is_file()
    }


def test_parts_then_merge_write_the_bytes_of_a_plain_prepare(ds_dir, tmp_path):
    """What ``prepare --ray`` runs (parts, then their merge) writes the files, info.yaml
    included, of a plain prepare."""
    root, _ = ds_dir
    plain = tmp_path / "plain"
    shutil.copytree(root, plain)
    options = dict(fields={"image": "jpg", "caption": "txt"}, split="2,1")
    single = prepare_dataset(plain, **options)
    for i in range(2):
        prepare_dataset(root, part=(i, 2), **options)
    merged = prepare_dataset(root, merge=True, **options)
    assert merged.source == single.source == "webdataset"
    got, want = _index_bytes(root), _index_bytes(plain)
    assert got[".fpipe/info.yaml"] == want[".fpipe/info.yaml"]
    assert got == want


def test_merge_with_missing_part_fails(ds_dir):
    root, _ = ds_dir
    prepare_dataset(root, part="0/3")
    with pytest.raises(ConfigError, match=r"parts \[1, 2\] of 3 are missing"):
        prepare_dataset(root, merge=True)


def test_reprepare_keeps_existing_field_map(ds_dir):
    root, _ = ds_dir
    prepare_dataset(root, fields={"image": "jpg"}, split="1,1", sample_type="ImageSample")
    rep = prepare_dataset(root)
    ds = open_dataset(root)
    assert ds.config.field_map == {"image": "jpg"} and ds.config.sample_type == "ImageSample"
    assert rep.splits == {"train": 2, "val": 1}


def test_progress_bar_on_a_terminal_only(ds_dir, capsys, monkeypatch):
    root, _ = ds_dir
    prepare_dataset(root, progress=True)
    assert capsys.readouterr().err == ""  # stderr is not a terminal: no bar, no "\r" lines

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stderr", Terminal())
    prepare_dataset(root, progress=True)
    err = sys.stderr.getvalue()
    assert "3/3" in err and "12 samples" in err and "prepare" in err


def test_bad_arguments():
    with pytest.raises(ConfigError, match="bad field spec"):
        prepare_dataset(".", fields={"image": "jpg[unclosed"})
    with pytest.raises(ConfigError, match="no such folder"):
        prepare_dataset("/nonexistent/dir")


def test_no_pickle_anywhere_in_index(ds_dir):
    root, _ = ds_dir
    prepare_dataset(root, fields={"image": "jpg"})
    for p in (root / ".fpipe").rglob("*.npy"):
        np.load(p, allow_pickle=False)  # raises if an object array had been written
    for line in (root / ".fpipe" / "problems.jsonl").read_text().splitlines():
        json.loads(line)
