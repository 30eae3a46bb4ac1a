"""``fpipe prepare`` records its YAML files parsed (``.fpipe/parsed-yaml.msgpack``): opening
the folder then parses no YAML. The record is used only for files of the very bytes it
recorded (an edited file is parsed), a broken record is ignored, and what a record says is
checked as the same YAML would be: the YAML stays what the folder says."""

from __future__ import annotations

import datetime
import os

import msgspec
import pytest
import yaml

from fpipe.core.errors import ConfigError
from fpipe.storage import open_dataset
from fpipe.storage.config import yaml_record
from fpipe.storage.config.dataset_yaml import load_dataset_config
from fpipe.storage.config.yaml_record import RECORD_NAME, load_yaml_file, write_yaml_record
from fpipe.storage.read import parsed_files
from tests.storage.helpers import prepared_image_caption


@pytest.fixture
def prepared(tmp_path):
    yield from prepared_image_caption(tmp_path, "2,1,0")


@pytest.fixture
def no_yaml(monkeypatch):
    """Parsing any YAML fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("YAML parsed")

    monkeypatch.setattr(yaml, "load", refuse)


def _yaml_values(index):
    return {f.name: yaml.safe_load(f.read_text()) for f in sorted(index.glob("*.yaml"))}


def test_prepare_records_its_yaml_files_and_opening_parses_none(prepared, monkeypatch):
    index = prepared / ".fpipe"
    assert (index / RECORD_NAME).is_file()
    expected = _yaml_values(index)
    assert set(expected) == {"info.yaml", "dataset.yaml", "split.yaml"}
    monkeypatch.setattr(yaml, "load", lambda *a, **k: pytest.fail("YAML parsed"))
    assert {name: load_yaml_file(index / name) for name in expected} == expected
    ds = open_dataset(prepared)
    assert len(ds) == 6 and ds.read(5)["txt"]
    assert ds.dataset_config(None).field_map == {"image": "jpg", "caption": "txt"}
    assert len(ds.split_indices("train")) == 4


def test_a_yaml_file_edited_after_prepare_is_parsed(prepared):
    index = prepared / ".fpipe"
    config = index / "dataset.yaml"
    config.write_text(config.read_text() + "subflavors:\n  source: edited\n")
    split = index / "split.yaml"
    split.write_text(yaml.safe_dump({"split_parts": {"train": ["shard-0002.tar"]}}))
    ds = open_dataset(prepared)
    assert ds.dataset_config(None).subflavors == {"source": "edited"}
    assert ds.split_indices("train").tolist() == [4, 5]
    write_yaml_record(index)  # recorded again: the edits are the record's
    parsed_files.clear()
    assert load_yaml_file(split) == {"split_parts": {"train": ["shard-0002.tar"]}}


@pytest.mark.parametrize(
    "damage",
    [
        b"",
        b"\x00not msgpack",
        msgspec.msgpack.encode({"format": 99, "files": {}}),  # a format this fpipe lacks
        msgspec.msgpack.encode({"format": 1, "files": {"info.yaml": [b"short", b"\xc1"]}}),
        msgspec.msgpack.encode({"format": 1, "files": {"info.yaml": "not an entry"}}),
    ],
)
def test_a_broken_record_is_ignored_and_the_yaml_parsed(prepared, damage):
    index = prepared / ".fpipe"
    (index / RECORD_NAME).write_bytes(damage)
    expected = _yaml_values(index)
    assert {name: load_yaml_file(index / name) for name in expected} == expected
    assert len(open_dataset(prepared)) == 6


@pytest.mark.parametrize("value", [b"\xc1", msgspec.msgpack.encode(msgspec.msgpack.Ext(5, b"x"))])
def test_a_recorded_value_with_a_bad_encoding_is_ignored(prepared, value):
    """The digest matches but the value is not msgpack, or holds what no YAML value is (an
    extension type): the YAML is parsed."""
    index = prepared / ".fpipe"
    data = (index / "info.yaml").read_bytes()
    entry = yaml_record._Entry(yaml_record._digest(data), msgspec.Raw(value))
    record = yaml_record._Record(yaml_record._FORMAT, {"info.yaml": entry})
    (index / RECORD_NAME).write_bytes(msgspec.msgpack.encode(record))
    assert load_yaml_file(index / "info.yaml") == yaml.safe_load(data)


def test_what_a_record_says_is_checked_as_its_yaml_would_be(prepared):
    """A record is data from disk, like the YAML: one naming a shard outside the folder (for
    the YAML's very bytes) is refused as that YAML would be, when the shard is read."""
    index = prepared / ".fpipe"
    data = (index / "info.yaml").read_bytes()
    info = yaml.safe_load(data)
    info["shards"][0]["name"] = "../outside.tar"
    entry = yaml_record._Entry(yaml_record._digest(data), msgspec.Raw(msgspec.msgpack.encode(info)))
    record = yaml_record._Record(yaml_record._FORMAT, {"info.yaml": entry})
    (index / RECORD_NAME).write_bytes(msgspec.msgpack.encode(record))
    with pytest.raises(ConfigError, match=r"info\.yaml: shard path '\.\./outside\.tar' leaves"):
        open_dataset(prepared)
    parsed_files.clear()
    planned = open_dataset(prepared, plan_only=True)  # planning reads counts, no shard
    with pytest.raises(ConfigError, match=r"shard '\.\./outside\.tar' leaves"):
        planned.read(0)


def test_a_value_msgpack_cannot_carry_is_left_to_the_yaml(tmp_path):
    (tmp_path / "dataset.yaml").write_text("subflavors:\n  made: 2024-01-02\n")
    (tmp_path / "split.yaml").write_text("split_parts:\n  train: [a.tar]\n")
    (tmp_path / "bad.yaml").write_text("a: [\n")
    write_yaml_record(tmp_path)
    recorded = msgspec.msgpack.decode((tmp_path / RECORD_NAME).read_bytes())
    assert sorted(recorded["files"]) == ["split.yaml"]  # the date and the bad file: parsed
    cfg = load_dataset_config(tmp_path / "dataset.yaml")
    assert cfg.subflavors == {"made": datetime.date(2024, 1, 2)}
    for f in ("dataset.yaml", "split.yaml", "bad.yaml"):
        os.remove(tmp_path / f)
    assert write_yaml_record(tmp_path) is None and not (tmp_path / RECORD_NAME).exists()


def test_a_planned_dataset_checks_each_shard_when_it_reads_it(prepared):
    """Opened to plan, a dataset's shards are not checked at open: a read checks its shard
    (here one modified since it was indexed) before taking its bytes."""
    shard = prepared / "shard-0001.tar"
    st = os.stat(shard)
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    planned = open_dataset(prepared, plan_only=True)
    assert planned.read(0)["txt"]  # shard 0 is unchanged
    with pytest.raises(ConfigError, match=r"shard-0001\.tar: shard modified since it was indexed"):
        planned.read(2)
