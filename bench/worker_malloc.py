"""Benchmark: the C allocator of fpipe's worker processes, as fpipe sets it and as glibc leaves it.

fpipe's worker processes set glibc's malloc thresholds when they start
(``fpipe/loader/_worker_memory.py``; ``FPIPE_WORKER_MALLOC=default`` leaves them as they are).
This runs the same loader both ways on ``bench/loader.py``'s 128-512 px image set (batch 32,
224 px, shuffle as there), each run in a fresh process that has done nothing else (a training
process starting its loader), ``--workers`` worker processes, full-size decode
(``draft=False``, what ``bench/loader.py``'s same-decoder rows compare) and the draft decode.
Per run: samples/s, and per sample the CPU time, the system time and the minor page faults of
the worker processes, over ``--batches`` batches after a warm-up. Runs are interleaved; medians
of ``--repeats``.

Usage::

    python bench/worker_malloc.py                  # 1 and 2 workers, 5 repeats, ~3 min
    python bench/worker_malloc.py --workers 2 --repeats 3
    python bench/worker_malloc.py --parent-decodes   # the process decoded images first

The last line is one JSON object: ``{workers}w_{decode}_speedup`` (samples/s with fpipe's
setting over glibc's own) and each variant's medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _faults(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])  # minflt


def one(root: Path, workers: int, draft: bool, batches: int, parent_decodes: bool) -> dict:
    """One run in this (fresh) process: the workers' figures over ``batches`` batches."""
    import psutil
    import torch

    torch.set_num_threads(1)
    import loader as bench_loader
    from _peers import drain_buffered

    from fpipe.decode import ImageDecodeOptions

    opts = ImageDecodeOptions(target_size=224, draft=draft)
    if parent_decodes:  # as bench/loader.py's process does before its worker rows
        for it in (
            bench_loader.bare_loop(root, 32),
            bench_loader.fpipe_iter(root, 32, 0, opts, "process"),
        ):
            for _ in range(20):
                next(it)
            bench_loader.close_iter(it)
    it = bench_loader.fpipe_iter(root, 32, workers, opts, "process")
    for _ in range(6):
        next(it)
    drain_buffered(it)
    kids = psutil.Process().children(recursive=True)

    def totals():
        cpu = sys_t = faults = 0.0
        for c in kids:
            t = c.cpu_times()
            cpu, sys_t, faults = cpu + t.user + t.system, sys_t + t.system, faults + _faults(c.pid)
        return cpu, sys_t, faults

    c0, s0, f0 = totals()
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)
    wall = time.perf_counter() - t0
    c1, s1, f1 = totals()
    bench_loader.close_iter(it)
    n = batches * 32
    return {
        "rate": n / wall,
        "cpu_us": 1e6 * (c1 - c0) / n,
        "sys_us": 1e6 * (s1 - s0) / n,
        "faults": (f1 - f0) / n,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "fpipe-bench-loader"))
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--parent-decodes",
        action="store_true",
        help="each run's process decodes 40 batches itself before its loader starts (as "
        "bench/loader.py's does before its worker rows: glibc has raised its thresholds there)",
    )
    ap.add_argument(
        "--one", nargs=3, metavar=("WORKERS", "DRAFT", "SETTING"), help=argparse.SUPPRESS
    )
    a = ap.parse_args(argv)
    root = Path(a.data) / "images"
    if a.one:
        workers, draft, _ = a.one
        got = one(root, int(workers), draft == "draft", a.batches, a.parent_decodes)
        print(json.dumps(got), flush=True)
        return {}
    from _common import machine_line
    from _loader_data import ensure_image_set

    ensure_image_set(root, samples=3200, shards=8, lo=128, hi=512, pool=400)
    print(
        f"# worker processes' allocator\n{machine_line()}; {a.batches} batches of 32 per run; "
        f"the process decodes first: {a.parent_decodes}"
    )
    variants = [
        (int(w), d, s)
        for w in a.workers.split(",")
        for d in ("full", "draft")
        for s in ("fpipe", "default")
    ]
    runs: dict[tuple, list[dict]] = {v: [] for v in variants}
    for r in range(a.repeats):
        for w, d, s in variants:
            env = dict(os.environ)
            env.pop("FPIPE_WORKER_MALLOC", None)
            if s == "default":
                env["FPIPE_WORKER_MALLOC"] = "default"
            cmd = [sys.executable, __file__, "--data", a.data, "--batches", str(a.batches)]
            cmd += ["--parent-decodes"] if a.parent_decodes else []
            p = subprocess.run(
                [*cmd, "--one", str(w), d, s], env=env, capture_output=True, text=True, timeout=600
            )
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
            if p.returncode or not lines:
                raise SystemExit(f"run failed: {p.stderr[-500:]}")
            got = json.loads(lines[-1])
            runs[(w, d, s)].append(got)
            print(
                f"  [{r + 1}/{a.repeats}] {w} workers, {d:5} decode, {s:7} malloc: "
                f"{got['rate']:7.1f} samples/s, per sample {got['cpu_us']:6.1f} us CPU, "
                f"{got['sys_us']:5.1f} us system, {got['faults']:5.1f} page faults",
                flush=True,
            )
    out: dict = {}
    for (w, d, s), rs in runs.items():
        med = {k: round(statistics.median(x[k] for x in rs), 2) for k in rs[0]}
        out[f"{w}w_{d}_{s}"] = med
    for w in sorted({v[0] for v in variants}):
        for d in ("full", "draft"):
            out[f"{w}w_{d}_speedup"] = round(
                out[f"{w}w_{d}_fpipe"]["rate"] / out[f"{w}w_{d}_default"]["rate"], 3
            )
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
