"""Metadatasets through the loader: nested blends, subflavors and split_part on real samples,
val passes across ranks, resume, weight changes and stats."""

from __future__ import annotations

import itertools
import textwrap
from collections import Counter

import pytest

import fpipe
from fpipe.core import SnapshotMismatchError
from fpipe.decode.image import ImageDecodeOptions
from fpipe.loader import Topology
from tests.loader.helpers import prepared_images

DECODE = ImageDecodeOptions(target_size=8)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """Three prepared datasets and a three-level metadataset over them."""
    root = tmp_path_factory.mktemp("mds")
    for name, shards in (("coco", 3), ("coyo", 2), ("ocr", 2)):
        prepared_images(root / "data" / name, shards=shards, per_shard=6, split="2,1,0")
    (root / "l3").mkdir()
    (root / "l3" / "inner.yaml").write_text(
        textwrap.dedent(
            """\
            splits:
              train:
                blend:
                  - {weight: 1, path: ../data/ocr, subflavors: {kind: ocr, level: three}}
                  - {weight: 1, path: ../data/coyo, split_part: val, subflavors: {kind: web}}
              val:
                path: ../data/ocr
            """
        )
    )
    (root / "l2").mkdir()
    (root / "l2" / "middle.yaml").write_text(
        textwrap.dedent(
            """\
            __module__: megatron.energon
            __class__: MetadatasetV2
            splits:
              train:
                blend:
                  - {weight: 1, path: ../l3/inner.yaml, subflavors: {level: two}}
              val:
                blend:
                  - {weight: 1, path: ../l3/inner.yaml}
                  - {weight: 1, path: ../data/coyo}
            """
        )
    )
    (root / "top.yaml").write_text(
        textwrap.dedent(
            """\
            __module__: megatron.energon
            __class__: MetadatasetV2
            splits:
              train:
                blend:
                  - {weight: 2, path: ./data/coco, subflavors: {kind: caption}}
                  - {weight: 2, path: ./l2/middle.yaml, subflavors: {source: mix}}
              val:
                path: ./l2/middle.yaml
            """
        )
    )
    return root


def train(path, **kw):
    args = dict(batch_size=4, shuffle_buffer_size=8, max_samples_per_sequence=2, seed=5)
    args.update(kw)
    return fpipe.get_train_dataset(str(path), image_decode=DECODE, topology=Topology(0, 1), **args)


def keys_of(loader, n):
    """Keys and subflavors of the next ``n`` batches of ``loader`` (a loader or a loop)."""
    return [
        (tuple(b.__key__), tuple(map(repr, b.__subflavors__))) for b in itertools.islice(loader, n)
    ]


def test_three_level_nested_subflavors_and_split_part(tree):
    ds = train(tree / "top.yaml")
    assert ds.datasets == ("coco", "middle/inner/ocr", "middle/inner/coyo.val")
    coyo = fpipe.storage.open_dataset(str(tree / "data" / "coyo"))
    coyo_val = {coyo.key(int(i)) for i in coyo.split_indices("val")}
    seen = Counter()
    for i, b in enumerate(fpipe.get_loader(ds)):
        if i == 40:
            break
        for key, path_sub in zip(b.__key__, b.__subflavors__):
            seen[path_sub.get("kind")] += 1
            if path_sub.get("kind") == "web":
                assert path_sub == {"kind": "web", "level": "two", "source": "mix"}
                assert key in coyo_val  # split_part: val of coyo, blended into train
            elif path_sub.get("kind") == "ocr":
                assert path_sub == {"kind": "ocr", "level": "two", "source": "mix"}
            else:
                assert path_sub == {"kind": "caption"}
    # Weights 2 : 2 -> coco 1/2, ocr 1/4, coyo.val 1/4 (160 samples; loose bounds).
    assert 55 < seen["caption"] < 105 and seen["ocr"] > 20 and seen["web"] > 20


