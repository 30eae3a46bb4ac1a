"""A Parquet dataset through the whole loader: the same batches for any number of workers,
exact resume, elastic restore onto another world size, a blend with a tar dataset that
follows its weights, and plan-tier packing with a Parquet column as the budget."""

from __future__ import annotations

import os
import textwrap
from collections import Counter

import numpy as np
import pytest

import fpipe
from fpipe.decode.image import ImageDecodeOptions
from fpipe.encode import DefaultTaskEncoder
from fpipe.loader import Topology
from fpipe.plan import pack
from fpipe.samples import TextSample
from fpipe.storage import open_dataset, prepare_dataset
from fpipe.storage.read.parquet import ParquetReader
from tests.distributed.helpers import batch_keys
from tests.loader.helpers import prepared_images
from tests.storage.parquet_helpers import (
    assert_same_batches as _same,
)
from tests.storage.parquet_helpers import (
    take_batches as _take,
)
from tests.storage.parquet_helpers import (
    write_hub_dataset,
)

DECODE = ImageDecodeOptions(target_size=8)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = write_hub_dataset(tmp_path_factory.mktemp("hub"))
    prepare_dataset(root)
    return str(root)


def _train(path, *, rank=0, world=1, **kw):
    args = dict(shuffle_buffer_size=8, max_samples_per_sequence=7, seed=4, image_decode=DECODE)
    args.update(kw)
    if "global_batch_size" not in args:
        args.setdefault("batch_size", 4)
    return fpipe.get_train_dataset(path, topology=Topology(rank, world), **args)


def test_workers_and_exact_resume(hub):
    ref = _take(fpipe.get_loader(_train(hub)), 8)
    assert {k.split("/")[1].split("-")[0] for b in ref for k in b.__key__} == {"train"}
    _same(_take(fpipe.get_loader(_train(hub), num_workers=2), 8), ref)
    loader = fpipe.get_loader(_train(hub))
    head = _take(loader, 3)
    resumed = fpipe.get_loader(_train(hub))
    resumed.load_state_dict(loader.state_dict())
    _same(head + _take(resumed, 5), ref)


def test_elastic_restore_onto_another_world_size(hub):
    ref = [
        k
        for b in fpipe.get_loader(_train(hub, global_batch_size=1, num_epochs=1))
        for k in batch_keys(b)
    ]
    assert sorted(ref) == sorted(set(ref)) and len(ref) == 50
    loaders = [
        fpipe.get_loader(_train(hub, rank=r, world=2, global_batch_size=6, num_epochs=1))
        for r in range(2)
    ]
    its = [iter(x) for x in loaders]
    got = []
    for _ in range(3):
        for it in its:
            got.extend(batch_keys(next(it)))
    states = {x.state_dict()["fpipe_snapshot"] for x in loaders}
    assert len(states) == 1
    resumed = fpipe.get_loader(_train(hub, global_batch_size=4, num_epochs=1))
    resumed.load_state_dict({"fpipe_snapshot": states.pop()})
    got.extend(k for b in resumed for k in batch_keys(b))
    assert got == ref  # 18 samples at 6 on 2 ranks, then 8 batches of 4 on one


def test_blend_of_parquet_and_tar_follows_its_weights(hub, tmp_path):
    tar = prepared_images(tmp_path / "tar", shards=4, per_shard=10)
    meta = tmp_path / "mix.yaml"
    meta.write_text(
        textwrap.dedent(
            f"""\
            __module__: megatron.energon
            __class__: MetadatasetV2
            splits:
              train:
                blend:
                  - {{weight: 3, path: {hub}}}
                  - {{weight: 1, path: {tar}}}
            """
        )
    )
    ds = _train(str(meta), batch_size=8)
    seen = Counter()
    for b in _take(fpipe.get_loader(ds), 40):
        for key in b.__key__:
            seen["parquet" if key.startswith("data/") else "tar"] += 1
    share = seen["parquet"] / sum(seen.values())
    assert 0.68 < share < 0.82, seen  # weight 3 of 4 over 320 samples


