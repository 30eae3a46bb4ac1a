"""Energon's ``load_dataset`` and ``traverse_metadataset`` on fpipe's metadataset reading: a
nested metadataset's split listed as factories with composed weights, subflavors and blend mode
(as Energon 7.4's ``metadataset/loader.py`` and its nested-metadataset tests), and the leaves
of a traversal."""

from __future__ import annotations

import textwrap

import pytest

from fpipe.core.errors import ConfigError
from fpipe.energon import (
    DatasetBlendMode,
    EPath,
    WorkerConfig,
    get_loader,
    load_dataset,
    traverse_metadataset,
)
from tests.energon.energon_folder import TEXT_CONFIG, make_plain_energon_folder

WC = WorkerConfig(rank=0, world_size=1, num_workers=0)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("load")
    own = {**TEXT_CONFIG, "subflavors": {"dataset.yaml": True}}
    make_plain_energon_folder(root / "ds1", own)  # texts 10..15
    make_plain_energon_folder(root / "ds2", own, shards=1, per_shard=4)  # texts 10..13
    (root / "inner.yaml").write_text(
        textwrap.dedent(
            """\
            __module__: megatron.energon
            __class__: MetadatasetV2
            splits:
              train:
                blend:
                  - {weight: 1, path: ds1, subflavors: {number: 43}}
                  - {weight: 1, path: ds2, subflavors: {number: 44}}
              val:
                blend_epochized:
                  - {repetitions: 2, path: ds1, split_part: train}
            """
        )
    )
    (root / "outer.yaml").write_text(
        textwrap.dedent(
            """\
            splits:
              train:
                blend:
                  - weight: 4
                    path: inner.yaml
                    split_part: train
                    subflavors: {mds: nested_train}
                  - path: inner.yaml
                    split_part: train
                    name: again
                    subflavors: {mds: nested_val}
            """
        )
    )
    return root


def test_load_dataset_lists_the_leaves_of_a_nested_metadataset(root):
    loaded = load_dataset(root / "outer.yaml").get_datasets(
        training=False, split_part="train", worker_config=WC
    )
    assert loaded.blend_mode == DatasetBlendMode.DATASET_WEIGHT
    assert [d.weight for d in loaded.datasets] == [0.4, 0.4, 0.1, 0.1]
    assert [d.dataset.paths[0].name for d in loaded.datasets] == ["ds1", "ds2", "ds1", "ds2"]
    assert [d.dataset.subflavors for d in loaded.datasets] == [
        {"dataset.yaml": True, "number": 43, "mds": "nested_train"},
        {"dataset.yaml": True, "number": 44, "mds": "nested_train"},
        {"dataset.yaml": True, "number": 43, "mds": "nested_val"},
        {"dataset.yaml": True, "number": 44, "mds": "nested_val"},
    ]
    first = loaded.datasets[1].dataset.build()  # a factory: ds2's samples, one at a time
    assert [s.text for s in get_loader(first)] == ["10", "11", "12", "13"]
    assert len(loaded.datasets[0].dataset) == 6
    epochized = load_dataset(root / "inner.yaml").get_datasets(
        training=True, split_part="val", worker_config=WC
    )
    assert epochized.blend_mode == DatasetBlendMode.SAMPLE_REPETITIONS
    assert [(d.weight, d.repetitions) for d in epochized.datasets] == [(None, 2.0)]


def test_load_dataset_of_a_folder_and_its_errors(root):
    loader = load_dataset(root / "ds1", split_part="train", subflavors={"a": 1})
    loaded = loader.get_datasets(training=False, split_part="val", worker_config=WC)
    assert loaded.blend_mode == DatasetBlendMode.NONE and len(loaded.datasets) == 1
    assert loaded.datasets[0].dataset.subflavors == {"dataset.yaml": True, "a": 1}
    with pytest.raises(ConfigError, match="apply to a dataset folder"):
        load_dataset(root / "outer.yaml", split_part="train")
    with pytest.raises(ConfigError, match="no split 'test'"):
        load_dataset(root / "outer.yaml").get_datasets(
            training=False, split_part="test", worker_config=WC
        )


def test_traverse_metadataset_gives_the_leaves_and_the_levels_subflavors(root):
    refs = traverse_metadataset(root / "outer.yaml", split_part="train")
    assert [r.path for r in refs] == [EPath(root / n) for n in ("ds1", "ds2", "ds1", "ds2")]
    assert [r.split_part for r in refs] == ["train"] * 4
    assert all(r.aux == {} for r in refs)
    assert [r.subflavors for r in refs] == [  # the dataset.yaml's own are not read
        {"number": 43, "mds": "nested_train"},
        {"number": 44, "mds": "nested_train"},
        {"number": 43, "mds": "nested_val"},
        {"number": 44, "mds": "nested_val"},
    ]
    with pytest.raises(ConfigError, match="not a metadataset"):
        traverse_metadataset(root / "ds1", split_part="train")


def test_traverse_metadataset_lists_folders_that_do_not_exist_yet(root):
    path = root / "missing.yaml"
    path.write_text(
        "splits: {train: {path: nowhere, aux: {labels: gone, media: filesystem://media}}}\n"
    )
    refs = traverse_metadataset(path, split_part="train")
    assert [(r.path, r.split_part) for r in refs] == [(EPath(root / "nowhere"), "train")]
    assert refs[0].aux == {"labels": EPath(root / "gone"), "media": EPath(root / "media")}
    with pytest.raises(ConfigError, match="does not exist"):  # loading it checks the paths
        load_dataset(path)
