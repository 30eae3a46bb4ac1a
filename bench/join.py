"""Benchmark joins (``join:``): the per-worker key lookup and the cost of a joined sample.

Two prepared text datasets of ``--samples`` samples (default 100,000, written once under
``--cache``): ``primary`` (``.txt``, 100 shards) and ``secondary`` (``.json``, the same keys
reversed in 37 shards). Measured, medians of ``--repeats`` runs, in CPU seconds of the process
(``time.process_time``; the load average is printed next to them):

- ``lookup_build_s``: what a worker does once per joined dataset: the member keys of its split
  from the index (vectorized) and the sorted :class:`~fpipe.storage.read.keys.KeyLookup`;
  baseline in the same run: ``dict_build_s``, a Python dict key -> index built from
  ``member_key(ds, i)`` one sample at a time (what a lazily built dict costs);
- ``energon_lookup_build_s``: the same lookup over the same shards as an Energon folder that
  ``fpipe prepare`` did not index (one 512-byte header read per sample);
- ``find_us_per_key``: one lookup of a batch of 32 primary keys, per key;
- ``joined_samples_per_s`` vs ``plain_samples_per_s``: samples materialized per CPU second by
  a loader (``num_workers=0``, batch 32, default encoder) over the join and over the primary
  alone (the same recipes): the cost of the second read, cook and merge.

Usage: ``python bench/join.py [--samples 100000] [--repeats 3]``. The last line is one JSON
object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
from _common import machine_line

from fpipe.storage import open_dataset, prepare_dataset
from fpipe.storage.read.keys import KeyLookup, member_key, member_keys


def _write(root: Path, keys: list[int], shards: int, ext: str) -> None:
    import io
    import tarfile

    root.mkdir(parents=True, exist_ok=True)
    per = -(-len(keys) // shards)
    for s in range(shards):
        with tarfile.open(root / f"part-{s:04d}.tar", "w") as tf:
            for k in keys[s * per : (s + 1) * per]:
                data = (f'{{"n": {k}}}' if ext == "json" else f"text {k}").encode()
                ti = tarfile.TarInfo(f"{k:09d}.{ext}")
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))


def _datasets(cache: Path, n: int) -> tuple[Path, Path]:
    prim, sec = cache / f"primary-{n}", cache / f"secondary-{n}"
    if not (prim / ".fpipe").exists():
        _write(prim, list(range(n)), 100, "txt")
        prepare_dataset(prim, fields={"text": "txt"}, sample_type="TextSample", workers=1)
    if not (sec / ".fpipe").exists():
        _write(sec, list(range(n))[::-1], 37, "json")
        prepare_dataset(sec, fields={"text": "json"}, sample_type="TextSample", workers=1)
    return prim, sec


def _energon(cache: Path, n: int) -> Path:
    """The secondary's shards as an Energon folder (``.tar.idx`` + ``.nv-meta``, no fpipe index)."""
    import yaml

    from tests.storage.helpers import write_tar_idx

    en = cache / f"energon-{n}"
    if not (en / ".nv-meta").exists():
        _write(en, list(range(n))[::-1], 37, "json")
        counts = {}
        for shard in sorted(en.glob("*.tar")):
            write_tar_idx(shard)
            counts[shard.name] = len((shard.parent / f"{shard.name}.idx").read_bytes()) // 8 - 1
        (en / ".nv-meta").mkdir()
        (en / ".nv-meta" / ".info.yaml").write_text(yaml.safe_dump({"shard_counts": counts}))
    return en


def _cpu(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times)


def _rate(path: str, batches: int, repeats: int) -> float:
    import fpipe

    def run():
        ds = fpipe.get_train_dataset(path, batch_size=32, seed=1, max_samples_per_sequence=64)
        it = iter(fpipe.get_loader(ds, num_workers=0))
        next(it)  # opens the datasets and builds the lookups (measured above)
        t0 = time.process_time()
        for _ in range(batches):
            next(it)
        return 32 * batches / (time.process_time() - t0)

    return statistics.median(run() for _ in range(repeats))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--cache", default="/tmp/fpipe-bench-join")
    args = ap.parse_args()
    print(machine_line())
    load0 = os.getloadavg()[0]
    prim, sec = _datasets(Path(args.cache), args.samples)
    pds, sds = open_dataset(prim), open_dataset(sec)
    idx = np.asarray(sds.split_indices("train"), np.int64)

    def build():
        return KeyLookup(member_keys(sds, idx), idx, str(sec))

    def build_dict():
        return {member_key(sds, i): i for i in idx.tolist()}

    lk = build()
    build_s = _cpu(build, args.repeats)
    eds = open_dataset(_energon(Path(args.cache), args.samples))
    eidx = np.arange(len(eds), dtype=np.int64)
    energon_s = _cpu(lambda: KeyLookup(member_keys(eds, eidx), eidx, "energon"), 1)
    dict_s = _cpu(build_dict, args.repeats)
    batch = np.arange(0, args.samples, max(1, args.samples // 32))[:32]
    assert (lk.find(member_keys(pds, batch)) == args.samples - 1 - batch).all()
    reps = 2000
    find_s = _cpu(lambda: [lk.find(member_keys(pds, batch)) for _ in range(reps)], args.repeats)
    mds = Path(args.cache) / f"join-{args.samples}.yaml"
    mds.write_text(
        f"splits:\n  train:\n    join:\n      - {{path: {prim}}}\n      - {{path: {sec}}}\n"
    )
    joined = _rate(str(mds), args.batches, args.repeats)
    plain = _rate(str(prim), args.batches, args.repeats)
    out = {
        "samples": args.samples,
        "lookup_build_s": round(build_s, 4),
        "dict_build_s": round(dict_s, 4),
        "lookup_vs_dict": round(dict_s / build_s, 1),
        "energon_lookup_build_s": round(energon_s, 3),
        "lookup_mb": round((lk.keys.nbytes + lk.indices.nbytes) / 1e6, 2),
        "find_us_per_key": round(find_s / reps / len(batch) * 1e6, 3),
        "joined_samples_per_s": round(joined),
        "plain_samples_per_s": round(plain),
        "joined_vs_plain": round(joined / plain, 2),
        "load": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
