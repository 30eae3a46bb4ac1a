"""Benchmark ``fpipe prepare`` and random access against Python's ``tarfile``.

Builds a synthetic image-caption WebDataset in a temp dir (3 members per sample: jpg of varied
sizes, txt, json), then, page cache warm, in one run:

1. ``prepare_dataset(..., workers=1)``: samples/s on one core, image sizes from headers;
2. ``tarfile`` reading every sample sequentially (all member bytes) -> samples/s;
3. ``open_dataset(...).read(i)`` in a shuffled order of all samples -> samples/s;
4. ``open_dataset(...).read(i)`` in index order -> samples/s.

The last line is one JSON object with ``prepare_samples_per_s``, ``random_vs_tarfile_ratio``
and ``sequential_vs_tarfile_ratio`` (fpipe samples/s divided by tarfile samples/s).

    python bench/prepare.py [--samples 40000] [--shards 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fpipe.storage import open_dataset, prepare_dataset  # noqa: E402


def _jpeg_pool(n: int, rng: np.random.Generator) -> list[bytes]:
    from PIL import Image

    pool = []
    for _ in range(n):
        w, h = int(rng.integers(32, 640)), int(rng.integers(32, 480))
        # smooth noise: compresses to realistic-ish sizes (a few KB to tens of KB)
        small = rng.integers(0, 255, (max(h // 8, 1), max(w // 8, 1), 3), dtype=np.uint8)
        im = Image.fromarray(small).resize((w, h))
        buf = io.BytesIO()
        im.save(buf, format="JPEG", quality=int(rng.integers(60, 95)))
        pool.append(buf.getvalue())
    return pool


def build(root: Path, samples: int, shards: int, seed: int = 0) -> int:
    """Write the synthetic dataset; returns total bytes."""
    rng = np.random.Generator(np.random.Philox(seed))
    pool = _jpeg_pool(64, rng)
    per = -(-samples // shards)
    total = 0
    i = 0
    for s in range(shards):
        with tarfile.open(root / f"shard-{s:05d}.tar", "w", format=tarfile.GNU_FORMAT) as tf:
            for _ in range(min(per, samples - i)):
                caption = f"a photo of thing {i} " * int(1 + i % 5)
                members = {
                    "jpg": pool[i % len(pool)],
                    "txt": caption.encode(),
                    "json": json.dumps({"caption": caption, "id": i, "aesthetic": i % 7}).encode(),
                }
                for ext, data in members.items():
                    ti = tarfile.TarInfo(f"{i:09d}.{ext}")
                    ti.size = len(data)
                    tf.addfile(ti, io.BytesIO(data))
                    total += len(data)
                i += 1
    return total


def warm(root: Path) -> None:
    for p in sorted(root.glob("*.tar")):
        with open(p, "rb") as f:
            while f.read(1 << 22):
                pass


def tarfile_sequential(root: Path) -> tuple[int, float]:
    """Read every sample (all member bytes) with tarfile, grouping members by key."""
    t0 = time.perf_counter()
    n = 0
    for p in sorted(root.glob("*.tar")):
        with tarfile.open(p, "r:") as tf:
            last, sample = None, {}
            for m in tf:
                if not m.isreg():
                    continue
                key, ext = m.name.split(".", 1)
                if key != last:
                    if sample:
                        n += 1
                    last, sample = key, {}
                sample[ext] = tf.extractfile(m).read()
            n += bool(sample)
    return n, time.perf_counter() - t0


def fpipe_read(root: Path, order: np.ndarray) -> float:
    ds = open_dataset(root)
    t0 = time.perf_counter()
    read = ds.read
    for i in order.tolist():
        read(i)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=40_000)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3, help="best of N for each measurement")
    ap.add_argument("--dir", default=None, help="work dir (default: a fresh temp dir)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        nbytes = build(root, args.samples, args.shards)
        print(
            f"built {args.samples} samples in {args.shards} shards, {nbytes / 1e6:.1f} MB "
            f"member data, {time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        print(
            f"python {platform.python_version()} on {platform.machine()}, "
            f"{os.cpu_count()} cpus; best of {args.repeat}",
            flush=True,
        )
        warm(root)
        prep = []
        for _ in range(args.repeat):
            rep = prepare_dataset(
                root,
                fields={"image": "jpg", "caption": "txt"},
                columns=["aesthetic=json[aesthetic]"],
                workers=1,
            )
            assert rep.num_samples == args.samples and not rep.problems, rep
            prep.append(rep.samples_per_s)
        prepare_sps = max(prep)
        print(
            f"prepare (1 worker, header-only image sizes, json column): "
            f"{prepare_sps:,.0f} samples/s"
        )
        tar_t = []
        for _ in range(args.repeat):
            n, dt = tarfile_sequential(root)
            assert n == args.samples
            tar_t.append(dt)
        tar_sps = args.samples / min(tar_t)
        print(f"tarfile sequential read: {tar_sps:,.0f} samples/s")
        rng = np.random.Generator(np.random.Philox(1))
        shuffled = rng.permutation(args.samples)
        rand_sps = args.samples / min(fpipe_read(root, shuffled) for _ in range(args.repeat))
        seq_sps = args.samples / min(
            fpipe_read(root, np.arange(args.samples)) for _ in range(args.repeat)
        )
        print(f"fpipe random-order read: {rand_sps:,.0f} samples/s")
        print(f"fpipe sequential read:   {seq_sps:,.0f} samples/s")
        result = {
            "samples": args.samples,
            "shards": args.shards,
            "member_mb": round(nbytes / 1e6, 1),
            "prepare_samples_per_s": round(prepare_sps),
            "tarfile_samples_per_s": round(tar_sps),
            "random_samples_per_s": round(rand_sps),
            "sequential_samples_per_s": round(seq_sps),
            "random_vs_tarfile_ratio": round(rand_sps / tar_sps, 3),
            "sequential_vs_tarfile_ratio": round(seq_sps / tar_sps, 3),
        }
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
