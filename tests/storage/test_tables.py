"""JSONL / CSV tables pointing at media files or at members of a tar dataset."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fpipe.core.errors import BadSampleError
from fpipe.samples import cook_sample
from fpipe.storage import open_dataset, prepare_dataset
from tests.storage.helpers import jpeg_bytes, make_image_caption_dataset


def _opensora(tmp_path, missing=False):
    media = tmp_path / "videos"
    media.mkdir()
    (media / "a.mp4").write_bytes(b"mp4-a")
    (media / "b.mp4").write_bytes(b"mp4-bb")
    rows = [
        "path,text,num_frames,height,width",
        "videos/a.mp4,a cat,120,480,640",
        '"videos/b.mp4","a dog, running",64,720,1280',
    ]
    if missing:
        rows.append("videos/gone.mp4,lost,10,10,10")
    (tmp_path / "meta.csv").write_text("\n".join(rows) + "\n")
    return tmp_path / "meta.csv"


def test_opensora_csv_as_is(tmp_path):
    ds = open_dataset(_opensora(tmp_path))
    assert len(ds) == 2
    assert ds.column_names == ("num_frames", "height", "width")
    assert list(ds.column("num_frames")) == [120, 64]
    assert ds.read(1) == {
        "path": b"mp4-bb",
        "mp4": b"mp4-bb",
        "text": b"a dog, running",
        "num_frames": b"64",
        "height": b"720",
        "width": b"1280",
    }
    assert ds.key(0) == "meta/0"
    assert list(ds.split_indices("train")) == [0, 1]


def test_missing_media_raises_at_read_and_is_left_out_by_prepare(tmp_path):
    table = _opensora(tmp_path, missing=True)
    ds = open_dataset(table)
    with pytest.raises(BadSampleError) as ei:
        ds.read(2)
    assert ei.value.path.endswith("gone.mp4") and ei.value.key == "meta/2"
    rep = prepare_dataset(table, probe_av=False)  # the media are fake bytes, not videos
    assert rep.kind == "table" and rep.num_samples == 2
    (prob,) = rep.problems
    assert prob.key == "meta/2" and "missing" in prob.reason and "gone.mp4" in prob.path
    pds = open_dataset(tmp_path)
    assert len(pds) == 2 and pds.read(1)["text"] == b"a dog, running"
    assert list(pds.column("path.bytes")) == [5, 6]
    assert list(pds.column("width")) == [640, 1280]
    assert pds.key(1) == "meta/1"


def test_jsonl_with_images_nested_and_missing_values(tmp_path):
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "x.jpg").write_bytes(jpeg_bytes(30, 20))
    rows = [
        {"image": "img/x.jpg", "caption": "hi", "score": 0.5, "meta": {"a": 1}},
        {"image": "img/x.jpg", "caption": None, "score": None},
    ]
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    ds = open_dataset(tmp_path / "t.jsonl")
    assert np.isnan(ds.column("score")[1])
    assert ds.read(0)["meta"] == b'{"a":1}' and ds.read(0)["jpg"][:2] == b"\xff\xd8"
    assert "caption" not in ds.read(1)
    prepare_dataset(tmp_path / "t.jsonl")
    pds = open_dataset(tmp_path)
    assert list(pds.column("image.width")) == [30, 30]
    assert pds.read(1).get("caption") is None and pds.read(0)["caption"] == b"hi"


def test_media_in_auxiliary_tar_dataset(tmp_path):
    expected = make_image_caption_dataset(tmp_path / "aux", shards=1, per_shard=2)
    prepare_dataset(tmp_path / "aux")
    lines = [json.dumps({"image": f"{e['key']}.jpg", "q": "what?"}) for e in expected]
    lines.append(json.dumps({"image": "shard-0000/999999.jpg", "q": "missing"}))
    (tmp_path / "t.jsonl").write_text("\n".join(lines))
    ds = open_dataset(tmp_path / "t.jsonl", root=tmp_path, aux=tmp_path / "aux")
    assert ds.read(1)["image"] == expected[1]["members"]["jpg"]
    with pytest.raises(BadSampleError, match="no member"):
        ds.read(2)
    rep = prepare_dataset(tmp_path / "t.jsonl", aux=tmp_path / "aux")
    assert rep.num_samples == 2 and len(rep.problems) == 1
    assert open_dataset(tmp_path).read(0)["jpg"] == expected[0]["members"]["jpg"]


def _typed_table(tmp_path):
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "x.jpg").write_bytes(jpeg_bytes(30, 20))
    rows = [
        {"image": "img/x.jpg", "caption": f"cat {i}", "label": i, "code": 10 + i,
         "meta": {"c": f"nested {i}"}}
        for i in range(4)
    ]  # fmt: skip
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return tmp_path / "t.jsonl"


def test_table_columns_are_typed(tmp_path):
    """Whatever a column is called, a text column cooks to str, a number column to a number
    (its text for a str field), a JSON cell to a dict, a media column by its file's type."""
    ds = open_dataset(_typed_table(tmp_path))
    assert ds.decode_exts(0) == {
        "image": "jpg", "caption": "txt", "label": "json", "code": "json", "meta": "json"
    }  # fmt: skip

    def cook(sample_type, field_map):
        return cook_sample(
            ds.read(1),
            sample_type=sample_type,
            field_map=field_map,
            key=ds.key(1),
            decode_exts=ds.decode_exts(1),
        )

    s = cook("CaptioningSample", {"image": "image", "caption": "caption"})
    assert s.caption == "cat 1" and tuple(s.image.shape) == (3, 20, 30)
    fmap = {"image": "image", "label": "label", "label_name": "code"}
    s = cook("ImageClassificationSample", fmap)
    assert s.label == 1 and s.label_name == "11"
    assert cook("TextSample", {"text": "meta[c]"}).text == "nested 1"


def test_prepared_table_batches_have_typed_fields(tmp_path):
    import fpipe

    prepare_dataset(_typed_table(tmp_path), fields=["image=image", "caption=caption"])
    ds = fpipe.get_train_dataset(tmp_path, batch_size=2, max_samples_per_sequence=2, seed=1)
    batch = next(iter(fpipe.get_loader(ds, num_workers=0)))
    assert all(isinstance(c, str) and c.startswith("cat ") for c in batch.caption)
    assert tuple(batch.image.shape) == (2, 3, 20, 30)


def test_table_rows_missing_a_field_are_left_out_and_named(tmp_path):
    """As for tar samples: a row where a mapped field has no value (an empty cell, a JSON
    path that leads nowhere) is left out at prepare and reported with its key."""
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "x.jpg").write_bytes(jpeg_bytes(8, 6))
    rows = [
        {"image": "img/x.jpg", "caption": "ok", "meta": {"c": "a"}},
        {"image": "img/x.jpg", "caption": None, "meta": {"c": "b"}},
        {"image": "img/x.jpg", "caption": "ok", "meta": {"d": 1}},
    ]
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    fields = {"image": "jpg", "caption": "caption", "text": "meta[c]"}
    rep = prepare_dataset(tmp_path / "t.jsonl", fields=fields, sample_type="CrudeSample")
    assert rep.num_samples == 1
    assert [(p.key, p.reason) for p in rep.problems] == [
        ("t/1", "missing field 'caption' (caption)"),
        ("t/2", "missing field 'text' (meta[c])"),
    ]
    assert "left out 2 samples" in rep.left_out_summary()
    assert len((tmp_path / ".fpipe" / "problems.jsonl").read_text().splitlines()) == 2
