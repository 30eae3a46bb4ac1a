"""len() of finite datasets and loaders, the no-batch warning, and concise reprs."""

from __future__ import annotations

import itertools
import warnings

import pytest

import fpipe
from fpipe.core.testing import run
from fpipe.plan import filter_refs
from tests.distributed.helpers import build_dataset, make_text_dataset


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    return make_text_dataset(tmp_path_factory.mktemp("len"), shards=3, per_shard=7)  # 21 samples


def test_len_equals_the_batches_the_plan_makes(text):
    cases = itertools.product((1, 2, 3), (2, 4), (1, 2), (True, False), ("global", "per_rank"))
    checked = 0
    for world, b, epochs, drop_last, dist in cases:
        for rank in range(world):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # some cases yield no batch, on purpose
                ds = build_dataset(
                    text, rank=rank, world_size=world, batch_size=b, num_epochs=epochs,
                    drop_last=drop_last, distribution=dist,
                )  # fmt: skip
            _, recipes = run(ds.plan)
            assert len(ds) == len(recipes), (world, rank, b, epochs, drop_last, dist)
            checked += 1
    assert checked == 2 * 2 * 2 * 2 * (1 + 2 + 3)


def test_loader_len_and_val_len(text):
    loader = fpipe.get_loader(build_dataset(text, batch_size=4, num_epochs=1))
    assert len(loader) == 5 == sum(1 for _ in loader)  # 21 // 4
    val = fpipe.get_val_dataset(text, batch_size=4, split="train")
    assert len(val) == 6 == sum(1 for _ in fpipe.get_loader(val))  # the short last batch kept


def test_len_of_filtered_streams_is_a_type_error(text):
    # An endless stream has Energon's length now (one epoch: test_energon_lengths.py); a
    # filtered one still has none: only running the plan tells how many refs pass.
    filtered = build_dataset(text, batch_size=4, num_epochs=1, columns=["text.chars"],
                             plan_stages=[filter_refs("text.chars", ">", 8)])  # fmt: skip
    with pytest.raises(TypeError, match="plan stages"):
        len(filtered)


def test_a_configuration_without_any_batch_warns(text):
    with pytest.warns(UserWarning, match="yields no batch.*21 samples over all epochs"):
        ds = build_dataset(text, global_batch_size=32, num_epochs=1)
    assert len(ds) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_dataset(text, global_batch_size=32, num_epochs=1, drop_last=False)


def test_reprs_show_shapes_not_values(text, image_dataset):
    ds = fpipe.get_train_dataset(image_dataset, batch_size=4, seed=1, num_epochs=1)
    loader = fpipe.get_loader(ds)
    batch = next(iter(loader))
    text_repr = repr(batch)
    assert "image=uint8[4, 3, " in text_repr and "4 samples" in text_repr
    assert "tensor(" not in text_repr and len(text_repr) < 400
    assert repr(ds).startswith(f"PlannedDataset({image_dataset!r}, split='train', batch_size=4")
    assert "batches=24" in repr(ds)  # 96 train samples / 4
    assert repr(loader).startswith("Loader(PlannedDataset(") and "batches_taken=1" in repr(loader)


def test_columns_named_by_plan_stages_are_loaded_without_columns(text):
    # "sample 10" .. "sample 20" have more than 8 characters; no columns= argument needed
    ds = build_dataset(text, batch_size=1, num_epochs=1,
                       plan_stages=[filter_refs("text.chars", ">", 8)])  # fmt: skip
    _, recipes = run(ds.plan)
    assert sorted(int(i) for r in recipes for i in r.refs.index) == list(range(10, 21))
    with pytest.raises(KeyError, match="no column 'nope'"):
        build_dataset(text, batch_size=1, plan_stages=[filter_refs("nope", ">", 8)])


def test_datasets_and_loaders_are_true_even_without_a_len(text):
    # truthiness must not fall back to len(): unknown for an endless stream, 0 for an empty one
    endless = build_dataset(text, batch_size=4)
    loader = fpipe.get_loader(endless)
    assert bool(endless) and bool(loader)
    assert (loader or None) is loader and (endless or None) is endless
    with pytest.warns(UserWarning, match="yields no batch"):
        empty = build_dataset(text, global_batch_size=32, num_epochs=1)
    assert len(empty) == 0 and bool(empty) and bool(fpipe.get_loader(empty))
