"""Prepare a tar whose samples all have distinct extensions: memory, index files, reads.

One shard of N one-member samples, member ``<key>.e<i>`` (10 bytes each). Prints the time of
``prepare_dataset``, the process's peak RSS before and after it (``ru_maxrss``), the number of
files in ``.fpipe/`` and the time per read of up to 500 samples. The last line is one JSON
object with ``prepare_s``, ``rss_mb_before``, ``rss_mb_after``, ``index_files``,
``read_ms_per_sample`` and ``loadavg``.

    python bench/prepare_extensions.py [--n 2000]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fpipe.storage import open_dataset, prepare_dataset  # noqa: E402


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2000)
    args = ap.parse_args(argv)
    n = args.n
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with tarfile.open(root / "s.tar", "w", format=tarfile.GNU_FORMAT) as tf:
            for i in range(n):
                ti = tarfile.TarInfo(f"{i:06d}.e{i}")
                ti.size = 10
                tf.addfile(ti, io.BytesIO(b"x" * 10))
        before = _rss_mb()
        t0 = time.perf_counter()
        report = prepare_dataset(root, workers=1)
        prepare_s = time.perf_counter() - t0
        after = _rss_mb()
        files = sum(len(names) for _, _, names in os.walk(root / ".fpipe"))
        ds = open_dataset(root)
        reads = min(n, 500)
        t0 = time.perf_counter()
        for i in range(reads):
            assert ds.read(i) == {f"e{i}": b"x" * 10}
        read_ms = 1e3 * (time.perf_counter() - t0) / reads
        assert report.num_samples == n
    result = {
        "n": n,
        "prepare_s": round(prepare_s, 3),
        "rss_mb_before": round(before),
        "rss_mb_after": round(after),
        "index_files": files,
        "read_ms_per_sample": round(read_ms, 3),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
