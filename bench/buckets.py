"""Benchmark bucketed batching (OpenSora's bucket_config) in the plan tier.

One run, on one core (the plan tier is single-threaded), over ``--num-samples`` synthetic
samples whose width, height and frame count are drawn from a mix of video and image shapes
(seeded, printed), with the OpenSora example config of ``docs/buckets.md``:

1. Every rank of ``--world-size`` (8) builds its plan and pulls ``--steps`` (10,000) recipes one
   at a time. ``steps_with_rank_disagreement`` counts the steps where two ranks differ in the
   bucket or in their batch shape ``[B, 3, T, H, W]`` (must be 0); the same after an elastic
   restore of the state at step ``--steps // 2`` on ``--elastic-world-size`` ranks.
2. ``bucket_refs_per_s``: refs *planned* per CPU second by one rank's plan over the
   ``--steps`` steps (the global batch of each step: every rank plans the whole step and keeps
   its slice), median of ``--repeats`` runs of rank 0 in a fresh pipeline, bucket assignment of
   every epoch it enters included. ``delivered_refs_per_s`` counts only rank 0's slice.
   ``assign_refs_per_s`` is the vectorized assignment alone; ``baseline_assign_refs_per_s`` is
   the same assignment done per sample in a Python loop with Python's ``random`` (OpenSora's
   ``Bucket.get_bucket_id`` way), on ``--baseline-samples`` samples: the ratio is printed.
3. ``padding_fraction``: padded cells / batch cells over every rank's batches, where each
   sample is resized and cropped to its bucket's ``T x H x W``: 0 by construction, computed to
   show it. ``padding_fraction_without_buckets`` is what padding the same batches' samples at
   their native ``T x H x W`` to the largest in the batch would waste.

Usage: ``python bench/buckets.py [--steps 10000] [--world-size 8] [--repeats 3]``.
Targets: ``bucket_refs_per_s`` >= 500,000; ``steps_with_rank_disagreement`` == 0. The last line
of output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import time

import numpy as np
from _common import machine_line

from fpipe.core import Pipeline
from fpipe.core.testing import run
from fpipe.plan import assign_buckets, bucket_batches, parse_bucket_config, samples, slice_shuffle
from tests.helpers import OPENSORA_BUCKET_CONFIG

# The OpenSora example of docs/buckets.md (seed document, verbatim).
BUCKET_CONFIG = OPENSORA_BUCKET_CONFIG


def metadata(n: int, seed: int) -> dict[str, np.ndarray]:
    """A mix of 16:9, 9:16 and square-ish videos (30% images) at 240p..1080p, 1..300 frames."""
    rng = np.random.default_rng(seed)
    short = rng.choice([240, 360, 480, 720, 1080], n, p=[0.2, 0.25, 0.25, 0.2, 0.1])
    kind = rng.choice(3, n, p=[0.6, 0.15, 0.25])  # landscape, portrait, square-ish
    ratio = np.where(kind == 2, rng.uniform(0.9, 1.1, n), 16 / 9)
    long_ = (short * ratio).round().astype(np.int64)
    width = np.where(kind == 1, short, long_)
    height = np.where(kind == 1, long_, short)
    frames = np.exp(rng.normal(math.log(80), 0.8, n)).clip(2, 300).astype(np.int64)
    frames[rng.random(n) < 0.3] = 1
    return {"width": width, "height": height, "num_frames": frames}


def build(cols, rank: int, world: int, seed: int) -> Pipeline:
    n = len(cols["width"])
    view = slice_shuffle(samples(n, columns=cols), 100)
    return Pipeline(bucket_batches(view, BUCKET_CONFIG, rank=rank, world_size=world), seed=seed)


def python_assign(table, width, height, frames, seed: int) -> list[int]:
    """The same rule per sample in plain Python (OpenSora's get_bucket_id style)."""
    rnd = random.Random(seed)
    ratios = sorted({b.width / b.height for b in table.buckets})
    out = []
    for w, h, t in zip(width.tolist(), height.tolist(), frames.tolist()):
        r = min(ratios, key=lambda x: abs(math.log(x) - math.log(w / h)))
        cands = [b for b in table.buckets if abs(b.width / b.height - r) < 1e-9]
        chosen = -1
        for hw in sorted({(b.height, b.width) for b in cands}, key=lambda s: -s[0] * s[1]):
            if hw[0] * hw[1] > w * h:
                continue
            fit = [
                b
                for b in cands
                if (b.height, b.width) == hw and (b.frames == 1 if t <= 1 else 1 < b.frames <= t)
            ]
            if fit:
                b = max(fit, key=lambda b: b.frames)
                if rnd.random() < b.probability:
                    chosen = table.buckets.index(b)
                    break
        out.append(chosen)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-samples", type=int, default=400_000)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--world-size", type=int, default=8)
    ap.add_argument("--elastic-world-size", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline-samples", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    print(machine_line())
    print(f"load average before: {os.getloadavg()}")
    cols = metadata(args.num_samples, args.seed)
    table = parse_bucket_config(BUCKET_CONFIG)
    shapes = [b.shape for b in table.buckets]
    W, steps = args.world_size, args.steps

    # 1. every rank, agreement, padding
    outs = [run(build(cols, r, W, args.seed), limit=steps)[1] for r in range(W)]
    disagree = sum(
        len({(x.bucket, len(x)) for x in step}) > 1 or len({x.step for x in step}) > 1
        for step in zip(*outs)
    ) + abs(max(map(len, outs)) - min(map(len, outs)))
    cells = padded_native = native = 0
    for step in zip(*outs):
        t, h, w = shapes[step[0].bucket]
        b = sum(len(x) for x in step)
        cells += b * t * h * w  # every sample is resized/cropped to the bucket: no padding
        nat = np.concatenate(
            [
                x.refs.column("num_frames").clip(1) * x.refs.column("width")
                * x.refs.column("height")
                for x in step
            ]
        )  # fmt: skip
        native += int(nat.sum())
        padded_native += int(nat.max()) * b
    padding_fraction = 1 - cells / cells if cells else 0.0
    padding_native = 1 - native / padded_native
    hist = np.bincount([x.bucket for x in outs[0]], minlength=len(table))
    print(f"{W} ranks x {steps} steps: {sum(len(x) for o in outs for x in o)} refs")
    for i, b in enumerate(table.buckets):
        print(f"  {b.label:<18} {str(b.shape):<16} bs {b.batch_size:>3}: {hist[i]:>5} steps")

    # elastic restore at the midpoint on another world size
    mid = steps // 2
    p = build(cols, 0, W, args.seed)
    state, _ = run(p, limit=mid)
    data = p.snapshot(state)
    W2 = args.elastic_world_size
    tails = []
    for r in range(W2):
        q = build(cols, r, W2, args.seed)
        tails.append(run(q, q.restore(data), limit=steps - mid)[1])
    elastic_disagree = sum(len({(x.bucket, len(x)) for x in step}) > 1 for step in zip(*tails))

    # 2. throughput of rank 0's plan (fresh pipeline each repeat: nothing memoized)
    planned, delivered, cpu, wall = [], [], [], []
    for _ in range(args.repeats):
        p = build(cols, 0, W, args.seed)
        c0, w0 = time.process_time(), time.perf_counter()
        _, out = run(p, limit=steps)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
        planned.append(sum(table.buckets[x.bucket].batch_size * W for x in out))
        delivered.append(sum(len(x) for x in out))
    cpu_s = statistics.median(cpu)
    refs_per_s = statistics.median(planned) / cpu_s
    delivered_per_s = statistics.median(delivered) / cpu_s

    idx = np.arange(args.num_samples)
    c0 = time.process_time()
    for _ in range(args.repeats):
        assign_buckets(table, 1, width=cols["width"], height=cols["height"],
                       frames=cols["num_frames"], index=idx)  # fmt: skip
    assign_per_s = args.num_samples * args.repeats / (time.process_time() - c0)
    nb = args.baseline_samples
    c0 = time.process_time()
    python_assign(table, cols["width"][:nb], cols["height"][:nb], cols["num_frames"][:nb], 1)
    baseline_per_s = nb / (time.process_time() - c0)

    load = os.getloadavg()
    print(
        f"plan, rank 0 of {W}: {refs_per_s:,.0f} refs planned/s, {delivered_per_s:,.0f} "
        f"delivered/s (CPU; median of {args.repeats}; wall {statistics.median(wall):.2f} s)"
    )
    print(
        f"assignment: {assign_per_s:,.0f} refs/s vectorized vs {baseline_per_s:,.0f} per-sample "
        f"Python ({assign_per_s / baseline_per_s:.0f}x)"
    )
    print(
        f"padding: {padding_fraction:.4f} in buckets vs {padding_native:.4f} padding the same "
        f"batches at native shapes; rank disagreements: {disagree} ({W} ranks), "
        f"{elastic_disagree} after restore on {W2}"
    )
    print(f"load average after: {load}")
    print(
        json.dumps(
            {
                "bucket_refs_per_s": round(refs_per_s),
                "delivered_refs_per_s": round(delivered_per_s),
                "assign_refs_per_s": round(assign_per_s),
                "baseline_assign_refs_per_s": round(baseline_per_s),
                "padding_fraction": padding_fraction,
                "padding_fraction_without_buckets": round(padding_native, 4),
                "steps_with_rank_disagreement": int(disagree),
                "elastic_steps_with_rank_disagreement": int(elastic_disagree),
                "steps": steps,
                "world_size": W,
                "num_samples": args.num_samples,
                "loadavg": [round(x, 2) for x in load],
            }
        )
    )


if __name__ == "__main__":
    main()
