"""Benchmark: JPEG decode + resize + center crop to 224, full decode vs reduced-scale (draft).

Synthetic 800-1600 px JPEGs with natural-ish content (smooth gradients, low-frequency blobs,
shapes with edges, sensor-like noise) so the PSNR is meaningful. Both paths use
:func:`fpipe.decode.image.decode_image` with the same filter; only ``draft`` differs. The PSNR is
of the draft output against the full-decode output.

A third timing, ``naive``, is what a plain loop (and WebDataset's usual pipeline) does: full
decode, resize the whole image, then crop; fpipe's full path already resizes only the crop box.

Usage: ``python bench/image_decode.py [--n 48] [--repeats 3] [--quality 90]``.
The last line of output is one JSON object (``draft_speedup``, ``psnr_reduced_decode``, ...).
"""

from __future__ import annotations

import argparse
import io
import json
import time

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from fpipe.decode.image import decode_image, psnr


def synthetic_jpeg(rng: np.random.Generator, quality: int = 90) -> bytes:
    """One natural-ish JPEG, 800-1600 px per side."""
    w, h = (int(v) for v in rng.integers(800, 1601, size=2))
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    for c in range(3):  # smooth gradients
        a, b, k = rng.uniform(-1, 1, 3)
        img[..., c] = 128 + 60 * (a * xx / w + b * yy / h) + 30 * np.sin(k * 6 * xx / w)
    # low-frequency blobs: upsampled coarse noise
    coarse = rng.normal(0, 40, size=(h // 64 + 2, w // 64 + 2, 3)).astype(np.float32)
    blobs = Image.fromarray(np.clip(coarse + 128, 0, 255).astype(np.uint8)).resize(
        (w, h), Image.Resampling.BICUBIC
    )
    img += np.asarray(blobs, np.float32) - 128
    pil = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(pil)
    for _ in range(int(rng.integers(8, 20))):  # shapes with hard edges
        x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
        x1, y1 = x0 + int(rng.integers(20, w // 3)), y0 + int(rng.integers(20, h // 3))
        color = tuple(int(v) for v in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            draw.ellipse((x0, y0, x1, y1), fill=color)
        else:
            draw.rectangle((x0, y0, x1, y1), fill=color)
    pil = pil.filter(ImageFilter.GaussianBlur(1.0))  # camera-like softness
    arr = np.asarray(pil, np.float32) + rng.normal(0, 4, size=(h, w, 3))  # sensor noise
    buf = io.BytesIO()
    Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def _time(images: list[bytes], repeats: int, **kwargs) -> tuple[float, list]:
    best = float("inf")
    outs: list = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        outs = [decode_image(d, out="pil", **kwargs) for d in images]
        best = min(best, time.perf_counter() - t0)
    return best, outs


def naive_full(data: bytes, size: int) -> Image.Image:
    """What a plain loop does: full decode, resize the whole image, then crop."""
    img = Image.open(io.BytesIO(data)).convert("RGB")
    w, h = img.size
    s = size / min(w, h)
    nw, nh = max(size, round(w * s)), max(size, round(h * s))
    img = img.resize((nw, nh), Image.Resampling.BILINEAR)
    left, top = (nw - size) // 2, (nh - size) // 2
    return img.crop((left, top, left + size, top + size))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=48, help="number of synthetic JPEGs")
    ap.add_argument("--repeats", type=int, default=3, help="timed passes (best is kept)")
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--size", type=int, default=224, help="target size")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    images = [synthetic_jpeg(rng, args.quality) for _ in range(args.n)]
    mb = sum(len(d) for d in images) / 1e6
    print(f"{args.n} synthetic JPEGs, 800-1600 px, {mb:.1f} MB, target {args.size}")

    common = dict(target_size=args.size, resize="short_side", crop="center")
    t_full, full = _time(images, args.repeats, draft=False, **common)
    t_draft, drafted = _time(images, args.repeats, draft=True, **common)
    t_gap, _ = _time(images, args.repeats, draft=False, reducing_gap=2.0, **common)
    t_naive = float("inf")
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        naive = [naive_full(d, args.size) for d in images]
        t_naive = min(t_naive, time.perf_counter() - t0)
    psnrs = [psnr(a, b) for a, b in zip(full, drafted)]
    psnrs_naive = [psnr(a, b) for a, b in zip(naive, drafted)]
    n = args.n
    print(f"naive full decode, resize, crop: {1e3 * t_naive / n:7.2f} ms/image")
    print(f"full decode + resize + crop    : {1e3 * t_full / n:7.2f} ms/image")
    print(f"full decode, reducing_gap=2    : {1e3 * t_gap / n:7.2f} ms/image")
    print(f"draft (reduced-scale) decode   : {1e3 * t_draft / n:7.2f} ms/image")
    print(
        f"speedup {t_full / t_draft:.2f}x, PSNR draft vs full: mean {np.mean(psnrs):.2f} dB, "
        f"min {np.min(psnrs):.2f} dB"
    )
    result = {
        "draft_speedup": round(t_full / t_draft, 3),
        "psnr_reduced_decode": round(float(np.mean(psnrs)), 2),
        "psnr_reduced_decode_min": round(float(np.min(psnrs)), 2),
        "draft_speedup_vs_naive": round(t_naive / t_draft, 3),
        "psnr_reduced_vs_naive": round(float(np.mean(psnrs_naive)), 2),
        "naive_full_ms_per_image": round(1e3 * t_naive / n, 3),
        "full_ms_per_image": round(1e3 * t_full / n, 3),
        "draft_ms_per_image": round(1e3 * t_draft / n, 3),
        "reducing_gap2_ms_per_image": round(1e3 * t_gap / n, 3),
        "n_images": n,
        "target_size": args.size,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
