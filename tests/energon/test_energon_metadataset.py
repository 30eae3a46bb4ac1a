"""Energon 7.4 metadatasets on fpipe: version-1 ``Metadataset`` files, per-entry
``shuffle_over_epochs_multiplier``, ``split_config`` overrides, joiners named by
``__function__`` (resolved only when registered), and ``aux:`` on a typed dataset refused.

From Energon's ``metadataset/metadataset.py`` (V1: ``splits: {train: {datasets: [{weight, path,
subflavor, subflavors, ...}]}}``, the default class of a file without ``__class__``; a legacy
``subflavor`` becomes ``__subflavor__``) and ``metadataset_v2.py``.
"""

from __future__ import annotations

import dataclasses
import sys
import textwrap
from collections import Counter
from typing import Any

import pytest
import yaml

from fpipe.core.errors import ConfigError
from fpipe.energon import Sample, TextSample, get_loader, get_train_dataset, get_val_dataset
from fpipe.samples import register_joiner
from tests.energon.energon_folder import TEXT_CONFIG as TEXT
from tests.energon.energon_folder import make_plain_energon_folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("mds")
    make_plain_energon_folder(root / "ds1", TEXT)  # texts 10..15
    make_plain_energon_folder(root / "ds2", TEXT, shards=1, per_shard=4)  # texts 10..13
    return root


def _write(root, name, text):
    path = root / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def _samples(ds, n):
    out = []
    with get_loader(ds, num_workers=0) as loader:
        for batch in loader:
            out += list(zip(batch.text, batch.__subflavors__))
            if len(out) >= n:
                return out[:n]
    return out


def test_version_1_metadataset(folders):
    path = _write(
        folders,
        "v1.yaml",
        """\
        __module__: megatron.energon
        __class__: Metadataset
        splits:
          train:
            datasets:
              - weight: 3
                path: ds1
                subflavor: first
                subflavors: {source: v1}
              - weight: 1
                path: ds2
          val:
            datasets:
              - path: ds1
                split_part: train
              - path: ds2
                split_part: train
        """,
    )
    val = _samples(get_val_dataset(path, split="val", batch_size=5), 100)
    assert [t for t, _ in val] == [str(i) for i in range(10, 16)] + ["10", "11", "12", "13"]
    train = _samples(get_train_dataset(path, batch_size=4, max_samples_per_sequence=2), 400)
    legacy = {"__subflavor__": "first", "source": "v1"}  # Energon's key of `subflavor:`
    assert {tuple(sorted(s.items())) for _, s in train} == {tuple(sorted(legacy.items())), ()}
    firsts = Counter("first" in str(s) for _, s in train)
    assert 0.65 < firsts[True] / len(train) < 0.85  # weights 3 : 1
    # a nested version-1 file without __class__ (Energon's default class)
    nested = _write(
        folders,
        "nested.yaml",
        """\
        splits:
          train:
            datasets:
              - path: ./v1.yaml
                split_part: val
        """,
    )
    got = _samples(get_val_dataset(nested, split="train", batch_size=5), 100)
    assert len(got) == 10


def test_shuffle_over_epochs_multiplier_of_an_entry(folders):
    def first_epoch(mult):
        path = _write(
            folders,
            f"m{mult}.yaml",
            f"""\
            splits:
              train:
                blend:
                  - path: ds1
                    shuffle_over_epochs_multiplier: {mult}
            """,
        )
        ds = get_train_dataset(path, batch_size=6, max_samples_per_sequence=1, seed=3)
        return [t for t, _ in _samples(ds, 12)]

    # 1: each epoch holds every sample once; 2: samples are shuffled over two passes, so
    # the first 12 samples still hold each sample twice, in another order
    one, two = first_epoch(1), first_epoch(2)
    assert sorted(one[:6]) == sorted(one[6:]) == [str(i) for i in range(10, 16)]
    assert Counter(two) == Counter({str(i): 2 for i in range(10, 16)})
    assert sorted(two[:6]) != [str(i) for i in range(10, 16)] or two != one
    # null: slices in index order (no shuffle), as Energon
    assert first_epoch("null")[:6] == [str(i) for i in range(10, 16)]
    with pytest.raises(ConfigError, match="with replacement"):
        first_epoch(-1)


