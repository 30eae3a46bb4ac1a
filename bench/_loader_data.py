"""Synthetic datasets for ``bench/loader.py`` (not a test module, not collected by pytest).

Three WebDataset folders, each prepared for both fpipe (``.fpipe/``) and Megatron-Energon
(``.nv-meta/``, written by Energon's own ``BaseWebdatasetFactory.prepare_dataset``, the function
behind ``energon prepare``, plus a non-interactive ``dataset.yaml``); WebDataset reads the same
``.tar`` files. So every loader reads the same bytes from the same page cache.

- ``images``: image-caption samples, natural-ish JPEGs (smooth gradients, low-frequency blobs,
  hard-edged shapes, sensor noise; quality 90) of 128-512 px per side, ``.jpg`` + ``.txt``.
- ``large``: the same with 800-1600 px per side.
- ``text``: token-id samples, one ``.npy`` int32 array of 200-400 ids each.

Encoding hundreds of large JPEGs costs more than the benchmark itself, so the image sets cycle a
pool of distinct encoded images (``pool`` of them) under distinct keys and captions: decode cost
per sample is unchanged, and each sample is still its own tar member.

A folder is reused when its ``bench-params.json`` matches the parameters (delete it to rebuild).
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ensure_image_set", "ensure_text_set", "natural_jpeg", "write_shard"]

_WORDS = (
    "a",
    "photo",
    "of",
    "the",
    "small",
    "large",
    "red",
    "blue",
    "green",
    "cat",
    "dog",
    "bird",
    "car",
    "tree",
    "house",
    "street",
    "field",
    "sky",
    "sea",
    "mountain",
    "river",
    "person",
    "child",
    "woman",
    "man",
    "table",
    "chair",
    "window",
    "door",
    "light",
    "dark",
    "sunny",
    "cloudy",
    "old",
    "new",
    "near",
    "far",
    "next",
    "to",
    "under",
    "over",
    "with",
    "without",
    "on",
    "in",
    "at",
    "playing",
    "sitting",
    "running",
)


def natural_jpeg(rng: np.random.Generator, lo: int, hi: int, quality: int = 90) -> bytes:
    """One natural-ish RGB JPEG whose sides are drawn uniformly from ``[lo, hi]``."""
    from PIL import Image, ImageDraw, ImageFilter

    w, h = (int(v) for v in rng.integers(lo, hi + 1, size=2))
    xx = np.linspace(0.0, 1.0, w, dtype=np.float32)[None, :]
    yy = np.linspace(0.0, 1.0, h, dtype=np.float32)[:, None]
    img = np.empty((h, w, 3), np.float32)
    for c in range(3):  # smooth gradients and a low-frequency wave
        a, b, k = rng.uniform(-1, 1, 3)
        img[..., c] = 128 + 60 * (a * xx + b * yy) + 30 * np.sin(k * 6 * xx)
    coarse = rng.normal(0, 40, size=(h // 48 + 2, w // 48 + 2, 3)).astype(np.float32)
    blobs = Image.fromarray(np.clip(coarse + 128, 0, 255).astype(np.uint8)).resize(
        (w, h), Image.Resampling.BICUBIC
    )
    img += np.asarray(blobs, np.float32) - 128
    pil = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(pil)
    for _ in range(int(rng.integers(6, 16))):  # shapes with hard edges
        x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
        x1 = x0 + int(rng.integers(8, max(9, w // 3)))
        y1 = y0 + int(rng.integers(8, max(9, h // 3)))
        color = tuple(int(v) for v in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)((x0, y0, x1, y1), fill=color)
    pil = pil.filter(ImageFilter.GaussianBlur(1.0))
    noise = rng.normal(0, 4, size=(h, w, 3)).astype(np.float32)
    arr = np.clip(np.asarray(pil, np.float32) + noise, 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def _caption(rng: np.random.Generator) -> bytes:
    n = int(rng.integers(6, 20))
    return " ".join(_WORDS[i] for i in rng.integers(0, len(_WORDS), n)).encode()


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def write_shard(path: Path, samples: list[tuple[str, dict[str, bytes]]]) -> None:
    tmp = path.with_suffix(".tmp")
    with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as tf:
        for key, members in samples:
            for ext, data in members.items():
                ti = tarfile.TarInfo(f"{key}.{ext}")
                ti.size = len(data)
                ti.mtime = 1_700_000_000
                ti.mode = 0o644
                tf.addfile(ti, io.BytesIO(data))
    os.replace(tmp, path)


#: what `fpipe prepare` writes by default (the flat index; format 1 is read by slower code
#: and the compact format 4 is opt-in: timings would not be those of a default prepare)
FLAT_VERSIONS = (2, 3)


def _params_match(root: Path, params: dict) -> bool:
    """The folder holds this set, prepared by both, fpipe's index in the format a default
    prepare writes."""
    import yaml

    f = root / "bench-params.json"
    info = root / ".fpipe" / "info.yaml"
    return (
        f.exists()
        and json.loads(f.read_text()) == params
        and info.exists()
        and yaml.safe_load(info.read_text()).get("version") in FLAT_VERSIONS
        # Energon's index, where Energon can be imported (else its rows are skipped anyway and
        # the set would be written again on every run)
        and ((root / ".nv-meta" / "dataset.yaml").exists() or not _energon_importable())
    )


def _energon_importable() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("megatron.energon") is not None
    except ImportError:  # no megatron package at all
        return False


def _prepare_both(root: Path, shards: list[str], fields: dict, sample_type: str) -> dict:
    """fpipe ``prepare_dataset`` and Energon's prepare (non-interactive) on one folder."""
    import shutil

    from fpipe.storage import prepare_dataset

    times = {}
    for d in (".fpipe", ".nv-meta"):
        shutil.rmtree(root / d, ignore_errors=True)
    t0 = time.perf_counter()
    prepare_dataset(root, fields=fields, sample_type=sample_type, split="1,0,0")
    times["fpipe_prepare_s"] = time.perf_counter() - t0
    try:
        times["energon_prepare_s"] = _energon_prepare(root, shards, fields, sample_type)
    except ImportError as e:  # Energon not installed: its rows are skipped
        times["energon_prepare_error"] = f"{type(e).__name__}: {e}"
    return times