class TokenPacker(DefaultTaskEncoder):
    def encode_sample(self, sample, rng):
        return TextSample(text=sample.caption, __key__=sample.__key__)

    def pack_selected_samples(self, samples):
        return TextSample(
            text="|".join(s.text for s in samples), __key__="+".join(s.__key__ for s in samples)
        )

    def encode_batch(self, batch):
        return {"keys": batch.__key__}


def test_plan_packing_with_a_parquet_column_as_budget(hub):
    ds = _train(
        hub,
        batch_size=2,
        task_encoder=TokenPacker(),
        columns=["tokens"],
        plan_stages=[pack({"tokens": 16}, strategy="balanced", packing_buffer_size=10)],
    )
    data = open_dataset(hub)
    tokens = {data.key(i): int(data.column("tokens")[i]) for i in range(len(data))}
    batches = _take(fpipe.get_loader(ds), 6)
    packs = [k.split("+") for b in batches for k in b["keys"]]
    assert all(sum(tokens[k] for k in p) <= 16 for p in packs)
    assert any(len(p) > 1 for p in packs)
    keys = [k for p in packs for k in p]
    assert len(keys) == len(set(keys))
    assert np.mean([len(p) for p in packs]) > 1.5


def test_slices_of_row_group_size_decode_each_row_group_once(tmp_path):
    root = write_hub_dataset(tmp_path / "aligned", train=(14, 14, 14), val=(7,), row_group=7)
    prepare_dataset(root)
    ds = _train(str(root), batch_size=3, shuffle_buffer_size=14, num_epochs=1)
    source = ds.materializer.sources[0]
    assert source.open_kwargs["row_group_cache"] == 4  # 14 / 7 slices in a window, plus 2
    keys = [k for b in fpipe.get_loader(ds) for k in b.__key__]
    assert len(keys) == 42 and len(set(keys)) == 42
    assert ds.materializer.dataset(0).reader.decoded_row_groups == 6  # 42 rows, 7 per group


def test_each_worker_decodes_each_row_group_at_most_once(tmp_path, monkeypatch):
    root = write_hub_dataset(tmp_path / "aligned", train=(14, 14, 14), val=(7,), row_group=7)
    prepare_dataset(root)
    log = tmp_path / "decoded.log"
    decode = ParquetReader._group

    def logged(self, sid, rg, columns, key, i):  # forked workers append what they decode
        before = self.decoded_row_groups
        entry = decode(self, sid, rg, columns, key, i)
        if self.decoded_row_groups != before:
            with open(log, "a") as f:
                f.write(f"{os.getpid()} {sid} {rg}\n")
        return entry

    monkeypatch.setattr(ParquetReader, "_group", logged)
    ds = _train(str(root), batch_size=3, shuffle_buffer_size=14, num_epochs=1)
    keys = [k for b in fpipe.get_loader(ds, num_workers=2) for k in b.__key__]
    assert len(keys) == 42 and len(set(keys)) == 42
    decoded = [tuple(line.split()) for line in log.read_text().splitlines()]
    assert len({pid for pid, _, _ in decoded}) == 2  # both workers read
    assert max(Counter(decoded).values()) == 1  # no worker decoded a row group twice
    every = {(str(sid), str(rg)) for sid in range(3) for rg in (0, 1)}  # 3 files, 2 groups each
    assert {(sid, rg) for _, sid, rg in decoded} == every


def test_a_file_broken_after_prepare_is_skipped_and_counted_not_a_crash(tmp_path):
    root = write_hub_dataset(tmp_path / "broken", train=(7, 7), val=(), row_group=7)
    prepare_dataset(root)
    bad = root / "data" / "train-00001-of-00002.parquet"
    bad.write_bytes(bad.read_bytes()[:100])  # truncated after prepare
    ds = _train(
        str(root), num_epochs=1, batch_size=1, error_policy="skip",
        open_kwargs={"shard_check": "off"},
    )  # fmt: skip
    loader = fpipe.get_loader(ds)
    keys = [k for b in loader for k in b.__key__]
    assert sorted(keys) == sorted(f"data/train-00000-of-00002/{j}" for j in range(7))
    assert loader.stats().skipped == 7  # the other file's rows: skipped and counted
    with pytest.raises(Exception, match="train-00001-of-00002"):
        list(fpipe.get_loader(_train(str(root), num_epochs=1, open_kwargs={"shard_check": "off"})))