def test_split_config_override(folders):
    meta = folders / "ds1" / ".nv-meta"
    parts = {"train": ["parts/data-1.tar"], "val": ["parts/data-0.tar"]}
    (meta / "other_split.yaml").write_text(yaml.dump({"split_parts": parts, "exclude": []}))
    path = _write(
        folders,
        "split_config.yaml",
        """\
        splits:
          val:
            path: ds1
            split_part: train
            split_config: other_split.yaml
        """,
    )
    got = _samples(get_val_dataset(path, split="val", batch_size=5), 100)
    assert [t for t, _ in got] == ["13", "14", "15"]  # train of other_split.yaml: data-1
    bad = _write(folders, "bad.yaml", "splits: {val: {path: ds1, split_config: nope.yaml}}\n")
    with pytest.raises(ConfigError, match="nope.yaml"):
        get_val_dataset(bad, split="val", batch_size=5)


@dataclasses.dataclass
class Pair(Sample):
    first: Any = None
    second: Any = None


def join_texts(a, b):
    return Pair(
        **{k: getattr(a, k) for k in ("__key__", "__restore_key__", "__subflavors__")},
        first=a.text,
        second=b.text,
    )


def test_joiner_function_of_imported_code_or_registered(folders):
    def joined(module):
        return _write(
            folders,
            f"join-{module}.yaml",
            f"""\
            splits:
              train:
                join:
                  - path: ds2
                  - path: ds1
                joiner:
                  __module__: {module}
                  __function__: join_texts
            """,
        )

    missing = joined("tests.energon.not_imported_joins")
    with pytest.raises(ConfigError, match="register_joiner"):  # never imported from the file
        _samples(get_val_dataset(missing, split="train", batch_size=4), 4)
    assert "tests.energon.not_imported_joins" not in sys.modules
    path = joined(__name__)  # this module is imported: its function is found, unregistered
    ds = get_val_dataset(path, split="train", batch_size=4)
    with get_loader(ds, num_workers=0) as loader:
        batch = next(iter(loader))
    assert batch.first == batch.second == ["10", "11", "12", "13"]
    register_joiner(join_texts)  # and registered
    ds = get_val_dataset(path, split="train", batch_size=4)
    with get_loader(ds, num_workers=0) as loader:
        batch = next(iter(loader))
    assert batch.first == batch.second == ["10", "11", "12", "13"]


def test_aux_of_a_typed_dataset_and_a_missing_dataset_config_are_refused(folders):
    # aux: feeds cookers (tests/energon/test_energon_aux.py); a typed dataset has none
    aux = _write(folders, "aux.yaml", "splits: {train: {path: ds1, aux: {media: ds2}}}\n")
    with pytest.raises(ConfigError, match="aux applies to crude datasets"):
        get_train_dataset(aux, batch_size=2, max_samples_per_sequence=2)
    # dataset_config: another file of .nv-meta (tests/energon/test_energon_config_files.py)
    cfg = _write(folders, "cfg.yaml", "splits: {train: {path: ds1, dataset_config: x.yaml}}\n")
    with pytest.raises(ConfigError, match="dataset_config 'x.yaml': there is no .nv-meta/x.yaml"):
        get_train_dataset(cfg, batch_size=2, max_samples_per_sequence=2)
    assert TextSample  # the sample type of these datasets


def test_prepare_metadataset_checks_the_file_and_writes_nothing(tmp_path):
    from fpipe.energon import prepare_metadataset

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    good = tmp_path / "joined.yaml"
    good.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        "    join:\n      - path: a\n      - path: b\n"
        "    joiner: {__module__: not_imported_anywhere, __class__: Nothing}\n"
    )
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert prepare_metadataset(good) is None  # the joiner is resolved when building
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    bad = tmp_path / "bad.yaml"
    bad.write_text("splits:\n  train:\n    blend:\n      - {path: ./nope}\n")
    with pytest.raises(ConfigError, match="does not exist"):
        prepare_metadataset(bad)


def test_multiplier_minus_one_over_a_blend(folders):
    # Energon's test_metadataset.py::test_slice_iter_shuffle_over_epochs, its call as written
    path = _write(
        folders,
        "draw.yaml",
        """\
        splits:
          train:
            blend:
              - weight: 1
                path: ds1
              - weight: 1
                path: ds2
        """,
    )
    from fpipe.energon import WorkerConfig, get_savable_loader

    worker_config = WorkerConfig(rank=0, world_size=1, num_workers=0, seed_offset=42)
    ds = get_train_dataset(
        path,
        worker_config=worker_config,
        batch_size=10,
        parallel_shard_iters=2,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        shuffle_over_epochs_multiplier=-1,
    )
    texts = [data.text for idx, data in zip(range(30), get_savable_loader(ds))]
    assert len(texts) == 30 and all(len(t) == 10 for t in texts)  # endless
