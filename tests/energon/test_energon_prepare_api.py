"""Energon's Python prepare API (``BaseWebdatasetFactory.prepare_dataset``) and
``get_dataset_from_config``, over fpipe's prepare and dataset builders."""

from __future__ import annotations

import pytest
import yaml

from fpipe.core.errors import ConfigError
from fpipe.energon import (
    BaseWebdatasetFactory,
    ImageClassificationSample,
    TextSample,
    WorkerConfig,
    get_dataset_from_config,
    get_loader,
    get_val_dataset,
)
from tests.energon.energon_folder import write_plain_shards

WC = WorkerConfig(rank=0, world_size=1, num_workers=0)
CLASSES = {
    "sample_type": {"__module__": "megatron.energon", "__class__": "ImageClassificationSample"},
    "field_map": {"image": "jpg", "label": "cls"},
}


def _folder(root):
    write_plain_shards(root, shards=5, per_shard=2)
    (root / ".nv-meta").mkdir()
    (root / ".nv-meta" / "dataset.yaml").write_text(yaml.dump(CLASSES))
    return root


def _labels_of(path, split):
    ds = get_val_dataset(str(path), split_part=split, batch_size=2, worker_config=WC)
    with get_loader(ds) as loader:
        return [k for b in loader for k in b.__key__]


def test_prepare_dataset_splits_shards_as_energon(tmp_path):
    root = _folder(tmp_path / "d")
    found = BaseWebdatasetFactory.prepare_dataset(
        root,
        ["parts/data-{0..4}.tar"],
        split_parts_ratio=[("train", 0.6), ("val", 0.2), ("test", 0.2)],
        shuffle_seed=42,
    )
    assert found >= {"jpg", "cls", "txt", "json"}
    # Energon: random.Random(42).shuffle(shards) -> data-3, data-1, data-2, data-4, data-0,
    # cut at int(5 * 0.6) and int(5 * 0.8); each split in that order
    assert _labels_of(root, "train") == ["000006", "000007", "000002", "000003", "000004",
                                         "000005"]  # fmt: skip
    assert _labels_of(root, "val") == ["000008", "000009"]
    assert _labels_of(root, "test") == ["000000", "000001"]


def test_prepare_dataset_patterns_and_refusals(tmp_path):
    root = _folder(tmp_path / "d")
    BaseWebdatasetFactory.prepare_dataset(
        root,
        ["parts/data-0.tar", "parts/data-1.tar", "parts/data-2.tar"],
        split_parts_patterns=[("train", r"parts/data-[01]\.tar"), ("val", r"parts/data-2")],
        workers=1,  # Energon's default (32: a spawned process a shard) is the test above's
    )
    assert _labels_of(root, "val") == ["000004", "000005"]
    with pytest.raises(ConfigError, match="fix_duplicates"):
        BaseWebdatasetFactory.prepare_dataset(
            root, ["parts/data-0.tar"], split_parts_ratio=[("train", 1)], fix_duplicates=True
        )
    with pytest.raises(ConfigError, match="BaseWebdatasetFactory is not supported"):
        BaseWebdatasetFactory()


def test_get_dataset_from_config_gives_the_split_one_sample_at_a_time(tmp_path):
    root = _folder(tmp_path / "d")
    BaseWebdatasetFactory.prepare_dataset(
        root, ["parts/data-{0..4}.tar"], split_parts_ratio=[("train", 1.0)], shuffle_seed=None,
        workers=1,  # in this process: the index is the same (the first test spawns workers)
    )  # fmt: skip
    ds = get_dataset_from_config(
        root, split_part="train", training=False, worker_config=WC,
        sample_type=ImageClassificationSample,
    )  # fmt: skip
    samples = list(ds.build())  # Energon's factory: build() gives the dataset
    assert [s.__key__ for s in samples] == [f"{i:06d}" for i in range(10)]
    assert isinstance(samples[0], ImageClassificationSample) and samples[3].label == 0
    with pytest.raises(ConfigError, match="holds ImageClassificationSample"):
        get_dataset_from_config(root, split_part="train", worker_config=WC, sample_type=TextSample)
    with pytest.raises(ConfigError, match="dataset_config 'other.yaml': there is no"):
        get_dataset_from_config(root, dataset_config="other.yaml", worker_config=WC)
