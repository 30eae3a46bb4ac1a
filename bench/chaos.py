"""Chaos soak: remote data through a fault-injecting proxy, workers killed and hung, and what
hedged reads do to batch times.

    python bench/chaos.py             # ~11 minutes on 2 busy cores
    python bench/chaos.py --quick     # a smoke run (~1-2 minutes)
    python bench/chaos.py --no-soak --step-s 0.2   # batch times only, a longer step

The bucket is moto's S3 server on 127.0.0.1 (its own process); between it and the loader sits
``tests/storage/s3_server.py``'s ``FaultProxy`` (loopback only). The dataset is soak.py's small
text samples (1,000 samples in 4 shards, read as ``TextSample``: one small ranged GET each).

1. **Soak** (``--batches``, default 2,000, batch 8, 2 worker processes, ``recover_workers``
   on, ``timeout=5``): 5% of GETs delayed ``--slow-s`` (2 s) and 1% answered 503; a random
   worker SIGKILLed every 25-75 batches (50 on average); once, halfway, a worker SIGSTOPped
   (hung). Every batch's digest is compared with an uninterrupted run of the same shards on
   local disk (no faults): ``batches_mismatched`` must be 0. The digest
   (``tests/loader/helpers.py``) covers every key, tensor byte and value training sees, and
   sources by shard and key (the reference's dataset root is a local folder, the soak's an
   ``s3://`` URL). ``rss_growth_ratio``: this
   process's resident memory after all batches over after ``--first`` (<= 1.05).
2. **Batch times** (``--latency-batches`` per mode after 10 warm-up batches, same loader, no
   kills): 5% of GETs delayed 2 s, with hedged reads (the default) and without
   (``StorageOptions(hedge=False)``). ``batch_s``: one training step as the loop sees it, the
   wait for the batch plus ``--step-s`` of simulated compute; ``wait_s``: the wait alone.
   ``hedged_fraction``: GETs the proxy saw for a range already in flight (a hedge) over all
   GETs it saw. The proxy picks slow GETs independently, so a hedge is itself slow 5% of the
   time: a read stays slow with odds 0.05 x 0.05, a batch of 8 with ~2%, which is what bounds
   ``p99_batch_s`` with one hedge per read (``batches_over_1s`` counts them).

Prints readable lines, then ONE JSON object as the last line.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line  # noqa: E402  (also puts the repo root on sys.path)
from soak import rss_mb, write_dataset  # noqa: E402

import fpipe  # noqa: E402
from fpipe.storage import prepare_dataset  # noqa: E402
from fpipe.storage.read.remote import StorageOptions  # noqa: E402
from tests.loader.helpers import digest  # noqa: E402  (what training sees; not dataset roots)
from tests.storage.s3_server import FaultProxy, LocalS3, restore_env, set_env  # noqa: E402

BATCH = 8


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            kids.setdefault(ppid, []).append(int(entry))
    return kids


def worker_pids() -> list[int]:
    """DataLoader workers of this process: the children of its fork server."""
    kids = _children()
    out = []
    for child in kids.get(os.getpid(), []):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                if b"forkserver" not in f.read():
                    continue
        except OSError:
            continue
        out += kids.get(child, [])
    return sorted(out)


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _dataset(path, storage=None):
    return fpipe.get_train_dataset(
        path, batch_size=BATCH, shuffle_buffer_size=64, max_samples_per_sequence=8, seed=7,
        open_kwargs={} if storage is None else {"storage": storage},
    )  # fmt: skip


def _storage(proxy, **kw) -> StorageOptions:
    return StorageOptions(
        config={"endpoint": proxy.endpoint}, client={"allow_http": True}, **kw
    )  # workers are forks of the fork server: the endpoint goes in the options, not the env


def reference(local: Path, batches: int) -> list[str]:
    loader = fpipe.get_loader(_dataset(local), num_workers=2)
    it = iter(loader)
    out = [digest(next(it)) for _ in range(batches)]
    it.close()
    return out


def soak(url: str, s3, expected: list[str], args) -> dict:
    proxy = FaultProxy(s3.endpoint, delay=0.05, delay_s=args.slow_s, error503=0.01, seed=1)
    loader = fpipe.get_loader(
        _dataset(url, _storage(proxy)), num_workers=2, timeout=5.0, recover_workers=True
    )
    kills, hung, mismatched, rss_first = 0, None, 0, None
    next_kill = _gap(0)
    hang_at = len(expected) // 2
    t0 = time.perf_counter()
    it = iter(loader)
    for i in range(1, len(expected) + 1):
        mismatched += digest(next(it)) != expected[i - 1]
        if i == next_kill or (i == hang_at and hung is None):
            pids = worker_pids()
            if not pids:
                next_kill += 1  # the pool is restarting: try at the next batch
                continue
            victim = pids[int(hashlib.sha256(b"%d" % i).hexdigest(), 16) % len(pids)]
            if i == hang_at:
                os.kill(victim, signal.SIGSTOP)
                hung = victim
                next_kill = i + 50  # let the hang be noticed on its own
            else:
                os.kill(victim, signal.SIGKILL)
                kills += 1
                next_kill = i + _gap(i)
        if i == args.first:
            gc.collect()
            rss_first = rss_mb()
        if i % 250 == 0:
            took = time.perf_counter() - t0
            print(f"  {i:>5} batches  {kills} kills  rss {rss_mb():7.1f} MiB  {took:6.1f} s")
    gc.collect()
    rss_last = rss_mb()
    elapsed = time.perf_counter() - t0
    it.close()
    stats = loader.stats()
    hung_state = None if hung is None else _state(hung)
    if hung_state is not None:
        os.kill(hung, signal.SIGKILL)  # our own worker, left behind by the pool's shutdown
    proxy.stop()
    assert rss_first is not None
    return {
        "batches": len(expected),
        "worker_kills": kills,
        "hangs": int(hung is not None),
        "recoveries": stats.recoveries,
        "recovered": dict(stats.recovered),
        "batches_mismatched": mismatched,
        "skipped": stats.skipped,
        "rss_mb_first": round(rss_first, 2),
        "rss_mb_last": round(rss_last, 2),
        "rss_growth_ratio": round(rss_last / rss_first, 4),
        "hung_worker_left_behind": hung_state is not None and hung_state != "Z",
        "soak_seconds": round(elapsed, 1),
        "soak_proxy": {k: proxy.counts[k] for k in ("get", "delay", "503", "duplicates")},
    }


def _gap(i: int) -> int:
    """Batches until the next kill: 25-75, from a hash of where we are (reproducible)."""
    return 25 + int(hashlib.sha256(b"gap%d" % i).hexdigest(), 16) % 51


def batch_times(url: str, s3, args, *, hedge: bool, read_ahead: bool = True) -> dict:
    proxy = FaultProxy(s3.endpoint, delay=0.05, delay_s=args.slow_s, seed=2 + hedge)
    loader = fpipe.get_loader(
        _dataset(url, _storage(proxy, hedge=hedge)),
        num_workers=2,
        timeout=60.0,
        **({} if read_ahead else {"read_ahead_bytes": 0}),
    )
    it = iter(loader)
    for _ in range(10):  # workers start; each reader times 20 GETs before it may hedge
        next(it)
    gets, dups = proxy.counts["get"], proxy.counts["duplicates"]
    step, wait = [], []
    for _ in range(args.latency_batches):
        t0 = time.perf_counter()
        next(it)
        t1 = time.perf_counter()
        time.sleep(args.step_s)  # the training step's compute
        wait.append(t1 - t0)
        step.append(time.perf_counter() - t0)
    rss = max((_peak_rss_mb(p) for p in worker_pids()), default=0.0)
    it.close()
    proxy.stop()
    io = loader.stats().io
    gets, dups = proxy.counts["get"] - gets, proxy.counts["duplicates"] - dups
    p50, p99 = _q(step, 0.5), _q(step, 0.99)
    return {
        "p50_batch_s": round(p50, 4),
        "p99_batch_s": round(p99, 4),
        "p99_over_p50": round(p99 / p50, 3),
        "p95_batch_s": round(_q(step, 0.95), 4),
        "p95_over_p50": round(_q(step, 0.95) / p50, 3),
        "batches_over_1s": sum(t > 1.0 for t in step),
        "p50_wait_s": round(_q(wait, 0.5), 4),
        "p99_wait_s": round(_q(wait, 0.99), 4),
        "mean_batch_s": round(statistics.fmean(step), 4),
        "hedged_fraction": round(dups / max(1, gets), 4),
        "slow_gets": proxy.counts["delay"],
        # slow reads whose bytes were there before the batch needed them, over all slow reads
        "read_ahead_hidden_fraction": round(
            io.get("slow_reads_hidden", 0) / max(1, io.get("slow_reads", 0)), 4
        ),
        "read_ahead_peak_bytes": io.get("read_ahead_peak_bytes", 0),
        "worker_peak_rss_mb": round(rss, 1),
    }


def _peak_rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _q(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=2000)
    ap.add_argument("--first", type=int, default=500, help="batch of the first RSS reading")
    ap.add_argument("--latency-batches", type=int, default=200)
    ap.add_argument("--slow-s", type=float, default=2.0, help="delay of a slow GET")
    ap.add_argument("--step-s", type=float, default=0.05, help="simulated compute per step")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-soak", action="store_true", help="batch times only (part 2)")
    args = ap.parse_args()
    if args.quick:
        args.batches, args.first, args.latency_batches = 300, 100, 60
    print(machine_line())
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "text"
        local.mkdir()
        write_dataset(local)
        s3 = LocalS3(process=True)
        old = set_env({**s3.env(), "FPIPE_CACHE": str(Path(tmp) / "cache")})
        try:
            url = s3.upload(local, "fpipe-chaos", "text")
            prepare_dataset(url, fields={"text": "txt"}, sample_type="TextSample", split="1,0,0")
            result = {"loadavg_start": [round(x, 2) for x in os.getloadavg()]}
            if not args.no_soak:
                t0 = time.perf_counter()
                expected = reference(local, args.batches)
                print(f"reference: {args.batches} batches from local disk, no faults, "
                      f"{time.perf_counter() - t0:.1f} s")  # fmt: skip
                result |= soak(url, s3, expected, args)
                print(
                    f"soak: {result['batches']} batches, {result['worker_kills']} kills, "
                    f"{result['hangs']} hang, {result['recoveries']} recoveries, "
                    f"{result['batches_mismatched']} mismatched, "
                    f"rss x{result['rss_growth_ratio']}"
                )
            ahead = batch_times(url, s3, args, hedge=True)
            hedged = batch_times(url, s3, args, hedge=True, read_ahead=False)
            plain = batch_times(url, s3, args, hedge=False, read_ahead=False)
            runs = (("read-ahead + hedged", ahead), ("hedged, no read-ahead", hedged),
                    ("no hedging, no read-ahead", plain))  # fmt: skip
            for name, r in runs:
                print(f"{name}: batch p50 {r['p50_batch_s']} s, p95 {r['p95_batch_s']} s, "
                      f"p99 {r['p99_batch_s']} s (x{r['p99_over_p50']}); wait p50 "
                      f"{r['p50_wait_s']} s, p99 {r['p99_wait_s']} s; hedged "
                      f"{r['hedged_fraction']:.1%}; slow reads hidden "
                      f"{r['read_ahead_hidden_fraction']:.1%}; read ahead peak "
                      f"{r['read_ahead_peak_bytes']} B, worker RSS "
                      f"{r['worker_peak_rss_mb']} MiB")  # fmt: skip
            result |= ahead
            result |= {f"{k}_no_read_ahead": v for k, v in hedged.items()}
            result |= {f"{k}_no_hedging": v for k, v in plain.items()}
            result |= {
                "slow_get_s": args.slow_s,
                "step_s": args.step_s,
                "latency_batches": args.latency_batches,
                "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            }
        finally:
            restore_env(old)
            s3.stop()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
