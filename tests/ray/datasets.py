"""Datasets for the Ray worker tests, one per kind of plan and hook: small and fast to make."""

from __future__ import annotations

import csv
import io
import json
import textwrap
import zlib

import torch
from PIL import Image

import fpipe
from fpipe.decode.image import ImageDecodeOptions
from fpipe.encode import DefaultTaskEncoder
from fpipe.plan import pack
from fpipe.samples import TextSample
from tests.loader.helpers import build, prepared_images

#: OpenSora's bucket_config form, with tiny resolutions (image and 4-frame clip buckets).
BUCKETS = {"1:1": {16: {1: (1.0, 2), 4: (1.0, 2)}}, "16:9": {"18x32": {4: (1.0, 2)}}}


class EveryHook(DefaultTaskEncoder):
    """Every hook of a packing task encoder, each leaving a trace and drawing from its rng."""

    def preencode_sample(self, sample, rng):
        return TextSample(text=f"pre{int(rng.integers(100))}", __key__=sample.__key__)

    def select_samples_to_pack(self, samples):
        fresh = [s.replace(text=s.text + ">sel") for s in reversed(samples)]
        return [fresh[i : i + 2] for i in range(0, len(fresh), 2)]

    def postencode_sample(self, sample, rng):
        return sample.replace(text=f"{sample.text}>post{int(rng.integers(100))}")

    def pack_selected_samples(self, samples):
        return TextSample(
            text=" & ".join(s.text for s in samples), __key__="+".join(s.__key__ for s in samples)
        )

    def batch(self, samples):
        return super().batch(samples)

    def encode_batch(self, batch):
        return {"texts": batch.text, "keys": batch.__key__}


class Stamped(DefaultTaskEncoder):
    """Every image a 3 x 128 x 128 block of one value taken from its key, plus a float copy
    viewed transposed: batches of about 1 MB (large enough to be read where they lie in
    the object store) that differ in their bytes."""

    def encode_sample(self, sample, rng):
        value = zlib.crc32(sample.__key__.encode()) % 251
        image = torch.full((3, 128, 128), value, dtype=torch.uint8)
        return sample.replace(image=image)

    def encode_batch(self, batch):
        image = batch.image
        return {"image": image, "half": image[:, 1], "t": image.float().transpose(2, 3),
                "keys": batch.__key__}  # fmt: skip


class Texts(DefaultTaskEncoder):
    """Packs chosen by the plan (``fpipe.plan.pack``), joined text."""

    def pack_selected_samples(self, samples):
        return TextSample(
            text="|".join(s.text for s in samples), __key__="+".join(s.__key__ for s in samples)
        )

    def encode_batch(self, batch):
        return {"texts": batch.text, "keys": batch.__key__}


def make_all(root) -> dict:
    """Paths of the datasets the builders below read."""
    images = prepared_images(root / "images", shards=4, per_shard=12)
    (root / "mix").mkdir()
    for name, n in (("short", 300), ("long", 200)):
        with open(root / "mix" / f"{name}.jsonl", "w") as f:
            for i in range(n):
                tokens = 3 + (i * 7) % (9 if name == "short" else 40)
                f.write(json.dumps({"text": f"{name} {i}", "tokens": tokens}) + "\n")
    (root / "mix" / "blend.yaml").write_text(
        textwrap.dedent(
            """\
            splits:
              train:
                blend:
                  - {weight: 2, path: short.jsonl}
                  - {weight: 1, path: long.jsonl}
            """
        )
    )
    return {"images": images, "blend": str(root / "mix" / "blend.yaml"), "media": _media(root)}


def _media(root) -> str:
    """An OpenSora CSV of clips of two shapes and images, for buckets."""
    from fpipe.storage import prepare_dataset
    from tests.decode.av_helpers import write_video

    d = root / "media"
    d.mkdir()
    rows = []
    for i, (w, h, frames) in enumerate([(48, 48, 6), (64, 36, 6), (40, 40, 1)] * 2):
        if frames > 1:
            data = write_video(None, num_frames=frames, fps=8, width=w, height=h, gop=8)
            name = f"m{i}.mp4"
        else:
            buf = io.BytesIO()
            Image.new("RGB", (w, h), (20 * i, 30, 90)).save(buf, "JPEG")
            data, name = buf.getvalue(), f"m{i}.jpg"
        (d / name).write_bytes(data)
        rows.append([name, f"sample {i}", frames, h, w])
    with open(d / "train.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["path", "text", "num_frames", "height", "width"])
        out.writerows(rows)
    prepare_dataset(d / "train.csv")
    return str(d / "train.csv")


def loader(paths: dict, kind: str, **kw) -> fpipe.Loader:
    """A loader of ``kind`` over the datasets of :func:`make_all` (``kw``: get_loader's)."""
    if kind == "images":
        return build(paths["images"], **kw)
    if kind == "video_buckets":
        from fpipe.encode.video import VideoTransformConfig
        from fpipe.encode.video_task import VideoTaskEncoder

        ds = fpipe.get_train_dataset(
            paths["media"],
            bucket_config=BUCKETS,
            task_encoder=VideoTaskEncoder(VideoTransformConfig(num_frames=2, height=8, width=8)),
            field_map={"video": "path", "caption": "text"},
            sample_type="CaptionedVideoSample",
            seed=3,
            num_epochs=2,
            drop_last=False,
        )
    elif kind == "blend_pack_ramp_skip":
        ds = fpipe.get_train_dataset(
            paths["blend"],
            global_batch_size=8,
            rampup_batch_size=(2, 2, 40),
            seed=4,
            sample_type="TextSample",
            field_map={"text": "text"},
            columns=["tokens"],
            task_encoder=Texts(),
            plan_stages=[pack({"tokens": 30}, strategy="balanced", packing_buffer_size=12)],
            skip_steps=[(2, 4)],
        )
    elif kind == "every_hook":
        ds = fpipe.get_train_dataset(
            paths["images"],
            batch_size=2,
            seed=3,
            task_encoder=EveryHook(),
            packing_buffer_size=7,
            image_decode=ImageDecodeOptions(target_size=8),
        )
    else:
        raise ValueError(kind)
    return fpipe.get_loader(ds, **kw)
