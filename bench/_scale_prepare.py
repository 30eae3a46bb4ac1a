"""``bench/scale.py --only prepare``: ``fpipe prepare`` of a folder of many tiny shards.

Writes ``--prepare-shards`` (default 10^5) tar shards of 2 samples x 2 members of a few bytes
(``txt`` and ``cls``), then, each run in a fresh subprocess (its own peak RSS):

1. ``prepare_dataset(DIR, fields=["text=txt"])`` on one process: ``prepare_shards_per_s``,
   ``prepare_rss_mb``; its index files are the reference.
2. The same prepare killed (SIGKILL) halfway through its time, then run again:
   ``prepare_killed_recorded_shards`` (shards the journal held at the kill),
   ``prepare_resume_s`` (the second run), ``prepare_resume_identical`` (its index equals 1's).
3. ``prepare_on_ray`` on a local Ray cluster of 2 nodes of 1 CPU each
   (``ray.cluster_utils.Cluster``, as the Ray tests use; both on this machine):
   ``prepare_ray_shards_per_s`` (parts + merge, the cluster already started),
   ``prepare_ray_rss_mb`` (the driver, which merges), ``prepare_ray_identical``.
   Skipped (``prepare_ray_error``) when Ray is not installed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

FIELDS = ["text=txt"]


def build_shards(folder: Path, count: int) -> None:
    """``count`` shards ``shard-NNNNNNN.tar`` (skipped when the last one exists)."""
    if (folder / f"shard-{count - 1:07d}.tar").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    end = b"\0" * 1024
    for i in range(count):
        blocks = []
        for j in range(2):
            for ext, data in (("txt", f"sample {i} {j}".encode()), ("cls", str(j).encode())):
                info = tarfile.TarInfo(f"{i:07d}_{j}.{ext}")
                info.size, info.mtime = len(data), 1_700_000_000
                blocks.append(info.tobuf(tarfile.GNU_FORMAT))
                blocks.append(data + b"\0" * (-len(data) % 512))
        (folder / f"shard-{i:07d}.tar").write_bytes(b"".join(blocks) + end)


def _index_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted((folder / ".fpipe").rglob("*")):
        if f.is_file():
            h.update(str(f.relative_to(folder)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def _clean(folder: Path) -> None:
    for name in (".fpipe", ".fpipe-parts"):
        shutil.rmtree(folder / name, ignore_errors=True)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(kind: str, folder: str) -> dict:
    """One measurement, in this (fresh) process."""
    from fpipe.storage import prepare_dataset

    if kind == "one":
        t = time.perf_counter()
        report = prepare_dataset(folder, fields=FIELDS, progress=False)
        return {"s": time.perf_counter() - t, "shards": report.num_shards, "rss_mb": _rss_mb()}
    import ray
    from ray.cluster_utils import Cluster

    from fpipe.storage.prepare.ray_prepare import prepare_on_ray

    t = time.perf_counter()
    store = 200 << 20
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "object_store_memory": store, "include_dashboard": False},
    )
    cluster.add_node(num_cpus=1, object_store_memory=store)
    ray.init(address=cluster.address, log_to_driver=False)
    start_s = time.perf_counter() - t
    try:
        t = time.perf_counter()
        report = prepare_on_ray(folder, fields=FIELDS, progress=False)
        s = time.perf_counter() - t
    finally:
        ray.shutdown()
        cluster.shutdown()
    return {"s": s, "shards": report.num_shards, "rss_mb": _rss_mb(), "start_s": start_s}


def _spawn(kind: str, folder: Path) -> subprocess.Popen:
    cmd = [sys.executable, __file__, kind, str(folder)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate()
    if proc.returncode:
        raise RuntimeError((err.strip().splitlines() or ["?"])[-1])
    return json.loads(out.strip().splitlines()[-1])


def _recorded(folder: Path) -> int:
    """Shards the journal of a killed prepare holds (records after each file's header)."""
    from fpipe.storage.prepare.journal import JOURNAL_DIR, _records

    files = (folder / ".fpipe" / JOURNAL_DIR).glob("*.jnl")
    return sum(max(0, sum(1 for _ in _records(f)) - 1) for f in files)


def run(root: Path, count: int) -> dict:
    folder = root / f"prepare-{count}"
    t = time.perf_counter()
    build_shards(folder, count)
    out: dict = {"prepare_shards": count, "prepare_build_s": round(time.perf_counter() - t, 2)}
    _clean(folder)
    one = _result(_spawn("one", folder))
    want = _index_digest(folder)
    out.update(prepare_s=one["s"], prepare_rss_mb=one["rss_mb"])
    out["prepare_shards_per_s"] = one["shards"] / one["s"]
    # killed halfway: SIGKILL at half the uninterrupted run's time (its start included)
    _clean(folder)
    proc = _spawn("one", folder)
    time.sleep(one["s"] / 2 + 1.0)  # + about the interpreter's start
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    out["prepare_killed_recorded_shards"] = _recorded(folder)
    again = _result(_spawn("one", folder))
    out["prepare_resume_s"] = again["s"]
    out["prepare_resume_identical"] = _index_digest(folder) == want
    _clean(folder)
    try:
        ray = _result(_spawn("ray", folder))
    except (RuntimeError, json.JSONDecodeError) as e:
        out["prepare_ray_error"] = str(e)
        return out
    out.update(prepare_ray_s=ray["s"], prepare_ray_rss_mb=ray["rss_mb"])
    out["prepare_ray_cluster_start_s"] = ray["start_s"]
    out["prepare_ray_shards_per_s"] = ray["shards"] / ray["s"]
    out["prepare_ray_identical"] = _index_digest(folder) == want
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["one", "ray", "all"])
    ap.add_argument("folder")
    ap.add_argument("--shards", type=int, default=10**5)
    a = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if a.kind == "all":
        print(json.dumps(run(Path(a.folder), a.shards)))
    else:
        print(json.dumps(child(a.kind, a.folder)))
