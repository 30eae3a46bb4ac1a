"""Soak: 100,000 batches of a small synthetic dataset through 2 DataLoader workers; the main
process's resident memory after 100,000 batches against after 10,000 (within 5%).

    python bench/soak.py                 # ~100k batches (minutes on 2 busy cores)
    python bench/soak.py --batches 20000 --first 2000   # a shorter run

The loop does what a training loop does with the loader: take every batch, touch its tensors,
call ``state_dict()`` every 1,000 batches. RSS is read from /proc/self/statm (Linux). Prints
readable lines, then ONE JSON object as the last line with ``rss_mb_10k``, ``rss_mb_100k``,
``rss_growth_ratio`` (100k / 10k), throughput and the load average.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import fpipe  # noqa: E402


def rss_mb() -> float:
    """Resident set size of this process, MiB."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def write_dataset(root: Path, *, shards: int = 4, per_shard: int = 250) -> None:
    """Text samples (``.txt`` + ``.npy`` token ids), prepared for fpipe."""
    import numpy as np

    words = ("a", "photo", "of", "the", "small", "red", "blue", "cat", "dog", "bird", "car")
    n = 0
    for s in range(shards):
        with tarfile.open(root / f"shard-{s:03d}.tar", "w") as tar:
            for _ in range(per_shard):
                text = " ".join(words[(n * 7 + j * 3) % len(words)] for j in range(5 + n % 9))
                buf = io.BytesIO()
                np.save(buf, np.arange(n % 50 + 10, dtype=np.int32))
                for ext, data in (("txt", text.encode()), ("npy", buf.getvalue())):
                    info = tarfile.TarInfo(f"{n:06d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                n += 1
    fpipe.prepare_dataset(root, fields={"text": "txt"}, sample_type="TextSample", split="1,0,0")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=100_000)
    ap.add_argument("--first", type=int, default=10_000, help="batch count of the first reading")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_dataset(root)
        ds = fpipe.get_train_dataset(
            root, batch_size=args.batch_size, shuffle_buffer_size=64, max_samples_per_sequence=8
        )
        loader = fpipe.get_loader(ds, num_workers=args.workers)
        print(f"soak: {args.batches} batches of {args.batch_size}, {args.workers} workers")
        t0 = time.perf_counter()
        rss_first = rss_last = None
        samples = 0
        for i, batch in enumerate(loader, start=1):
            samples += len(batch.text)
            if i % 1000 == 0:
                loader.state_dict()
            if i % 10_000 == 0:
                took = time.perf_counter() - t0
                print(f"  {i:>7} batches  rss {rss_mb():8.1f} MiB  {took:7.1f} s")
            if i == args.first:
                gc.collect()
                rss_first = rss_mb()
            if i == args.batches:
                gc.collect()
                rss_last = rss_mb()
                break
        elapsed = time.perf_counter() - t0
    assert rss_first is not None and rss_last is not None
    assert samples == args.batches * args.batch_size
    ratio = rss_last / rss_first
    print(f"rss after {args.first}: {rss_first:.1f} MiB, after {args.batches}: {rss_last:.1f} MiB")
    print(f"growth ratio {ratio:.4f} (target <= 1.05); {args.batches / elapsed:.0f} batches/s")
    print(
        json.dumps(
            {
                "batches": args.batches,
                "first": args.first,
                "workers": args.workers,
                "batch_size": args.batch_size,
                "rss_mb_10k": round(rss_first, 2),
                "rss_mb_100k": round(rss_last, 2),
                "rss_growth_ratio": round(ratio, 4),
                "within_5_percent": ratio <= 1.05,
                "batches_per_s": round(args.batches / elapsed, 1),
                "seconds": round(elapsed, 1),
                "loadavg": [round(x, 2) for x in os.getloadavg()],
            }
        )
    )


if __name__ == "__main__":
    main()
