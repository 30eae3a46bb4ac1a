"""Benchmark: the cost of the stale-shard check on reads of fpipe's tar layout.

Every read checks one tar header of the sample against the index (see docs/failures.md,
"Stale data"). This measures CPU time per sample of ``Dataset.read`` and of
``Dataset.read_many`` (256 samples a call, as the loader reads) on small local samples (the
worst case: the check is a fixed cost, the payload is tiny), with the check, and with the check
replaced by a no-op in the same run, interleaved; for samples of one member (the read starts
512 bytes early for its header) and of two members (the second member's header, read anyway).

Usage: ``python bench/read_check.py [--samples 8000] [--repeats 5]``.
The last line of output is one JSON object (``*_us``, ``*_us_no_check``,
``*_check_overhead_ratio`` per kind of sample and read).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from fpipe.storage import open_dataset, prepare_dataset
from fpipe.storage.read.tar import batch as tar_batch
from fpipe.storage.read.tar import reader as tar_reader


def _dataset(root: Path, n: int, members: dict[str, bytes]) -> None:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for i in range(n):
            for ext, data in members.items():
                ti = tarfile.TarInfo(f"{i:07d}.{ext}")
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
    root.mkdir(parents=True)
    (root / "s.tar").write_bytes(buf.getvalue())
    prepare_dataset(root, progress=False)


def _per_read_us(ds, n: int, many: bool) -> float:
    t = time.process_time()
    if many:
        for c in range(0, n, 256):
            ds.read_many(range(c, min(n, c + 256)))
    else:
        for i in range(n):
            ds.read(i)
    return (time.process_time() - t) / n * 1e6


def _no_check(header: bytes, expected: bytes) -> None:
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=8000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    checked = tar_reader.header_mismatch
    out: dict = {"samples": args.samples, "repeats": args.repeats}
    with tempfile.TemporaryDirectory() as tmp:
        kinds = {
            "one_member": {"txt": b"a caption " * 3},
            "two_members": {"txt": b"a " * 15, "cls": b"7"},
        }
        for kind, members in kinds.items():
            root = Path(tmp) / kind
            _dataset(root, args.samples, members)
            ds = open_dataset(root)
            for many in (False, True):
                name = f"{kind}_{'read_many' if many else 'read'}"
                _per_read_us(ds, args.samples, many)  # warm-up: page cache, mapped arrays
                on, off = [], []
                for _ in range(args.repeats):
                    on.append(_per_read_us(ds, args.samples, many))
                    tar_reader.header_mismatch = tar_batch.header_mismatch = _no_check
                    try:
                        off.append(_per_read_us(ds, args.samples, many))
                    finally:
                        tar_reader.header_mismatch = tar_batch.header_mismatch = checked
                out[f"{name}_us"] = round(statistics.median(on), 2)
                out[f"{name}_us_no_check"] = round(statistics.median(off), 2)
                out[f"{name}_check_overhead_ratio"] = round(
                    statistics.median(on) / statistics.median(off), 3
                )
    out["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
