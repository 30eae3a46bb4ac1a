"""Energon's ``__sources__`` / ``SourceInfo``: where each sample came from (dataset path, index,
shard, file names), on samples, crude samples, default-collated and ``Batch`` batches."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from fpipe.energon import (
    Batch,
    Cooker,
    DefaultTaskEncoder,
    Sample,
    SourceInfo,
    basic_sample_keys,
    get_loader,
    get_val_dataset,
    stateless,
)
from tests.energon.energon_folder import CRUDE_CONFIG as CRUDE
from tests.energon.energon_folder import make_plain_energon_folder

CLASSES = {
    "sample_type": {"__module__": "megatron.energon", "__class__": "ImageClassificationSample"},
    "field_map": {"image": "jpg", "label": "cls"},
}


@dataclasses.dataclass
class Txt(Sample):
    txt: Any


@dataclasses.dataclass
class TxtBatch(Batch):
    txt: list


@stateless
def cook(crude):
    return Txt(**basic_sample_keys(crude), txt=crude["txt"])


class CrudeEncoder(DefaultTaskEncoder):
    cookers = [Cooker(cook)]


class BatchingEncoder(CrudeEncoder):
    def batch(self, samples):
        return TxtBatch.from_samples(samples)


def _first_batch(path, **kw):
    ds = get_val_dataset(str(path), split="train", batch_size=2, **kw)
    with get_loader(ds, num_workers=0) as loader:
        return next(iter(loader))


@pytest.fixture(scope="module")
def classes(tmp_path_factory):
    return make_plain_energon_folder(tmp_path_factory.mktemp("classes"), CLASSES)


@pytest.fixture(scope="module")
def crude(tmp_path_factory):
    return make_plain_energon_folder(tmp_path_factory.mktemp("crude"), CRUDE)


def test_samples_name_their_dataset_index_shard_and_files(classes):
    batch = _first_batch(classes)
    assert batch.__key__ == ["000000", "000001"]  # Energon's short key ...
    first, second = (srcs[0] for srcs in batch.__sources__)  # default batch: one list entry each
    assert first == SourceInfo(
        dataset_path=str(classes),
        index=0,
        shard_name="parts/data-0.tar",  # ... and fpipe's shard/key from the sources
        file_names=("000000.cls", "000000.jpg"),  # the field map's members, as Energon
    )
    assert (second.index, second.file_names) == (1, ("000001.cls", "000001.jpg"))


def test_crude_samples_carry_sources_to_the_cooker_and_batch(crude):
    batch = _first_batch(crude, task_encoder=BatchingEncoder())
    assert batch.txt == ["10", "11"]
    # Batch.from_samples flattens the samples' sources into one tuple, as Energon's Batch does
    assert isinstance(batch.__sources__, tuple) and len(batch.__sources__) == 2
    assert [s.index for s in batch.__sources__] == [0, 1]
    assert {s.shard_name for s in batch.__sources__} == {"parts/data-0.tar"}
    assert "000001.txt" in batch.__sources__[1].file_names


def test_hand_built_samples_have_no_sources_and_repr_is_unchanged():
    s = Txt(txt="a", __key__="k")
    assert s.__sources__ is None
    assert "__sources__" not in repr(s)
    assert TxtBatch.from_samples([s, s]).__sources__ is None


def test_from_joined_keeps_every_parts_sources():
    a = SourceInfo(dataset_path="a", index=0, shard_name="s.tar", file_names=("0.txt",))
    b = SourceInfo(dataset_path="b", index=3, shard_name="t.tar", file_names=("0.jpg",))

    @dataclasses.dataclass
    class Both(Sample):
        txt: Any
        img: Any

    @dataclasses.dataclass
    class Img(Sample):
        img: Any

    j = Both.from_joined(Txt(txt="x", __sources__=(a,)), Img(img="y", __sources__=(b,)))
    assert j.__sources__ == (a, b)
