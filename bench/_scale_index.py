"""``bench/scale.py --only index``: bytes on disk of a prepared tar index per sample.

An image + caption dataset (members ``jpg`` and ``txt``; columns ``bytes``, ``image.bytes``,
``image.width``, ``image.height``, ``caption.bytes``, ``caption.chars``), 10^4 samples per
shard, keys ``%09d`` numbered across the dataset, members laid out as a plain tar lays them
out. What a scan of such shards returns (an ``IndexData``) is built with numpy, with
realistic values (JPEG sizes log-normal around 60 KB, captions of 20..300 bytes, image sides of
64..2,048), and written by the real writer (``write_index``: the compact layout, format 4, and
at the smaller size the flat layout for comparison). Then the index is opened and 1,000
random samples' keys, members and columns are compared with the values it was written from.

Keys (``<n>`` the sample count, ``1e6`` / ``1e7``):

- ``index_bytes_per_sample_<n>``: every file of the index folder / samples;
- ``index_flat_bytes_per_sample_1e6``: the same for the flat layout (formats 2 and 3);
- ``index_bytes_per_shard``: the per-shard files (shard table and ``compact/shard/``) / shards;
- ``index_sample_array_bytes``: the itemsizes of the per-sample arrays, plus the offset bases
  (one per 64 samples): what grows per sample;
- ``index_bytes_per_sample_1e8``: extrapolated (marked ``_extrapolated``) from the measured
  per-sample itemsizes, per-shard bytes and fixed files: a 10^8-sample index held in memory to
  be written takes ~12 GB, more than the machines this runs on spare;
- ``index_write_s_<n>``: ``write_index`` wall time.

Usage: ``python bench/_scale_index.py DIR [--sizes 1e6,1e7]`` (one JSON line).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

PER_SHARD = 10_000


def synthetic_index(n: int, seed: int = 0):
    """The ``IndexData`` a scan of ``n`` image + caption samples returns (module docstring)."""
    from fpipe.storage.read.members import MemberTable
    from fpipe.storage.read.tar.index import IndexData

    rng = np.random.default_rng(seed)
    shards = -(-n // PER_SHARD)
    counts = np.full(shards, PER_SHARD, np.int64)
    counts[-1] = n - PER_SHARD * (shards - 1)
    jpg = np.clip(rng.lognormal(11, 0.6, n), 2_000, 4_000_000).astype(np.int64)
    txt = rng.integers(20, 301, n, dtype=np.int64)
    width = rng.integers(64, 2049, n, dtype=np.int64)
    height = rng.integers(64, 2049, n, dtype=np.int64)
    chars = txt - rng.integers(0, 4, n)  # a few multi-byte characters
    pad = lambda s: (s + 511) // 512 * 512  # noqa: E731
    span = 512 + pad(jpg) + 512 + pad(txt)  # two headers and two padded members
    starts = np.zeros(shards + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    sid = np.repeat(np.arange(shards, dtype=np.int64), counts)
    end = np.cumsum(span)
    first = end - span - (end - span)[starts[:-1]][sid] + 512  # within its shard
    offset = np.stack([first, first + pad(jpg) + 512], axis=1).ravel()
    digits = (np.arange(n, dtype=np.int64)[:, None] // 10 ** np.arange(8, -1, -1)) % 10
    shard_bytes = np.add.reduceat(span, starts[:-1]) + 1024
    return IndexData(
        shards=[
            {"name": f"shard-{s:06d}.tar", "samples": int(c), "bytes": int(b), "mtime_ns": -1}
            for s, (c, b) in enumerate(zip(counts.tolist(), shard_bytes.tolist()))
        ],
        shard_id=sid.astype(np.int32),
        keys=(digits + ord("0")).astype(np.uint8).ravel(),
        key_offsets=np.arange(n + 1, dtype=np.int64) * 9,
        members=MemberTable(
            exts=["jpg", "txt"],
            start=np.arange(n + 1, dtype=np.int64) * 2,
            ext=np.tile(np.array([0, 1], np.int32), n),
            offset=offset,
            size=np.stack([jpg, txt], axis=1).ravel(),
        ),
        columns={
            "bytes": jpg + txt,
            "image.bytes": jpg,
            "image.width": width,
            "image.height": height,
            "caption.bytes": txt,
            "caption.chars": chars,
        },
    )


def _bytes(folder: Path, under: str = "") -> int:
    return sum(p.stat().st_size for p in (folder / under).rglob("*") if p.is_file())


def _check(root: Path, data, count: int = 1000) -> None:
    """Keys, members and columns of ``count`` random samples read back as written."""
    from fpipe.storage.read.layouts import open_dataset

    ds = open_dataset(root, shard_check="off")
    n = len(data.shard_id)
    idx = np.random.default_rng(1).integers(0, n, count)
    rows = ds.reader._samples.rows(idx)  # the accessor every read goes through
    assert rows.ok.all()
    want = np.stack([idx * 2, idx * 2 + 1], axis=1).ravel()
    assert np.array_equal(rows.offset, data.members.offset[want])
    assert np.array_equal(rows.size, data.members.size[want])
    for i in idx[:50].tolist():
        a, b = data.key_offsets[i], data.key_offsets[i + 1]
        assert ds.reader.member_key(i) == data.keys[a:b].tobytes().decode()
        assert int(ds.column("shard_id")[i]) == int(data.shard_id[i])
    for name, col in data.columns.items():
        assert np.array_equal(ds.column(name)[idx], col[idx]), name


def measure(d: Path, n: int, flat: bool) -> dict:
    from fpipe.storage.read.tar import index as index_mod
    from fpipe.storage.read.tar.index import write_index

    # the shard list as arrays (format 3's shards/*.npy), as at 10^8 samples (10^4 shards)
    index_mod.SHARD_ARRAYS_FROM = 1

    tag = f"{n:.0e}".replace("+0", "")
    data = synthetic_index(n)
    out: dict = {}
    for compact in (True, False) if flat else (True,):
        root = d / f"index-{tag}-{'compact' if compact else 'flat'}"
        shutil.rmtree(root, ignore_errors=True)
        (root / ".fpipe").mkdir(parents=True)
        (root / ".fpipe/dataset.yaml").write_text("sample_type: CrudeSample\n")
        t = time.perf_counter()
        write_index(root / ".fpipe", data, {"source": "synthetic"}, compact)
        total = _bytes(root / ".fpipe")
        if compact:
            out[f"index_write_s_{tag}"] = time.perf_counter() - t
            out[f"index_bytes_per_sample_{tag}"] = total / n
            _check(root, data)
            shard = _bytes(root / ".fpipe", "compact/shard") + _bytes(root / ".fpipe", "shards")
            out["index_bytes_per_shard"] = shard / len(data.shards)
            per_sample = [
                np.load(p, mmap_mode="r")
                for p in (root / ".fpipe").rglob("*.npy")
                if np.load(p, mmap_mode="r").shape == (n,)
            ]
            base = np.load(root / ".fpipe/compact/offset_base.npy", mmap_mode="r")
            # one offset base per block of 64 samples: 1/64 of its itemsize per sample
            out["index_sample_array_bytes"] = sum(a.dtype.itemsize for a in per_sample) + (
                base.dtype.itemsize / 64
            )
            out[f"_fixed_{tag}"] = total - shard - n * out["index_sample_array_bytes"]
        else:
            out[f"index_flat_bytes_per_sample_{tag}"] = total / n
        shutil.rmtree(root)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--sizes", default="1e6,1e7")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    final: dict = {}
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    for k, n in enumerate(sizes):
        final.update(measure(d, n, flat=k == 0))
    # 10^8: per-sample itemsizes x n + per-shard bytes x shards + the fixed files (headers,
    # YAML), the last measured at the largest size
    n, fixed = 10**8, max(v for k, v in final.items() if k.startswith("_fixed_"))
    shards = -(-n // PER_SHARD)
    est = final["index_sample_array_bytes"] * n + final["index_bytes_per_shard"] * shards + fixed
    final["index_bytes_per_sample_1e8_extrapolated"] = est / n
    final["index_bytes_per_sample"] = est / n
    final = {k: round(v, 3) if isinstance(v, float) else v for k, v in final.items()}
    print(json.dumps({k: v for k, v in final.items() if not k.startswith("_")}))
    os.sync()


if __name__ == "__main__":
    main()
