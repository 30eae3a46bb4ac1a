"""Energon's ``dataset_config=`` / ``split_config=``: another dataset.yaml or split.yaml of the
dataset's ``.nv-meta/`` folder, by file name (``get_dataset_from_config``, ``get_train_dataset``
/ ``get_val_dataset``, a metadataset entry), and ``split_config:`` inside a dataset config; and
``get_dataset_from_config`` returning Energon's factory (``.build()``).

As Energon 7.4's ``dataset_config.py`` / ``metadataset/dataset_loader.py``: the file's keys are
merged over the caller's, so a ``split_config:`` in the dataset config wins.
"""

from __future__ import annotations

import dataclasses
import textwrap
from typing import Any

import pytest
import yaml

import fpipe
from fpipe.core.errors import ConfigError
from fpipe.energon import (
    Sample,
    TextSample,
    WorkerConfig,
    get_dataset_from_config,
    get_loader,
    get_train_dataset,
    get_val_dataset,
)
from tests.energon.energon_folder import TEXT_CONFIG, make_plain_energon_folder

WC = WorkerConfig(rank=0, world_size=1, num_workers=0)
#: the class member (0, 1, 2) as the text, where dataset.yaml has the txt member (10, 11, ...)
CLS_CONFIG = {**TEXT_CONFIG, "field_map": {"text": "cls"}}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = make_plain_energon_folder(tmp_path_factory.mktemp("cfg") / "ds", TEXT_CONFIG)
    meta = root / ".nv-meta"
    (meta / "dataset_cls.yaml").write_text(yaml.dump(CLS_CONFIG))
    # data-1 first, then data-0 (Energon reads the shards of a split in the file's order)
    swapped = {"split_parts": {"train": ["parts/data-1.tar", "parts/data-0.tar"], "val": []}}
    (meta / "split2.yaml").write_text(yaml.dump(swapped))
    excluding = {**swapped, "exclude": ["parts/data-0.tar", "parts/data-1.tar/000004"]}
    (meta / "split_exclude.yaml").write_text(yaml.dump(excluding))
    (meta / "dataset_exclude.yaml").write_text(
        yaml.dump({**TEXT_CONFIG, "split_config": "split_exclude.yaml"})
    )
    no5 = {"split_parts": swapped["split_parts"], "exclude": ["parts/data-1.tar/000005"]}
    (meta / "split_no5.yaml").write_text(yaml.dump(no5))
    (meta / "dataset_loader.yaml").write_text(
        yaml.dump({**TEXT_CONFIG, "field_map": None, "sample_loader": "sample_loader.py:load"})
    )
    return root


def _texts(ds):
    with get_loader(ds) as loader:
        return [t for b in loader for t in (b.text if isinstance(b.text, list) else [b.text])]


def _factory_texts(folder, **kwargs):
    factory = get_dataset_from_config(
        folder, split_part="train", training=False, worker_config=WC, **kwargs
    )
    return _texts(factory.build())


def test_get_dataset_from_config_reads_the_named_files(folder):
    assert _factory_texts(folder) == ["10", "11", "12", "13", "14", "15"]
    assert _factory_texts(folder, dataset_config="dataset_cls.yaml") == ["0", "1", "2"] * 2
    assert _factory_texts(folder, split_config="split2.yaml") == ["13", "14", "15", "10", "11",
                                                                  "12"]  # fmt: skip
    # the dataset config's own split_config: names the split (and wins over the caller's)
    assert _factory_texts(folder, dataset_config="dataset_exclude.yaml") == ["13", "15"]
    assert _factory_texts(
        folder, dataset_config="dataset_exclude.yaml", split_config="split2.yaml"
    ) == ["13", "15"]


def test_get_train_and_val_dataset_take_the_file_names(folder):
    val = get_val_dataset(
        folder,
        split_part="train",
        batch_size=6,
        worker_config=WC,
        dataset_config="dataset_cls.yaml",
        split_config="split2.yaml",
    )
    assert _texts(val) == ["0", "1", "2"] * 2
    train = fpipe.get_train_dataset(
        folder, batch_size=6, worker_config=WC, dataset_config="dataset_cls.yaml"
    )
    with get_loader(train) as loader:
        assert sorted(next(iter(loader)).text) == ["0", "0", "1", "1", "2", "2"]
    energon = get_train_dataset(
        folder,
        batch_size=6,
        worker_config=WC,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        split_config="split_exclude.yaml",
    )
    with get_loader(energon) as loader:
        assert sorted(next(iter(loader)).text) == ["13", "13", "13", "15", "15", "15"]


def test_a_metadataset_entry_names_the_files(folder):
    mds = folder.parent / "mds.yaml"
    mds.write_text(
        textwrap.dedent(
            """\
            splits:
              train:
                blend:
                  - path: ds
                    dataset_config: dataset_cls.yaml
                  - path: ds
                    name: other
                    split_config: split2.yaml
            """
        )
    )
    ds = get_val_dataset(mds, split_part="train", batch_size=12, worker_config=WC)
    assert _texts(ds) == ["0", "1", "2", "0", "1", "2", "13", "14", "15", "10", "11", "12"]
    bad = folder.parent / "bad.yaml"
    bad.write_text("splits: {train: {path: ds, dataset_config: ../dataset.yaml}}\n")
    with pytest.raises(ConfigError, match="dataset_config must be a file name"):
        get_val_dataset(bad, split_part="train", batch_size=2, worker_config=WC)


