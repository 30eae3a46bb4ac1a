"""Prepare throughput of several checkouts of fpipe, alternating, on the same data.

Builds the synthetic image-caption dataset of ``bench/prepare.py`` once (12,000 samples in 4
shards by default), then for each round runs, for each checkout in turn, a fresh Python with
``PYTHONPATH`` set to that checkout: one warm-up ``prepare_dataset`` then the best of 3, in
samples per CPU-second (``time.process_time``) and per wall second. Alternating makes the
checkouts share the machine's load. Checkouts are folders (e.g. ``git worktree add``). The last
line is one JSON object: per checkout the median CPU and wall figures, their runs, and the
load averages seen.

    python bench/prepare_compare.py OLD,NEW [--rounds 3] [--samples 12000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from prepare import build, warm  # noqa: E402

_CHILD = r"""
import json, sys, time
from pathlib import Path
from fpipe.storage import prepare_dataset
root, n = Path(sys.argv[1]), int(sys.argv[2])
kw = dict(fields={"image": "jpg", "caption": "txt"}, columns=["aesthetic=json[aesthetic]"],
          workers=1)
prepare_dataset(root, **kw)
cpu, wall = 0.0, 0.0
for _ in range(3):
    t0, w0 = time.process_time(), time.perf_counter()
    assert prepare_dataset(root, **kw).num_samples == n
    cpu = max(cpu, n / (time.process_time() - t0))
    wall = max(wall, n / (time.perf_counter() - w0))
print(json.dumps([cpu, wall]))
"""


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkouts", help="comma-separated folders holding an fpipe checkout")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples", type=int, default=12_000)
    args = ap.parse_args(argv)
    trees = [str(Path(t).resolve()) for t in args.checkouts.split(",")]
    runs: dict[str, list[list[float]]] = {t: [] for t in trees}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build(root, args.samples, 4)
        warm(root)
        for _ in range(args.rounds):
            for t in trees:
                out = subprocess.run(
                    [sys.executable, "-c", _CHILD, str(root), str(args.samples)],
                    env={**os.environ, "PYTHONPATH": t},
                    cwd=t,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                runs[t].append(json.loads(out.stdout.strip().splitlines()[-1]))
            loads.append(os.getloadavg()[0])
    result = {}
    for t in trees:
        cpu = [r[0] for r in runs[t]]
        wall = [r[1] for r in runs[t]]
        result[t] = {
            "cpu_samples_per_s": round(_median(cpu)),
            "wall_samples_per_s": round(_median(wall)),
            "cpu_runs": [round(x) for x in cpu],
        }
        print(f"{t}: {result[t]['cpu_samples_per_s']:,} samples per CPU-s {result[t]['cpu_runs']}")
    print(json.dumps({"checkouts": result, "loadavg": [round(x, 2) for x in loads]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
