"""Hugging Face ``save_to_disk`` folders (Arrow stream files) indexed in place, as Parquet files
are: the same rows as ``datasets.load_from_disk`` gives, splits from the ``DatasetDict``,
record batches read one at a time by their recorded offsets, a ``Dataset`` folder and a
``datasets`` cache folder, and truncated files (left out at prepare, a typed error naming
file and row at read time)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.storage import open_dataset, prepare_dataset
from fpipe.storage.prepare._hf_arrow import hf_arrow_files
from tests.optional import skip_unless_installed
from tests.storage.parquet_helpers import image_bytes, write_saved_dataset

skip_unless_installed("datasets")  # imported in the tests: ~1.6 s at collection otherwise


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    import datasets

    datasets.disable_progress_bars()
    root = write_saved_dataset(tmp_path_factory.mktemp("saved"))
    prepare_dataset(root)
    return root


def test_rows_equal_what_load_from_disk_gives(saved):
    import datasets

    hf = datasets.load_from_disk(str(saved))
    ds = open_dataset(saved)
    assert ds.layout == "parquet"
    for ours, theirs in (("train", "train"), ("val", "validation"), ("validation", "validation")):
        rows = hf[theirs].cast_column("image", datasets.Image(decode=False))
        idx = ds.split_indices(ours)
        assert len(idx) == len(rows)
        for i, row in zip(idx, rows):
            got = ds.read(int(i))
            assert got["image"] == row["image"]["bytes"]  # bytes equal
            assert got["text"].decode() == row["text"]
            assert int(got["tokens"]) == row["tokens"]
            assert float(got["score"]) == pytest.approx(row["score"])
    assert ds.key(0) == "train/data-00000-of-00003/0"
    assert ds.key(int(ds.split_indices("val")[8])) == "validation/data-00000-of-00001/8"


def test_prepare_writes_field_map_splits_batch_offsets_and_columns(saved):
    ds = open_dataset(saved)
    assert ds.config.sample_type == "CaptioningSample"
    assert dict(ds.config.field_map) == {"image": "image", "caption": "text"}
    assert ds.split_names == ("train", "val", "validation")
    assert len(ds.split_indices("train")) == 50 and len(ds.split_indices("val")) == 12
    assert ds.decode_exts(0) == {"image": "jpg", "text": "txt", "tokens": "json", "score": "json"}
    assert ds.column("tokens")[9] == 3 + 9 % 7 and ds.column("image.bytes")[9] == len(
        image_bytes(9)
    )
    info = (saved / ".fpipe" / "info.yaml").read_text()
    assert "kind: parquet" in info and "format: arrow" in info and "source: arrow" in info
    # batches of 7 rows: rows 0-6, 7-13 and 14-16 of the first file start at three offsets
    offsets = np.load(saved / ".fpipe" / "parquet" / "batch_offset.npy")
    assert len(np.unique(offsets[:17])) == 3 and offsets[0] > 0
    assert list(np.load(saved / ".fpipe" / "parquet" / "row_group.npy")[:17]) == (
        [0] * 7 + [1] * 7 + [2] * 3
    )
    assert not list((saved / ".fpipe").rglob("*.arrow"))  # nothing copied


def test_each_record_batch_decoded_once_in_order_and_columns_projected(saved):
    ds = open_dataset(saved, row_group_cache=2)
    reader = ds.reader
    for i in range(len(ds)):
        ds.read(i, frozenset({"text"}))
    assert reader.decoded_row_groups == 3 + 3 + 3 + 2  # batches of 7 rows per file
    assert all(set(g) == {"text"} for g in reader._groups.values())  # image never decoded
    assert set(ds.read(20)) == {"image", "text", "tokens", "score"}


def test_a_dataset_folder_and_a_datasets_cache_folder(saved, tmp_path):
    one = tmp_path / "one"
    shutil.copytree(saved / "train", one)
    report = prepare_dataset(one)
    assert report.source == "arrow" and report.num_samples == 50 and report.splits == {}
    ds = open_dataset(one)
    assert ds.key(17) == "data-00001-of-00003/0"
    assert ds.read(17) == open_dataset(saved).read(17)
    # a cache folder: <builder>-<split>-0000k-of-0000n.arrow beside dataset_info.json
    cache = tmp_path / "cache"
    cache.mkdir()
    for split in ("train", "validation"):
        for f in sorted((saved / split).glob("*.arrow")):
            shutil.copy(f, cache / f"generator-{split}-{f.name[5:]}")
    (cache / "dataset_info.json").write_text(json.dumps({"features": {}}))
    (cache / "cache-0123abcd.arrow").write_bytes(b"a map() result, not the dataset")
    report = prepare_dataset(cache)
    assert report.num_samples == 62 and not report.problems
    assert report.splits == {"train": 3, "val": 1, "validation": 1}


def test_truncated_file_rows_left_out_at_prepare_and_named_at_read(saved, tmp_path):
    root = tmp_path / "cut"
    shutil.copytree(saved, root, ignore=shutil.ignore_patterns(".fpipe"))
    cut = root / "train" / "data-00001-of-00003.arrow"
    data = cut.read_bytes()
    cut.write_bytes(data[: len(data) - 300])  # the last record batch is cut short
    (root / "validation" / "data-00000-of-00001.arrow").write_bytes(b"ARROW1\x00 not a stream")
    report = prepare_dataset(root)
    assert report.num_samples == 62 - 3 - 12
    cut_short, garbage = report.problems
    assert "data-00001-of-00003" in str(cut_short)
    assert "train/data-00001-of-00003/14" in str(cut_short)  # the first row left out
    assert "validation/data-00000-of-00001" in str(garbage) and "unreadable" in str(garbage)
    ds = open_dataset(root)
    assert ds.read(17 + 13)["text"] == b"train caption 30"  # the batches before it are kept
    # a file cut after prepare: a typed error naming the file and the row
    cut.write_bytes(data[:3000])
    ds = open_dataset(root, shard_check="off")
    with pytest.raises(BadSampleError, match=r"data-00001-of-00003.*train/data-00001-of-00003/8"):
        ds.read(17 + 8)


def test_shards_pick_files_and_object_storage_is_refused(saved, tmp_path):
    report = prepare_dataset(saved, shards=["train/*"], index_dir=tmp_path / "idx")
    assert report.num_samples == 50 and report.splits == {"train": 3}
    with pytest.raises(ConfigError, match="local disk only"):
        prepare_dataset(saved.as_uri(), index_dir=tmp_path / "remote")


def test_bad_state_json_is_a_config_error(saved, tmp_path):
    root = tmp_path / "bad"
    shutil.copytree(saved / "train", root)
    (root / "state.json").write_text(json.dumps({"_data_files": [{"filename": "nope.arrow"}]}))
    with pytest.raises(ConfigError, match="nope.arrow"):
        prepare_dataset(root)
    other = tmp_path / "other"  # a state.json of some other tool: not a save_to_disk folder
    other.mkdir()
    (other / "state.json").write_text(json.dumps({"step": 3}))
    assert hf_arrow_files(other) is None
