"""The batch digest that bit-exact comparisons use (tests, ``bench/chaos.py``,
``bench/recovery.py``): one changed byte anywhere training looks changes it; where the dataset
lies (a local folder or an ``s3://`` URL for the same shards) does not."""

import dataclasses
import importlib.util
from pathlib import Path

import pytest
import torch

from fpipe.samples.source_info import SourceInfo
from tests.loader.helpers import build, digest


@pytest.fixture(scope="module")
def batch(image_dataset):
    got = next(iter(build(image_dataset, encoder=None)))
    assert isinstance(got.__sources__[0][0], SourceInfo)  # per sample, its sources
    return got


def _sources(batch, **change):
    """The batch's sources with the first sample's first record changed, or every record
    changed (``everywhere=True``)."""
    everywhere = change.pop("everywhere", False)
    out = []
    for i, per_sample in enumerate(batch.__sources__):
        out.append(tuple(
            dataclasses.replace(s, **change) if everywhere or (i == 0 and j == 0) else s
            for j, s in enumerate(per_sample)
        ))  # fmt: skip
    return out


def _with(batch, **fields):
    return dataclasses.replace(batch, **fields)


def test_one_changed_pixel_byte_changes_the_digest(batch):
    image = batch.image.clone()
    flat = image.view(-1)
    flat[flat.numel() // 2] ^= 1  # the middle: a tensor's repr elides it
    assert digest(_with(batch, image=image)) != digest(batch)


def test_keys_sources_and_values_count(batch):
    keys = list(batch.__key__)
    keys[-1] = keys[-1] + "x"
    assert digest(_with(batch, __key__=keys)) != digest(batch)
    for change in ({"shard_name": "other.tar"}, {"index": 10**6}, {"file_names": ("a.jpg",)}):
        assert digest(_with(batch, __sources__=_sources(batch, **change))) != digest(batch)


def test_the_dataset_root_does_not_count(batch):
    moved = _sources(batch, dataset_path="s3://bucket/data", everywhere=True)
    assert moved != batch.__sources__
    assert digest(_with(batch, __sources__=moved)) == digest(batch)


def test_a_value_it_cannot_see_into_is_refused():
    with pytest.raises(TypeError, match="cannot compare"):
        digest({"x": object()})


def test_the_chaos_benchmark_uses_it():
    path = Path(__file__).resolve().parents[2] / "bench" / "chaos.py"
    spec = importlib.util.spec_from_file_location("bench_chaos", path)
    chaos = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(chaos)
    assert chaos.digest is digest
    assert digest({"t": torch.zeros(3)}) != digest({"t": torch.zeros(3, dtype=torch.float64)})
