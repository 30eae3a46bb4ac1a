"""Benchmark blending in the plan tier: refs/s and snapshot size for 3 and 100 datasets.

The pipeline is ``chain(blend(slice_shuffle(samples(n_d)) per dataset, weights),
window_shuffle(W), distribute(B*world, rank 0), batch(B))``, pulled one recipe per ``next()``.
The baseline, measured in the same run, is the same chain over ONE dataset of the same total
size (``repeat(slice_shuffle(samples(N)))``): the same shuffle, distribution and batching, no
blend. Rates are refs planned per CPU second of the process (``time.process_time``, what one
core does on a shared machine), the median of ``--repeats`` runs; the wall-clock rate and the
load average are printed next to them.

Snapshot sizes are taken at steps 10, 1,000 and 10,000 (they must be equal: the state does not
grow with the step) for both blends; targets: 3 datasets <= 1 KB, 100 datasets <= 4 KB.

Usage: ``python bench/blend.py [--repeats 5] [--seconds 1.0]``. Targets: blend3 >= 1,000,000
refs/s, blend100 >= 500,000 refs/s. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from _common import machine_line

from fpipe.core import Pipeline, chain
from fpipe.plan import batch, blend, distribute, repeat, samples, slice_shuffle, window_shuffle


def blend_pipeline(sizes, args) -> Pipeline:
    views = [slice_shuffle(samples(n, dataset=d), args.slice_size) for d, n in enumerate(sizes)]
    weights = [1 + (d % 7) for d in range(len(sizes))]
    names = [f"ds{d:03d}" for d in range(len(sizes))]
    head = blend(views, weights=weights, names=names)
    return Pipeline(chain(head, *tail(args)), seed=args.seed)


def single_pipeline(n, args) -> Pipeline:
    head = repeat(slice_shuffle(samples(n), args.slice_size))
    return Pipeline(chain(head, *tail(args)), seed=args.seed)


def tail(args):
    return (
        window_shuffle(args.window),
        distribute(args.batch * args.world, rank=0, world_size=args.world),
        batch(args.batch),
    )


def rate(p: Pipeline, args) -> tuple[float, float]:
    """(median refs/s per CPU second, median per wall second), counting the global batch."""
    per_step = args.batch * args.world
    state = p.init()
    nxt = p.next
    for _ in range(200):  # warm-up
        state, _ = nxt(state, 1)
    cpu_rates, wall_rates = [], []
    for _ in range(args.repeats):
        steps, t0, c0 = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - t0 < args.seconds:
            for _ in range(16):
                state, _ = nxt(state, 1)
            steps += 16
        cpu_rates.append(steps * per_step / max(time.process_time() - c0, 1e-9))
        wall_rates.append(steps * per_step / (time.perf_counter() - t0))
    return statistics.median(cpu_rates), statistics.median(wall_rates)


def snapshot_sizes(p: Pipeline, steps=(10, 1_000, 10_000)) -> list[int]:
    state, done, out = p.init(), 0, []
    for s in steps:
        for _ in range(s - done):
            state, _ = p.next(state, 1)
        done = s
        out.append(len(p.snapshot(state)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--total", type=int, default=3_000_000, help="samples over all datasets")
    ap.add_argument("--slice-size", type=int, default=100)
    ap.add_argument("--window", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    print(machine_line())
    print(json.dumps(vars(args)))
    sizes3 = [args.total // 2, args.total // 3, args.total - args.total // 2 - args.total // 3]
    sizes100 = [args.total // 100 + 37 * d for d in range(100)]
    results = {}
    for label, p in (
        ("single", single_pipeline(args.total, args)),
        ("blend3", blend_pipeline(sizes3, args)),
        ("blend100", blend_pipeline(sizes100, args)),
    ):
        cpu, wall = rate(p, args)
        results[label] = cpu
        load = os.getloadavg()[0]
        print(
            f"{label:9s} {cpu:12,.0f} refs/s per CPU s  {wall:12,.0f} per wall s  load {load:.2f}"
        )
    snaps = {}
    for label, sizes in (("blend3", sizes3), ("blend100", sizes100)):
        snaps[label] = snapshot_sizes(blend_pipeline(sizes, args))
        print(f"{label:9s} snapshot bytes at steps 10 / 1,000 / 10,000: {snaps[label]}")
    print(
        json.dumps(
            {
                "blend3_refs_per_s": round(results["blend3"]),
                "blend100_refs_per_s": round(results["blend100"]),
                "single_refs_per_s": round(results["single"]),
                "blend3_vs_single": round(results["blend3"] / results["single"], 3),
                "blend100_vs_single": round(results["blend100"] / results["single"], 3),
                "blend3_snapshot_bytes": max(snaps["blend3"]),
                "blend100_snapshot_bytes": max(snaps["blend100"]),
                "snapshot_constant": all(len(set(v)) == 1 for v in snaps.values()),
                "loadavg_1m": round(os.getloadavg()[0], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