def test_missing_files_sample_loaders_and_metadataset_paths_are_refused(folder):
    with pytest.raises(ConfigError, match="there is no .nv-meta/nope.yaml"):
        _factory_texts(folder, dataset_config="nope.yaml")
    with pytest.raises(ConfigError, match="dataset_loader.yaml maps fields with an Energon "
                       "sample_loader.*does not run code named in data files"):  # fmt: skip
        _factory_texts(folder, dataset_config="dataset_loader.yaml")
    mds = folder.parent / "one.yaml"
    mds.write_text("splits: {train: {path: ds}}\n")
    with pytest.raises(ConfigError, match="set 'split_config:' on the dataset's entry"):
        get_val_dataset(mds, split_part="train", batch_size=2, split_config="split2.yaml")


def test_get_dataset_from_config_returns_a_factory(folder):
    factory = get_dataset_from_config(
        folder, split_part="train", training=False, worker_config=WC, sample_type=TextSample,
        subflavors={"a": 1},
    )  # fmt: skip
    assert factory.paths[0].name == "ds" and factory.__sample_type__ is TextSample
    assert factory.subflavors == {"a": 1} and len(factory) == 6
    ds = factory.build()
    assert ds is factory.build()  # built once
    assert [s.__key__ for s in get_loader(ds)] == [f"{i:06d}" for i in range(6)]
    factory.subflavors["b"] = 2  # Energon's factory reads its subflavors when it builds
    assert next(iter(get_loader(factory.build()))).__subflavors__ == {"a": 1, "b": 2}
    train = get_dataset_from_config(folder, split_part="train", worker_config=WC).build()
    keys = [s.__key__ for _, s in zip(range(6), get_loader(train))]
    assert sorted(keys) == [f"{i:06d}" for i in range(6)]  # one epoch: each sample once
    with pytest.raises(ConfigError, match="holds TextSample"):
        from fpipe.energon import ImageSample

        get_dataset_from_config(folder, worker_config=WC, sample_type=ImageSample)


def test_an_exclude_entry_names_a_key_of_its_shard(tmp_path):
    from fpipe.storage import open_dataset, prepare_dataset

    root = make_plain_energon_folder(tmp_path / "d", TEXT_CONFIG)  # keys 000000..000005
    split = yaml.safe_load((root / ".nv-meta" / "split.yaml").read_text())
    # Energon: "<shard>/<key>" (data-1's 000004 is its second sample); a number that is no
    # key of its shard is read as an index in it (data-0's third sample)
    split["exclude"] = ["parts/data-1.tar/000004", "parts/data-0.tar/2"]
    (root / ".nv-meta" / "split.yaml").write_text(yaml.dump(split))
    assert open_dataset(root).split_indices("train").tolist() == [0, 1, 3, 5]
    prepare_dataset(root)  # fpipe's index of the folder keeps the same samples out
    assert open_dataset(root).layout == "tar"
    assert open_dataset(root).split_indices("train").tolist() == [0, 1, 3, 5]


@dataclasses.dataclass
class TextPair(Sample):
    first: Any = None
    second: Any = None


def join_pair(first, second):
    """The joiner of the join below (found in this imported module, as in Energon)."""
    keys = ("__key__", "__restore_key__", "__subflavors__")
    return TextPair(**{k: getattr(first, k) for k in keys}, first=first.text, second=second.text)


def test_the_datasets_of_a_join_name_their_files(folder):
    mds = folder.parent / "join.yaml"
    mds.write_text(
        textwrap.dedent(
            f"""\
            splits:
              train:
                join:
                  - path: ds
                    split_config: split_exclude.yaml
                  - path: ds
                    split_config: split_no5.yaml
                    dataset_config: dataset_cls.yaml
                    nonmatch: skip
                joiner:
                  __module__: {__name__}
                  __function__: join_pair
            """
        )
    )
    # primary: keys 000003 and 000005 (split_exclude.yaml); 000005 is not in the joined
    # split (split_no5.yaml), so it is skipped; the joined part reads its cls member as text
    ds = get_val_dataset(mds, split_part="train", batch_size=2, worker_config=WC)
    with get_loader(ds) as loader:
        batches = list(loader)
    assert [(b.__key__, b.first, b.second) for b in batches] == [(["000003"], ["13"], ["0"])]


def test_fpipe_info_counts_the_samples_of_the_named_files(folder, capsys):
    from fpipe.cli.main import main

    mds = folder.parent / "info.yaml"
    mds.write_text(
        textwrap.dedent(
            f"""\
            splits:
              train:
                blend:
                  - path: ds
                    dataset_config: dataset_exclude.yaml
                  - path: ds
                    name: no5
                    split_config: split_no5.yaml
                  - name: joined
                    join:
                      - path: ds
                      - path: ds
                        split_config: split_exclude.yaml
                        nonmatch: skip
                    joiner:
                      __module__: {__name__}
                      __function__: join_pair
            """
        )
    )
    bad = folder.parent / "clash.yaml"
    bad.write_text("splits: {train: {blend: [{path: ds}, {path: ds, weight: 2}]}}\n")
    assert main(["info", str(bad)]) == 2  # the two entries named in the error
    assert "(" + f"{bad}: splits.train.blend[0] and {bad}: splits.train.blend[1])" in (
        capsys.readouterr().err
    )
    assert main(["info", str(mds)]) == 0
    out = capsys.readouterr().out
    assert "ds: weight 0.3333, 2 samples" in out  # dataset_exclude.yaml's split_config:
    assert "no5: weight 0.3333, 5 samples" in out
    assert "joined: 2 samples (train of" in out