def test_resume_equals_uninterrupted(tree):
    loader = fpipe.get_loader(train(tree / "top.yaml"))
    it = iter(loader)
    ref = keys_of(it, 6)
    sd = loader.state_dict()  # taken after 6 batches of the uninterrupted run
    ref += keys_of(it, 8)
    fresh = fpipe.get_loader(train(tree / "top.yaml"))
    fresh.load_state_dict(sd)
    assert keys_of(fresh, 8) == ref[6:]
    stats = fresh.stats()
    assert set(stats.datasets) == set(train(tree / "top.yaml").datasets)


def test_weight_schedule_override_and_changed_weights(tree):
    loader = fpipe.get_loader(train(tree / "top.yaml"))
    it = iter(loader)
    for _ in range(3):
        next(it)
    sd = loader.state_dict()
    sched = [(0, {"coco": 1, "middle/inner/ocr": 1, "middle/inner/coyo.val": 1})]
    changed = fpipe.get_loader(train(tree / "top.yaml", weight_schedule=sched))
    with pytest.raises(SnapshotMismatchError, match="middle/inner/ocr"):
        changed.load_state_dict(sd)
    ok = fpipe.get_loader(
        train(tree / "top.yaml", weight_schedule=sched, allow_changed_weights=True)
    )
    ok.load_state_dict(sd)
    assert len(next(iter(ok)).__key__) == 4


@pytest.mark.parametrize("world", [1, 2, 3])
def test_val_covers_each_sample_once_across_ranks(tree, world):
    seen = []
    for rank in range(world):
        ds = fpipe.get_val_dataset(
            str(tree / "top.yaml"),
            batch_size=2,
            image_decode=DECODE,
            topology=Topology(rank, world),
        )
        assert ds.datasets == ("middle/inner/ocr", "middle/coyo")
        for b in fpipe.get_loader(ds):
            seen.extend((rk[0], k) for rk, k in zip(b.__restore_key__, b.__key__))
    ocr = fpipe.storage.open_dataset(str(tree / "data" / "ocr"))
    coyo = fpipe.storage.open_dataset(str(tree / "data" / "coyo"))
    expected = [(0, ocr.key(int(i))) for i in ocr.split_indices("val")]
    expected += [(1, coyo.key(int(i))) for i in coyo.split_indices("val")]
    # Concatenated in file order, no shuffle: rank r's batches are its part of each global one.
    assert sorted(seen) == sorted(expected) and len(seen) == len(set(seen)) == 12
    limited = fpipe.get_val_dataset(
        str(tree / "top.yaml"), batch_size=2, image_decode=DECODE, limit=3, topology=Topology()
    )
    # limit counts batches, as in Energon: 3 batches of 2 samples
    assert sum(len(b.__key__) for b in fpipe.get_loader(limited)) == 6


def test_cli_plan_and_info_take_a_metadataset(tree):
    from fpipe.cli._info import format_metadataset_info
    from fpipe.datasets.plan_config import load_plan_config
    from fpipe.datasets.plan_queries import plan_step

    flags = dict(
        batch_size=4, world_size=2, seed=5, shuffle_buffer_size=8, max_samples_per_sequence=2
    )
    cfg = load_plan_config(str(tree / "top.yaml"), flags)
    assert cfg.path == str(tree / "top.yaml") and cfg.world_size == 2
    result = plan_step(cfg, 3)
    names = {s["dataset"] for r in result["ranks"] for s in r["samples"]}
    assert names <= {"coco", "middle/inner/ocr", "middle/inner/coyo.val"} and names
    # The same step through the loader (rank 1 of 2) has the same keys.
    ds = fpipe.get_train_dataset(
        str(tree / "top.yaml"),
        batch_size=4,
        shuffle_buffer_size=8,
        max_samples_per_sequence=2,
        seed=5,
        image_decode=DECODE,
        topology=Topology(1, 2),
    )
    batch = [b for i, b in zip(range(4), fpipe.get_loader(ds))][3]
    assert [s["key"] for s in result["ranks"][1]["samples"]] == list(batch.__key__)
    text = format_metadataset_info(str(tree / "top.yaml"))
    assert "split train: blend, 3 dataset(s)" in text
    assert "middle/inner/coyo.val: weight 0.25, 6 samples (val of" in text
    assert "split val: single" in text or "split val: concat" in text
