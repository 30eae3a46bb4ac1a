"""Parquet files indexed in place: the same rows as Hugging Face ``datasets`` reads, splits
from the Hub's file names, metadata columns, row-group reads and their cache, column
projection, object storage, and hostile files (a typed error naming file and row)."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fpipe.core.errors import BadSampleError
from fpipe.storage import open_dataset, prepare_dataset
from fpipe.storage.read.parquet_open import open_parquet
from tests.storage.parquet_helpers import image_bytes, write_hub_dataset


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = write_hub_dataset(tmp_path_factory.mktemp("hub"))
    prepare_dataset(root)
    return root


def _hf_rows(root, cache, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    datasets.disable_progress_bars()
    files = {
        "train": sorted(str(p) for p in (root / "data").glob("train-*.parquet")),
        "validation": sorted(str(p) for p in (root / "data").glob("validation-*.parquet")),
    }
    hf = datasets.load_dataset("parquet", data_files=files, cache_dir=str(cache))
    return {s: hf[s].cast_column("image", datasets.Image(decode=False)) for s in files}


def test_rows_equal_what_datasets_load_dataset_gives(hub, tmp_path, monkeypatch):
    hf = _hf_rows(hub, tmp_path / "hf", monkeypatch)
    ds = open_dataset(hub)
    assert ds.layout == "parquet"
    for ours, theirs in (("train", "train"), ("val", "validation"), ("validation", "validation")):
        idx = ds.split_indices(ours)
        assert len(idx) == len(hf[theirs])
        for i, row in zip(idx, hf[theirs]):
            got = ds.read(int(i))
            assert got["image"] == row["image"]["bytes"]  # bytes equal
            assert got["text"].decode() == row["text"]
            assert int(got["tokens"]) == row["tokens"]
            assert float(got["score"]) == pytest.approx(row["score"])
    assert ds.key(0) == "data/train-00000-of-00003/0"
    assert ds.key(int(ds.split_indices("val")[3])) == "data/validation-00000-of-00001/3"


def test_prepare_writes_field_map_splits_and_columns(hub):
    ds = open_dataset(hub)
    assert ds.config.sample_type == "CaptioningSample"
    assert dict(ds.config.field_map) == {"image": "image", "caption": "text"}
    assert ds.split_names == ("train", "val", "validation")
    assert len(ds.split_indices("train")) == 50 and len(ds.split_indices("val")) == 12
    assert ds.decode_exts(0) == {"image": "jpg", "text": "txt", "tokens": "json", "score": "json"}
    from PIL import Image

    for i in (0, 1, 7, 33):
        w, h = Image.open(io.BytesIO(image_bytes(i))).size
        assert (ds.column("width")[i], ds.column("height")[i]) == (w, h)
        assert ds.column("tokens")[i] == 3 + i % 7
        assert ds.column("text.chars")[i] == len(f"train caption {i}")
        assert ds.column("image.bytes")[i] == len(image_bytes(i))
    assert ds.column("tokens").dtype == np.int64 and ds.column("score").dtype == np.float64
    info = (hub / ".fpipe" / "info.yaml").read_text()
    assert "kind: parquet" in info
    assert not list((hub / ".fpipe").rglob("*.parquet"))  # nothing copied


def test_ratio_split_and_glob(tmp_path):
    root = write_hub_dataset(tmp_path / "r", train=(5, 5, 5, 5), val=(5,), row_group=5)
    report = prepare_dataset(str(root / "data" / "train-*.parquet"), split="3,1,0")
    assert report.kind == "parquet" and report.num_shards == 4 and report.num_samples == 20
    ds = open_dataset(root / "data")
    assert report.splits == {"train": 3, "val": 1, "test": 0}
    assert len(ds.split_indices("train")) == 15 and ds.key(0) == "train-00000-of-00004/0"


def test_each_row_group_decoded_once_in_order_and_columns_projected(hub):
    ds = open_dataset(hub, row_group_cache=2)
    reader = ds.reader
    for i in range(len(ds)):
        ds.read(i, frozenset({"text"}))
    # 3 + 3 + 3 row groups of 7 rows in the train files, 2 in the validation file
    assert reader.decoded_row_groups == 11
    assert set(ds.read(0, frozenset({"text"}))) == {"text"}
    assert all(set(g) == {"text"} for g in reader._groups.values())  # image never read
    ds.read(0, frozenset({"image", "text"}))  # a column more: read into the cached group
    assert set(ds.read(0)) == {"image", "text", "tokens", "score"}


def test_read_many_gives_what_key_and_read_give(hub):
    ds = open_dataset(hub, row_group_cache=3)
    order = np.random.default_rng(0).permutation(len(ds))
    one = open_dataset(hub)
    for exts in (None, frozenset({"image", "text"}), frozenset({"tokens"})):
        for start in range(0, len(order), 16):
            batch = order[start : start + 16]
            want = [(one.key(int(i)), one.read(int(i), exts)) for i in batch]
            assert ds.read_many(batch, exts) == want
    assert isinstance(ds.read_many([0], frozenset({"text"}))[0][1]["text"], bytes)


def test_row_groups_are_decoded_into_the_system_allocator(hub):
    # pyarrow's default allocator returns a dropped row group's memory to the system at once
    # (page faults for every row group decoded after it); fpipe's reader keeps it
    # (the text column: compressed, so decoded by pyarrow; plain images are sliced out of the
    # mapped file, tests/storage/test_parquet_pages.py)
    pool = pa.system_memory_pool()
    ds = open_dataset(hub, row_group_cache=64)
    before = pool.bytes_allocated()
    texts = sum(len(ds.read(i, frozenset({"text"}))["text"]) for i in range(len(ds)))
    assert pool.bytes_allocated() - before >= texts  # the cached groups' text buffers


def test_open_parquet_types_columns_as_parquet_file_does(tmp_path):
    if not hasattr(pa, "uuid"):
        pytest.skip("this pyarrow has no uuid extension type")
    path = tmp_path / "ext.parquet"
    table = pa.table({"u": pa.array([bytes(range(16))], pa.uuid()), "s": ["x"]})
    pq.write_table(table, path, store_schema=False)  # the type from the UUID logical type
    ours = open_parquet(pa.OSFile(str(path)), pre_buffer=False).read_row_group(0)
    assert ours.schema == pq.ParquetFile(path).read_row_group(0).schema
    assert ours.column("u").type == pa.uuid()


def test_object_storage_reads_the_same_rows(hub, tmp_path):
    url = hub.as_uri()
    report = prepare_dataset(url, index_dir=tmp_path / "idx")
    assert report.kind == "parquet" and report.num_samples == 62
    remote = open_dataset(url, index_dir=tmp_path / "idx")
    local = open_dataset(hub)
    assert remote.layout == "parquet"
    for i in (0, 9, 30, 61):
        assert remote.key(i) == local.key(i) and remote.read(i) == local.read(i)


def _table(n, *, image=True, start=0):
    cols = {"text": pa.array([f"t{start + j}" for j in range(n)])}
    if image:
        cols["image"] = pa.array(
            [{"bytes": image_bytes(start + j), "path": None} for j in range(n)],
            pa.struct([("bytes", pa.binary()), ("path", pa.string())]),
        )
    cols["tokens"] = pa.array(range(start, start + n), pa.int64())
    return pa.table(cols)


def test_hostile_files_are_left_out_and_named(tmp_path):
    root = tmp_path / "bad"
    root.mkdir()
    pq.write_table(_table(6), root / "a.parquet", row_group_size=3)
    good = (root / "a.parquet").read_bytes()
    (root / "b.parquet").write_bytes(good[: len(good) // 2])  # truncated
    (root / "c.parquet").write_bytes(good[:-12] + b"\0" * 8 + good[-4:])  # corrupt footer
    pq.write_table(_table(4, image=False), root / "d.parquet")  # no image column
    bad = _table(4)
    cells = [{"bytes": image_bytes(0), "path": None}, {"bytes": None, "path": None}] * 2
    bad = bad.set_column(1, "image", pa.array(cells, bad.schema.field("image").type))
    pq.write_table(bad, root / "e.parquet")  # a struct with neither bytes nor path
    report = prepare_dataset(root)
    assert report.kind == "parquet"
    assert report.num_samples == 6 + 2
    by_path = {}
    for p in report.problems:
        by_path.setdefault(p.path, []).append(p)
    assert set(by_path) == {"b.parquet", "c.parquet", "d.parquet", "e.parquet"}
    assert "unreadable Parquet file" in by_path["b.parquet"][0].reason
    assert "unreadable Parquet file" in by_path["c.parquet"][0].reason
    assert (
        by_path["d.parquet"][0].key == "d/0"
        and "no column 'image'" in by_path["d.parquet"][0].reason
    )
    assert [p.key for p in by_path["e.parquet"]] == ["e/1", "e/3"]
    assert "neither bytes nor path" in by_path["e.parquet"][0].reason
    ds = open_dataset(root)
    assert [ds.key(i) for i in range(len(ds))] == [f"a/{j}" for j in range(6)] + ["e/0", "e/2"]


def test_files_changed_after_prepare_raise_a_typed_error_naming_file_and_row(tmp_path):
    root = tmp_path / "changed"
    root.mkdir()
    pq.write_table(_table(6), root / "a.parquet", row_group_size=3)
    pq.write_table(_table(6, start=6), root / "b.parquet", row_group_size=3)
    prepare_dataset(root)
    good = (root / "a.parquet").read_bytes()
    (root / "a.parquet").write_bytes(good[: len(good) // 2])
    pq.write_table(_table(6, image=False), root / "b.parquet", row_group_size=3)
    ds = open_dataset(root, shard_check="off")
    with pytest.raises(BadSampleError) as e:
        ds.read(4)
    assert e.value.path.endswith("a.parquet") and e.value.key == "a/4"
    with pytest.raises(BadSampleError, match="no column 'image'") as e:
        ds.read(7)
    assert e.value.path.endswith("b.parquet") and e.value.key == "b/1"
    assert ds.read(7, frozenset({"text"})) == {"text": b"t1"}
    got = ds.read_many([0, 7, 8], frozenset({"text"}))  # one bad row does not stop the others
    assert got[0][0] == "#0" and isinstance(got[0][1], BadSampleError)
    assert got[0][1].key == "a/0"
    assert got[1:] == [("b/1", {"text": b"t1"}), ("b/2", {"text": b"t2"})]
    bad = _table(6)
    cells = [{"bytes": None, "path": None}] * 6
    bad = bad.set_column(1, "image", pa.array(cells, bad.schema.field("image").type))
    pq.write_table(bad, root / "b.parquet", row_group_size=3)
    ds = open_dataset(root, shard_check="off")
    with pytest.raises(BadSampleError, match="neither bytes nor path") as e:
        ds.read(9)
    assert e.value.key == "b/3"
    with pytest.raises(Exception, match="changed since it was indexed"):
        open_dataset(root)  # the default check refuses the changed files at open


def test_struct_path_without_bytes_reads_the_file(tmp_path):
    root = tmp_path / "paths"
    (root / "img").mkdir(parents=True)
    (root / "img" / "x.png").write_bytes(image_bytes(1))
    t = pa.table(
        {
            "image": pa.array(
                [{"bytes": None, "path": "img/x.png"}],
                pa.struct([("bytes", pa.binary()), ("path", pa.string())]),
            ),
            "caption": ["a"],
        }
    )
    pq.write_table(t, root / "train.parquet")
    report = prepare_dataset(root)
    assert report.num_samples == 1 and report.field_map == {"image": "image", "caption": "caption"}
    ds = open_dataset(root)
    assert ds.read(0)["image"] == image_bytes(1) and ds.decode_exts(0)["image"] == "png"
    assert ds.split_names == ("train",)
