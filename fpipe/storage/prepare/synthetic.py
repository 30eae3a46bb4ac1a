"""Small synthetic datasets (image + caption + json shards) for demos, tests and benchmarks.

Everything is derived from a seed through :mod:`fpipe.core.rng`, so the same call writes the
same bytes.

Example:
    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> len(write_image_caption_shards(root, num_shards=2, per_shard=3))
    2
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np

from fpipe.core.rng import fold_in, generator, key

__all__ = ["write_image_caption_shards"]

_COLORS = {
    "red": (220, 40, 40),
    "green": (40, 180, 60),
    "blue": (40, 80, 220),
    "yellow": (230, 210, 40),
    "purple": (140, 50, 170),
    "white": (245, 245, 245),
}
_SHAPES = ("circle", "square", "stripe")


def _image(rng: np.random.Generator, width: int, height: int):
    from PIL import Image, ImageDraw

    names = list(_COLORS)
    fg, bg = rng.choice(len(names), size=2, replace=False)
    shape = _SHAPES[int(rng.integers(len(_SHAPES)))]
    # A gradient background plus a shape: natural enough for JPEG and resizing to be realistic.
    y = np.linspace(0, 1, height, dtype=np.float32)[:, None, None]
    base = np.array(_COLORS[names[bg]], dtype=np.float32)
    pixels = np.clip(base * (0.6 + 0.4 * y) + rng.normal(0, 6, (height, width, 3)), 0, 255)
    img = Image.fromarray(pixels.astype(np.uint8))
    draw = ImageDraw.Draw(img)
    x0, y0 = int(rng.integers(0, width // 2)), int(rng.integers(0, height // 2))
    x1, y1 = x0 + width // 3, y0 + height // 3
    color = _COLORS[names[fg]]
    if shape == "circle":
        draw.ellipse((x0, y0, x1, y1), fill=color)
    elif shape == "square":
        draw.rectangle((x0, y0, x1, y1), fill=color)
    else:
        draw.rectangle((0, y0, width, y0 + max(2, height // 10)), fill=color)
    caption = f"a {names[fg]} {shape} on a {names[bg]} background"
    return img, caption


def write_image_caption_shards(
    root: str | Path,
    *,
    num_shards: int = 4,
    per_shard: int = 64,
    min_size: int = 64,
    max_size: int = 256,
    seed: int = 0,
    quality: int = 90,
) -> list[Path]:
    """Write ``num_shards`` WebDataset shards of ``per_shard`` samples (jpg, txt, json).

    Each sample has a JPEG of random size in [min_size, max_size], a caption describing it and
    a JSON member with the caption and its word count. Returns the shard paths.
    """
    from PIL import Image  # noqa: F401 - fail early with a clear import error

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    k = key(seed)
    paths = []
    for s in range(num_shards):
        path = root / f"shard-{s:04d}.tar"
        with tarfile.open(path, "w") as tar:
            for j in range(per_shard):
                i = s * per_shard + j
                rng = generator(fold_in(k, i))
                w, h = (int(v) for v in rng.integers(min_size, max_size + 1, size=2))
                img, caption = _image(rng, w, h)
                buf = io.BytesIO()
                img.save(buf, format="JPEG", quality=quality)
                meta = {"caption": caption, "words": len(caption.split()), "index": i}
                for ext, data in (
                    ("jpg", buf.getvalue()),
                    ("txt", caption.encode()),
                    ("json", json.dumps(meta).encode()),
                ):
                    info = tarfile.TarInfo(f"{i:08d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        paths.append(path)
    return paths
