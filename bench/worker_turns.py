"""Benchmark: worker processes taking tasks as they free up, against torch's fixed turns.

fpipe's worker processes take the next recipe as they free up, and the main process puts the
results back in plan order (``fpipe/loader/_task_window.py``). torch's own way gives task ``k``
to worker ``k mod N``, so a worker that runs slower for a while holds the others to its pace.
This runs, interleaved, on ``bench/loader.py``'s 128-512 px image set (batch 32, 224 px,
full-size decode as in its same-decoder rows, its shuffle):

- fpipe with 2 worker processes in fixed turns (``in_turns``),
- fpipe with 2 worker processes as they free up (``as_free``, what the loader does),
- two bare loops with fpipe's decode in two processes (the 2-core ceiling of
  ``bench/loader.py``),

each for ``--seconds`` after a warm-up, ``--repeats`` times, and reports medians. Before
each round it times a fixed Python loop in two processes at once for ``--probe-s`` seconds in
0.1 s pieces and reports how much a piece's time varied (the machine's own unevenness: on a
shared VM a virtual CPU can run 1.5-2 times slower than its sibling for seconds).

Usage::

    python bench/worker_turns.py                # 10 rounds of 4 s, ~4 min
    python bench/worker_turns.py --repeats 5

The last line is one JSON object: each variant's median samples/s, ``as_free_vs_in_turns``
(the median of the rounds' ratios) and each fpipe variant over the two bare loops.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

_PROBE = """
import sys, time
end = time.perf_counter() + float(sys.argv[1])
pieces = []
while time.perf_counter() < end:
    t = time.perf_counter(); s = 0
    for i in range(600_000): s += i * i
    pieces.append(time.perf_counter() - t)
print(" ".join(f"{p:.5f}" for p in pieces))
"""


def probe(seconds: float) -> dict[str, float]:
    """A fixed Python loop in two processes at once: the ratio of a slow piece (90th
    percentile) to a fast one (10th) across both, and of the two processes' mean times."""
    procs = [
        subprocess.Popen([sys.executable, "-c", _PROBE, str(seconds)], stdout=subprocess.PIPE)
        for _ in range(2)
    ]
    runs = [[float(x) for x in p.communicate()[0].split()] for p in procs]
    pieces = sorted(runs[0] + runs[1])
    q = statistics.quantiles(pieces, n=10)
    means = sorted(statistics.fmean(r) for r in runs)
    return {"p90_over_p10": q[-1] / q[0], "slower_process_over_faster": means[1] / means[0]}


def fpipe_rate(root: Path, in_turns: bool, seconds: float) -> float:
    import fpipe
    from fpipe.decode.image import ImageDecodeOptions
    from fpipe.loader import _iteration, _task_window

    # in turns: as on a torch without in_order (the loader's own fallback)
    _iteration.takes_tasks_as_free = (
        (lambda: False) if in_turns else _task_window.takes_tasks_as_free
    )
    ds = fpipe.get_train_dataset(
        root,
        batch_size=32,
        shuffle_buffer_size=1000,
        max_samples_per_sequence=100,
        seed=1,
        image_decode=ImageDecodeOptions(target_size=224, draft=False),
    )
    it = iter(fpipe.get_loader(ds, num_workers=2, prefetch_factor=2))
    try:
        for _ in range(6):
            next(it)
        t0, n = time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds:
            next(it)
            n += 1
        return n * 32 / (time.perf_counter() - t0)
    finally:
        it.close()


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = Path(tempfile.gettempdir()) / "fpipe-bench-loader" / "images"
    ap.add_argument("--data", type=Path, default=default, help="bench/loader.py's image set")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--probe-s", type=float, default=3.0)
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from _common import machine_line, warm_files
    from _loader_data import ensure_image_set
    from _loader_runs import two_bare_loops

    if not args.data.exists():
        ensure_image_set(args.data, samples=3200, shards=8, lo=128, hi=512, pool=400)
    print(f"# worker turns\n{machine_line()}, torch {torch.__version__}", flush=True)
    bare = two_bare_loops(sys.executable, args.data, 2, "fpipe")
    bare_n = max(1, round(args.seconds * 1600 / 2 / 32))  # about --seconds per loop
    rows: dict[str, list[float]] = {"in_turns": [], "as_free": [], "bare_loops": []}
    probes = []
    for r in range(args.repeats):
        probes.append(probe(args.probe_s))
        for name in rows:
            warm_files(args.data)
            if name == "bare_loops":
                rows[name].append(bare(bare_n)[0])
            else:
                rows[name].append(fpipe_rate(args.data, name == "in_turns", args.seconds))
        print(
            f"[{r + 1}/{args.repeats}] "
            + "  ".join(f"{k} {v[-1]:7.1f}" for k, v in rows.items())
            + f"  probe p90/p10 {probes[-1]['p90_over_p10']:.2f}",
            flush=True,
        )
    med = {k: statistics.median(v) for k, v in rows.items()}
    ratios = [a / b for a, b in zip(rows["as_free"], rows["in_turns"])]
    out = {
        **{f"{k}_samples_per_s": round(v, 1) for k, v in med.items()},
        "as_free_vs_in_turns": round(statistics.median(ratios), 3),
        "as_free_faster_rounds": sum(x > 1 for x in ratios),
        "as_free_vs_2x_bare_loop": round(med["as_free"] / med["bare_loops"], 3),
        "in_turns_vs_2x_bare_loop": round(med["in_turns"] / med["bare_loops"], 3),
        "probe_p90_over_p10": round(statistics.median(p["p90_over_p10"] for p in probes), 2),
        "probe_slower_process": round(
            statistics.median(p["slower_process_over_faster"] for p in probes), 2
        ),
        "rounds": args.repeats,
    }
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
