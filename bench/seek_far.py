"""Seek far into a blend of 10,000 datasets: ``seek_state`` time for both blend draws.

The plan is the ``10k`` scenario of ``bench/scale.py``: 10,000 one-shard datasets of 10^3..10^7
samples (log-uniform, synthetic indexes holding no payload, each folder linking to one of 100
templates), blended by size in 100 nested metadatasets, rank 17 of 4,096, 32 refs per rank
(global batch 131,072), window shuffle of 1,000, global distribution. Each seek runs in a fresh
subprocess (a resumed loader's seek starts from a fresh plan) under ``--timeout``: a seek that
runs longer is reported as ``null`` with ``timed_out``.

Keys: ``seek_<draw>_<step>_s`` (wall time of ``seek_state(plan, step, (), ())``) and
``digest_<draw>_<step>``: a hash of the loader state bytes, batches, samples and epoch the seek
gives (two builds of fpipe that give the same digest seek to the same state).

Usage: ``python bench/seek_far.py [--dir /tmp/fpipe-seek-far] [--quota 1e4,1e5,1e6]
[--hash 1e2,1e3,1e4] [--timeout 600]``. The last line is one JSON object. Timings are
wall-clock on whatever machine runs it (shared machines vary).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path


def one(path: str, draw: str, step: int) -> dict:
    """Seek one fresh plan to ``step`` (in this process)."""
    from scale import _plan

    from fpipe.loader.state import LoaderState, encode_loader_state
    from fpipe.loader.steering import seek_state

    kw = {} if draw == "hash" else {"blend_draw": "quota"}
    plan = _plan(path, 4096, 17, **kw)
    t = time.perf_counter()
    state, batches, refs, epoch = seek_state(plan, step, (), ())
    took = time.perf_counter() - t
    data = encode_loader_state(plan, LoaderState(state, batches, refs, 0, epoch))
    digest = hashlib.sha256(data + repr((batches, refs, epoch)).encode()).hexdigest()[:16]
    return {"s": took, "digest": digest, "epoch": epoch, "batches": batches}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/fpipe-seek-far")
    ap.add_argument("--quota", default="1e4,1e5,1e6")
    ap.add_argument("--hash", default="1e2,1e3,1e4")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--one", nargs=3, metavar=("PATH", "DRAW", "STEP"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], args.one[1], int(args.one[2]))))
        return
    from scale import build_sources

    path = build_sources(Path(args.dir) / "10k-shared", 10_000, flat=False)
    out: dict = {}
    for draw, steps in (("quota", args.quota), ("hash", args.hash)):
        for step in [int(float(s)) for s in steps.split(",") if s]:
            label = f"{draw}_{step:.0e}".replace("+0", "").replace("+", "")
            cmd = [sys.executable, __file__, "--one", str(path), draw, str(step)]
            try:
                run = subprocess.run(
                    cmd, capture_output=True, text=True, timeout=args.timeout, check=True
                )
            except subprocess.TimeoutExpired:
                out[f"seek_{label}_s"] = None
                out[f"seek_{label}_timed_out"] = args.timeout
                print(f"{label}: timed out after {args.timeout} s", file=sys.stderr)
                continue
            got = json.loads(run.stdout.strip().splitlines()[-1])
            out[f"seek_{label}_s"] = round(got["s"], 3)
            out[f"digest_{label}"] = got["digest"]
            print(f"{label}: {got}", file=sys.stderr)
    print(json.dumps(out))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