def _energon_prepare(root: Path, shards: list[str], fields: dict, sample_type: str) -> float:
    """What ``energon prepare --non-interactive --sample-type T --field-map ...`` does."""
    import yaml
    from megatron.energon.epathlib import EPath
    from megatron.energon.flavors import BaseWebdatasetFactory

    t0 = time.perf_counter()
    BaseWebdatasetFactory.prepare_dataset(
        EPath(root),
        shards,
        split_parts_ratio=[("train", 1.0), ("val", 0.0), ("test", 0.0)],
        shuffle_seed=None,
        workers=1,
    )
    (root / ".nv-meta" / "dataset.yaml").write_text(
        yaml.safe_dump(
            {
                "sample_type": {"__module__": "megatron.energon", "__class__": sample_type},
                "field_map": dict(fields),
            },
            sort_keys=False,
        )
    )
    return time.perf_counter() - t0


def ensure_image_set(
    root: str | os.PathLike,
    *,
    samples: int,
    shards: int,
    lo: int,
    hi: int,
    pool: int,
    seed: int = 0,
    quality: int = 90,
) -> dict[str, Any]:
    """Write (or reuse) an image-caption folder; returns its parameters and build timings."""
    root = Path(root)
    params = dict(
        kind="images",
        samples=samples,
        shards=shards,
        lo=lo,
        hi=hi,
        pool=pool,
        seed=seed,
        quality=quality,
        version=2,
    )
    if _params_match(root, params):
        return {**params, "reused": True}
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    jpegs = [natural_jpeg(rng, lo, hi, quality) for _ in range(pool)]
    gen_s = time.perf_counter() - t0
    per = -(-samples // shards)
    names = []
    for s in range(shards):
        batch = []
        for i in range(s * per, min(samples, (s + 1) * per)):
            batch.append((f"s{i:07d}", {"jpg": jpegs[i % pool], "txt": _caption(rng)}))
        name = f"shard-{s:04d}.tar"
        write_shard(root / name, batch)
        names.append(name)
    times = _prepare_both(root, names, {"image": "jpg", "caption": "txt"}, "CaptioningSample")
    (root / "bench-params.json").write_text(json.dumps(params))
    mean_bytes = float(np.mean([len(j) for j in jpegs]))
    return {**params, "reused": False, "jpeg_gen_s": gen_s, "mean_jpeg_bytes": mean_bytes, **times}


def ensure_text_set(
    root: str | os.PathLike,
    *,
    samples: int,
    shards: int,
    lo: int = 200,
    hi: int = 400,
    vocab: int = 128_000,
    seed: int = 0,
) -> dict[str, Any]:
    """Write (or reuse) a folder of token-id samples (``.npy`` int32, ``lo``-``hi`` ids)."""
    root = Path(root)
    params = dict(
        kind="text", samples=samples, shards=shards, lo=lo, hi=hi, vocab=vocab, seed=seed, version=2
    )
    if _params_match(root, params):
        return {**params, "reused": True}
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    per = -(-samples // shards)
    names = []
    for s in range(shards):
        n = min(samples, (s + 1) * per) - s * per
        lens = rng.integers(lo, hi + 1, size=n)
        ids = rng.integers(0, vocab, size=int(lens.sum()), dtype=np.int32)
        cuts = np.concatenate([[0], np.cumsum(lens)])
        batch = [
            (f"t{s * per + j:07d}", {"npy": _npy(ids[cuts[j] : cuts[j + 1]])}) for j in range(n)
        ]
        name = f"shard-{s:04d}.tar"
        write_shard(root / name, batch)
        names.append(name)
    times = _prepare_both(root, names, {"text": "npy"}, "TextSample")
    (root / "bench-params.json").write_text(json.dumps(params))
    return {**params, "reused": False, **times}
