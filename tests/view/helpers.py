"""Small datasets for the ``fpipe view`` tests and screenshots: an image-caption dataset (one
caption is hostile HTML), two text datasets, a metadataset blending the three, a mix history
and a plan config with ramp-up and skip ranges."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from fpipe.storage import prepare_dataset
from tests.storage.helpers import jpeg_bytes, write_tar

__all__ = ["HOSTILE", "make_view_data"]

#: A caption that would run script if a page inserted it unescaped.
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'

_COLORS = [(200, 30, 60), (30, 160, 90), (40, 80, 200), (220, 180, 20), (120, 40, 160)]


def _image_caption(root: Path, shards: int = 2, per_shard: int = 6) -> str:
    for s in range(shards):
        samples = []
        for j in range(per_shard):
            i = s * per_shard + j
            caption = HOSTILE if i == 3 else f"a picture number {i}"
            samples.append(
                (
                    f"{i:05d}",
                    {
                        "jpg": jpeg_bytes(40 + 4 * j, 30 + 2 * j, _COLORS[i % len(_COLORS)]),
                        "txt": caption.encode(),
                        "json": json.dumps({"tokens": 8 + i}).encode(),
                    },
                )
            )
        write_tar(root / f"shard-{s:02d}.tar", samples)
    prepare_dataset(
        root,
        fields={"image": "jpg", "caption": "txt"},
        sample_type="CaptioningSample",
        columns=["tokens=json[tokens]"],
    )
    return str(root)


def _text(root: Path, words: int, n: int = 16) -> str:
    samples = [
        (
            f"{i:05d}",
            {
                "txt": " ".join(["word"] * (words + i % 3)).encode(),
                "json": json.dumps({"tokens": words + i % 3}).encode(),
            },
        )
        for i in range(n)
    ]
    write_tar(root / "shard-00.tar", samples)
    prepare_dataset(
        root, fields={"text": "txt"}, sample_type="TextSample", columns=["tokens=json[tokens]"]
    )
    return str(root)


def make_view_data(root: str | Path) -> dict[str, str]:
    """Write the datasets under ``root``; returns their paths by role: ``web`` (a dataset
    folder), ``mix`` (metadataset.yaml), ``history`` (mix history JSON), ``plan`` (a plan
    YAML with ramp-up and skip ranges over the metadataset)."""
    root = Path(root)
    web = _image_caption(root / "web")
    _text(root / "code", 20)
    _text(root / "books", 200)
    mix = root / "mix.yaml"
    mix.write_text(
        yaml.safe_dump(
            {
                "splits": {
                    "train": {
                        "blend": [
                            {"weight": 0.5, "path": "web"},
                            {"weight": 0.3, "path": "code"},
                            {"weight": 0.2, "path": "books"},
                        ]
                    }
                }
            }
        )
    )
    history = root / "history.json"
    history.write_text(
        json.dumps(
            {
                "format": "fpipe-mix-history",
                "version": 1,
                "datasets": ["web", "code", "books"],
                "changes": [{"step": 20, "weights": {"web": 0.1, "code": 0.1, "books": 0.8}}],
            }
        )
    )
    plan = root / "plan.yaml"
    plan.write_text(
        yaml.safe_dump(
            {
                "path": "mix.yaml",
                "world_size": 2,
                "global_batch_size": 8,
                "rampup_batch_size": [4, 2, 24],
                "seed": 7,
                "skip_steps": [[12, 15]],
                "mix_history": "history.json",
            }
        )
    )
    return {"web": web, "mix": str(mix), "history": str(history), "plan": str(plan)}
