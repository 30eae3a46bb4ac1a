"""The bucket_config of docs/buckets.md on an OpenSora CSV of videos and images of mixed shapes:
every batch is ``[B, 3, T, H, W]`` of its bucket, in [-1, 1], the same bucket on every rank.

The media are tiny but large enough for the config's smallest buckets (a 256 x 256 image, a
430 x 242 clip of 20 frames...), written at test time with PyAV and Pillow.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
import torch
from PIL import Image

import fpipe
from fpipe.encode.video import VideoTransformConfig
from fpipe.encode.video_task import VideoBatch, VideoTaskEncoder
from fpipe.loader import Topology
from fpipe.materialize.recipe_codec import decode_recipe, encode_recipe
from fpipe.storage import prepare_dataset
from tests.decode.av_helpers import write_video
from tests.helpers import OPENSORA_BUCKET_CONFIG, OPENSORA_BUCKET_YAML

# The bucket_config of docs/buckets.md (int and "HxW" keys, tuples as values).
BUCKET_CONFIG = OPENSORA_BUCKET_CONFIG

# (kind, width, height, frames, how many) -> the bucket each should land in
MEDIA = [
    ("jpg", 300, 280, 1, 2, "1:1/256/1"),
    ("png", 520, 540, 1, 2, "1:1/512/1"),
    ("mp4", 430, 242, 20, 2, "16:9/240x426/17"),
    ("mp4", 242, 430, 18, 2, "9:16/426x240/17"),
    ("mp4", 262, 262, 17, 2, "1:1/256/17"),
    ("jpg", 100, 100, 1, 1, None),  # below every bucket: counted as unfit
]


def _image(w: int, h: int, fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (200, 30, 90)).save(buf, "JPEG" if fmt == "jpg" else "PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("opensora_buckets")
    media = d  # media next to the CSV: paths are relative to its folder
    with open(d / "train.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "text", "num_frames", "height", "width"])
        i = 0
        for kind, width, height, frames, count, _ in MEDIA:
            for _ in range(count):
                name = f"m{i:02d}.{kind}"
                if kind == "mp4":
                    data = write_video(
                        None, num_frames=frames, fps=8, width=width, height=height, gop=8
                    )
                else:
                    data = _image(width, height, kind)
                (media / name).write_bytes(data)
                w.writerow([name, f"sample {i}", frames, height, width])
                i += 1
    rep = prepare_dataset(d / "train.csv")
    assert not rep.problems
    return d / "train.csv"


def _dataset(table, rank=0, world=1, **kw):
    enc = VideoTaskEncoder(VideoTransformConfig(num_frames=1, height=8, width=8))
    return fpipe.get_train_dataset(
        table,
        bucket_config=BUCKET_CONFIG,
        task_encoder=enc,
        field_map={"video": "path", "caption": "text"},
        sample_type="CaptionedVideoSample",
        topology=Topology(rank=rank, world_size=world),
        seed=3,
        num_epochs=1,
        drop_last=False,
        **kw,
    )


def test_batch_shapes_per_bucket(table):
    ds = _dataset(table)
    labels = [b.label for b in ds.buckets.buckets]
    recipes = _recipes(ds.plan)
    state, _ = ds.plan.next(ds.plan.restore(ds.plan.snapshot(ds.plan.init())), 10**6)
    assert state.unfit == 1 and state.rejected == 0 and state.dropped == 0
    expected = {label: n for *_, n, label in MEDIA if label}
    got = {}
    for r in recipes:
        got[labels[r.bucket]] = got.get(labels[r.bucket], 0) + len(r)
    assert got == expected  # every sample in the bucket its metadata says, once

    loader = fpipe.get_loader(ds, num_workers=0)
    batches = list(loader)
    assert len(batches) == len(recipes)
    dropped = loader.stats().dropped
    assert (dropped["unfit"], dropped["rejected"], dropped["group_remainder"]) == (1, 0, 0)
    for r, b in zip(recipes, batches):
        t, h, w = ds.buckets.buckets[r.bucket].shape
        assert decode_recipe(encode_recipe(r)).shape == r.shape == (t, h, w)  # sent to workers
        assert isinstance(b, VideoBatch)
        assert b.video.shape == (len(r), 3, t, h, w) and b.video.dtype == torch.float32
        assert b.video.min() >= -1.0 and b.video.max() <= 1.0
        assert b.caption == [f"sample {i}" for i in r.refs.index.tolist()]


def _recipes(plan):
    state, out = plan.init(), []
    while True:
        state, got = plan.next(state, 1)
        if not got:
            return out
        out.extend(got)


def test_two_ranks_agree_on_every_step(table):
    runs = [_recipes(_dataset(table, rank, 2).plan) for rank in range(2)]
    assert len(runs[0]) == len(runs[1]) > 0
    for r0, r1 in zip(*runs):
        assert r0.bucket == r1.bucket and abs(len(r0) - len(r1)) <= 1  # remainders split evenly
    used = [t for run in runs for r in run for t in r.refs.triples()]
    assert len(used) == len(set(used)) == sum(n for *_, n, label in MEDIA if label)


def test_bucket_config_refuses_batch_size_and_per_rank(table):
    with pytest.raises(fpipe.core.ConfigError, match="own batch size"):
        _dataset(table, batch_size=4)
    with pytest.raises(fpipe.core.ConfigError, match="global distribution"):
        _dataset(table, distribution="per_rank")


def test_fpipe_plan_prints_the_bucket_of_a_step_and_a_histogram(table, capsys):
    import json

    from fpipe.cli.main import main

    d = table.parent
    (d / "buckets.yaml").write_text(OPENSORA_BUCKET_YAML)
    cfg = {"path": table.name, "bucket_config": "buckets.yaml", "world_size": 2, "seed": 3}
    cfg.update(num_epochs=1, drop_last=False)
    (d / "plan.yaml").write_text(json.dumps(cfg))  # JSON is YAML
    recipes = _recipes(_dataset(table, 0, 2).plan)
    labels = [b.label for b in _dataset(table).buckets.buckets]
    for step in (0, len(recipes) - 1):
        assert main(["plan", str(d / "plan.yaml"), "--step", str(step), "--json"]) == 0
        got = json.loads(capsys.readouterr().out)
        assert {r["bucket"] for r in got["ranks"]} == {labels[recipes[step].bucket]}
    assert main(["plan", str(d / "plan.yaml"), "--step", "0"]) == 0
    assert f"bucket {labels[recipes[0].bucket]}" in capsys.readouterr().out
    assert main(["plan", str(d / "plan.yaml"), "--buckets", "100", "--json"]) == 0
    hist = json.loads(capsys.readouterr().out)
    assert hist["steps"] == len(recipes) and hist["unfit"] == 1
    counts = {row["bucket"]: row["steps"] for row in hist["buckets"] if row["steps"]}
    assert counts == {
        lab: sum(labels[r.bucket] == lab for r in recipes)
        for lab in {labels[r.bucket] for r in recipes}
    }
    assert main(["plan", str(d / "plan.yaml"), "--buckets", "100"]) == 0
    assert "buckets of the first" in capsys.readouterr().out
