"""Energon's data as Energon delivers it, on a folder as ``energon prepare`` leaves it.

From Energon 7.4's behaviour (``flavors/webdataset/itar_reader.py``: ``__key__`` is the sample's
base name inside its shard; ``task_encoder/base.py``: ``decoder = SampleDecoder()`` decodes a
crude sample's members by extension before its cooker, ``generic_batch`` lists what is not a
tensor): the sample key, the collation of plain values and the members a cooker sees.
``test_energon_compare.py`` checks the same against Energon itself where it is installed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from fpipe.energon import (
    Cooker,
    DefaultTaskEncoder,
    Sample,
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
class Cooked(Sample):
    txt: Any
    cls: Any
    js: Any
    image: Any
    shard: Any


@stateless
def cook(crude):
    return Cooked(
        **basic_sample_keys(crude),
        txt=crude["txt"],
        cls=crude["cls"],
        js=crude["json"],
        image=crude["jpg"],
        shard=crude.get("__shard__"),
    )


class CrudeEncoder(DefaultTaskEncoder):
    cookers = [Cooker(cook)]


class RawCrudeEncoder(CrudeEncoder):
    decoder = None  # Energon: no decoding, the cooker gets bytes


def _first_batch(path, **kw):
    ds = get_val_dataset(str(path), split="train", batch_size=3, **kw)
    with get_loader(ds, num_workers=0) as loader:
        return next(iter(loader))


@pytest.fixture(scope="module")
def crude(tmp_path_factory):
    return make_plain_energon_folder(tmp_path_factory.mktemp("crude"), CRUDE)


@pytest.fixture(scope="module")
def classes(tmp_path_factory):
    return make_plain_energon_folder(tmp_path_factory.mktemp("classes"), CLASSES)


def test_key_is_the_key_inside_the_shard(classes, tmp_path):
    batch = _first_batch(classes)
    assert batch.__key__ == ["000000", "000001", "000002"]  # fpipe used parts/data-0/000000
    # the same after `fpipe prepare` converted the folder (its index says it came from Energon)
    import shutil

    from fpipe.storage import prepare_dataset

    shutil.copytree(classes, tmp_path / "c")
    prepare_dataset(tmp_path / "c")
    assert _first_batch(tmp_path / "c").__key__ == ["000000", "000001", "000002"]


def test_plain_integer_fields_collate_to_a_list(classes):
    batch = _first_batch(classes)
    assert batch.label == [0, 1, 2]  # Energon's generic_batch: a list, not a tensor
    assert isinstance(batch.image, torch.Tensor) and batch.image.shape[0] == 3  # stacked


def test_crude_members_reach_the_cooker_decoded_by_extension(crude):
    batch = _first_batch(crude, task_encoder=CrudeEncoder())
    assert batch.__key__ == ["000000", "000001", "000002"]
    assert batch.txt == ["10", "11", "12"]  # str, not b'10' (a cooker's f"<{txt}>" is "<10>")
    assert batch.cls == [0, 1, 2]
    assert batch.js == {"n": [0, 1, 2], "f": [0.0, 0.5, 1.0]}  # dicts collate key by key
    assert isinstance(batch.image, torch.Tensor) and batch.image.shape[:2] == (3, 3)
    assert batch.shard == ["parts/data-0.tar"] * 3  # Energon's __shard__ of a crude sample


def test_decoder_none_keeps_the_raw_bytes(crude):
    batch = _first_batch(crude, task_encoder=RawCrudeEncoder())
    assert batch.txt == [b"10", b"11", b"12"] and batch.cls == [b"0", b"1", b"2"]


def test_auto_decode_false_gives_the_cooker_raw_bytes(crude):
    # Energon's legacy keyword (its guide: "Set to False to disable all automatic decoding ...
    # Setting to False is equivalent to setting decoder = None")
    encoder = CrudeEncoder()
    batch = _first_batch(crude, task_encoder=encoder, auto_decode=False)
    assert batch.txt == [b"10", b"11", b"12"] and batch.cls == [b"0", b"1", b"2"]
    assert encoder.decoder is None  # as Energon 7.4: set on the encoder given
    decoded = _first_batch(crude, task_encoder=CrudeEncoder(), auto_decode=True)
    assert decoded.txt == ["10", "11", "12"]


def test_auto_decode_false_without_a_task_encoder(classes):
    from fpipe.energon import get_train_dataset

    ds = get_train_dataset(
        str(classes),
        batch_size=2,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        auto_decode=False,
        repeat=False,
    )
    with get_loader(ds, num_workers=0) as loader:
        batch = next(iter(loader))
    assert isinstance(batch.image[0], bytes) and batch.image[0][:2] == b"\xff\xd8"  # the JPEG
