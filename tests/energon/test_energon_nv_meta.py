"""A dataset prepared through ``fpipe.energon`` also gets Energon's ``.nv-meta/`` files, as
Energon 7.4's prepare writes them for the same shards, and edits to them count on open."""

from __future__ import annotations

import json

import pytest
import yaml

from fpipe.core.errors import ConfigError
from fpipe.energon import BaseWebdatasetFactory
from fpipe.storage import open_dataset
from fpipe.storage.read.nv_meta import collapse_names
from tests.energon.energon_folder import write_plain_shards

# What the real Energon 7.4 wrote for write_plain_shards(shards=5, per_shard=2) and
# prepare_dataset(..., split_parts_ratio=[("train", 0.6), ("val", 0.4), ("test", 0)]).
ENERGON_INFO = {
    "energon_version": "7.4.0",
    "shard_counts": {f"parts/data-{i}.tar": 2 for i in range(5)},
}
ENERGON_SPLIT = (
    "split_parts:\n  train:\n  - parts/data-3.tar\n  - parts/data-{1..2}.tar\n"
    "  val:\n  - parts/data-4.tar\n  - parts/data-0.tar\n  test: []\nexclude: []\n"
)
# What `energon prepare --sample-type CaptioningSample --field-map ...` writes.
CAPTIONS = (
    "sample_type:\n  __module__: megatron.energon\n  __class__: CaptioningSample\n"
    "field_map:\n  image: jpg\n  caption: txt\n"
)


@pytest.fixture
def prepared(tmp_path):
    write_plain_shards(tmp_path, shards=5, per_shard=2)
    ratio = [("train", 0.6), ("val", 0.4), ("test", 0)]
    BaseWebdatasetFactory.prepare_dataset(
        tmp_path, ["parts/data-{0..4}.tar"], split_parts_ratio=ratio
    )
    return tmp_path


def test_prepare_writes_energons_nv_meta(prepared):
    meta = prepared / ".nv-meta"
    assert json.loads((meta / ".info.json").read_text()) == ENERGON_INFO
    assert (meta / ".info.json").read_text() == json.dumps(ENERGON_INFO, indent=2)
    assert (meta / "split.yaml").read_text() == ENERGON_SPLIT
    crude = {"__module__": "megatron.energon", "__class__": "CrudeWebdataset"}
    assert yaml.safe_load((meta / "dataset.yaml").read_text()) == crude


def test_edited_dataset_yaml_and_split_are_read_on_open(prepared):
    assert open_dataset(prepared).config.sample_type == "CrudeSample"
    (prepared / ".nv-meta" / "dataset.yaml").write_text(CAPTIONS)
    (prepared / ".nv-meta" / "split.yaml").write_text(
        "split_parts:\n  train:\n  - parts/data-{0..1}.tar\n  val: []\n"
    )
    ds = open_dataset(prepared)
    assert ds.config.sample_type == "CaptioningSample"
    assert dict(ds.config.field_map) == {"image": "jpg", "caption": "txt"}
    assert ds.split.split_parts["train"] == ["parts/data-0.tar", "parts/data-1.tar"]
    # preparing again keeps the user's dataset.yaml
    BaseWebdatasetFactory.prepare_dataset(
        prepared, ["parts/data-{0..4}.tar"], split_parts_ratio=[("train", 1)]
    )
    assert (prepared / ".nv-meta" / "dataset.yaml").read_text() == CAPTIONS
    assert open_dataset(prepared).config.sample_type == "CaptioningSample"


def test_changed_info_refuses_the_stale_index(prepared):
    info = dict(ENERGON_INFO, shard_counts={"parts/data-0.tar": 2})
    (prepared / ".nv-meta" / ".info.json").write_text(json.dumps(info))
    with pytest.raises(ConfigError, match=r"\.nv-meta/\.info\.json changed"):
        open_dataset(prepared)


def test_collapse_names_keeps_order():
    names = ["a-03.tar", "a-01.tar", "a-02.tar", "b9.tar", "b10.tar", "c.tar"]
    assert collapse_names(names) == ["a-03.tar", "a-{01..02}.tar", "b9.tar", "b10.tar", "c.tar"]
