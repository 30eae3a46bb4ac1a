"""Timing for ``bench/loader.py`` (not a test module, not collected by pytest).

Every loader of a section becomes a ``run(n) -> (samples/s, samples per CPU-second)``:
in-process iterators (fpipe, WebDataset, Energon, the bare loop) through :func:`in_process`,
Grain and SPDL through :func:`peer_run` (``bench/_peers.py`` in the peers' Python, a fresh
process per run), and the 2-core ceiling through :func:`two_bare_loops`. :func:`measure`
interleaves them within each repeat and takes medians.
"""

from __future__ import annotations

import contextlib
import gc
import json
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from _peers import cpu_seconds, drain_buffered

PEERS = str(Path(__file__).resolve().parent / "_peers.py")
TARGET = 224

Run = Callable[[int], tuple[float, float]]

__all__ = [
    "close_iter",
    "in_process",
    "last_json",
    "measure",
    "peer_psnr",
    "peer_run",
    "run_together",
    "two_bare_loops",
]


def close_iter(it: Any) -> None:
    with contextlib.suppress(Exception):
        if hasattr(it, "close"):
            it.close()
        elif hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()
    del it
    gc.collect()


def _check(batch: Any, kind: str, batch_size: int) -> None:
    if kind == "text":
        t = batch.text if hasattr(batch, "text") else batch
        assert t.shape[0] == batch_size and t.dtype == torch.int32, (t.shape, t.dtype)
        return
    img = batch.image if hasattr(batch, "image") else batch["image"]
    cap = batch.caption if hasattr(batch, "caption") else batch["caption"]
    assert tuple(img.shape) == (batch_size, 3, TARGET, TARGET), img.shape
    assert img.dtype == torch.uint8 and len(cap) == batch_size


def in_process(
    make: Callable[[], Iterator], kind: str, bs: int, warm: int, min_s: float = 0.0
) -> Run:
    """(samples per wall second, samples per CPU second of this process and its workers) over
    ``n`` batches after ``warm`` batches of a fresh iterator and, for images, the batches it
    had decoded ahead (``_peers.drain_buffered``). ``min_s``: the window goes on past ``n``
    batches until it is that long, so that a cost that comes once every second or so (a full
    collection of the interpreter's garbage, ~70 ms here) counts by its share in every row
    rather than all or nothing in a short window."""

    def run(n: int) -> tuple[float, float]:
        it = make()
        try:
            for i in range(warm):
                b = next(it)
                if i == 0:
                    _check(b, kind, bs)
            if kind == "images":
                drain_buffered(it)
            c0 = cpu_seconds()
            t0 = time.perf_counter()
            done = 0
            while done < n or time.perf_counter() - t0 < min_s:
                next(it)
                done += 1
            dt = time.perf_counter() - t0
            dc = cpu_seconds() - c0
        finally:
            close_iter(it)
        return done * bs / dt, done * bs / dc

    return run


def _peer_cmd(python: str, loader: str, root: Path, warm: int, n: int, *extra: str) -> list[str]:
    return [python, PEERS, loader, "--root", str(root), "--warm", str(warm), "--n", str(n), *extra]


def last_json(proc_out: str, err: str, rc: int) -> dict:
    """The last JSON line a benchmark process printed (its result), or its error."""
    lines = [ln for ln in proc_out.splitlines() if ln.startswith("{")]
    if rc != 0 or not lines:
        raise RuntimeError(f"rc={rc}: {err.strip().splitlines()[-1:] or proc_out[-200:]}")
    return json.loads(lines[-1])


def peer_run(
    python: str, loader: str, root: Path, warm: int, decode: str = "pillow", timeout: float = 600
) -> Run:
    """One Grain / SPDL run in a fresh process of the peers' Python (startup not timed), its
    images decoded by ``decode`` (``_peers.DECODERS``)."""

    def run(n: int) -> tuple[float, float]:
        p = subprocess.run(
            _peer_cmd(python, loader, root, warm, n, "--decode", decode),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        r = last_json(p.stdout, p.stderr, p.returncode)
        return r["rate"], r["cpu_rate"]

    return run


def run_together(cmds: list[list[str]], timeout: float) -> list[dict]:
    """Start every command, wait until each prints ``ready``, release them at the same
    instant (``go`` on stdin), and return each one's result (its last JSON line)."""
    procs = [
        subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for cmd in cmds
    ]
    try:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"bare loop did not start: {p.stderr.read()[-300:]}")
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [last_json(o, e, p.returncode) for (o, e), p in zip(outs, procs)]


def two_bare_loops(python: str, root: Path, warm: int, decode: str = "pillow") -> Run:
    """Two bare loops at once (separate processes, even / odd shards), timed from the same
    instant after both warmed up: the sum of their rates is the practical 2-core ceiling.
    ``decode``: the bare loop's decoder (``_peers.DECODERS``)."""
    shards = len(list(root.glob("*.tar")))
    halves = [",".join(str(i) for i in range(k, shards, 2)) for k in (0, 1)]

    def run(n: int) -> tuple[float, float]:
        cmd = _peer_cmd(python, "bare", root, warm, n, "--decode", decode, "--wait", "--shards")
        res = run_together([[*cmd, h] for h in halves], 600)
        rate = sum(r["rate"] for r in res)
        cpu_s = sum(n * 32 / r["cpu_rate"] for r in res)
        return rate, 2 * n * 32 / cpu_s

    return run


def peer_psnr(python: str, root: Path, count: int) -> dict[str, float] | None:
    """PSNR of SPDL's FFmpeg decode against the shared Pillow transform (None if unavailable)."""
    p = subprocess.run(
        _peer_cmd(python, "psnr", root, 0, count), capture_output=True, text=True, timeout=600
    )
    try:
        return last_json(p.stdout, p.stderr, p.returncode)
    except RuntimeError:
        return None


def measure(
    loaders: dict[str, Run], n: int, repeats: int, log, before: Callable[[], Any] | None = None
) -> tuple[dict[str, float], dict[str, float]]:
    """Median samples/s (wall) and samples per CPU-second per loader, interleaved per repeat.
    ``before()`` runs (untimed) before each run: ``_common.warm_files`` of the section's data."""
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in loaders}
    failed: set[str] = set()
    for r in range(repeats):
        for name, run in loaders.items():
            if name in failed:
                continue
            if before is not None:
                before()
            try:
                v, c = run(n)
            except Exception as e:  # a competitor that fails is reported, not hidden
                log(f"  {name}: FAILED {type(e).__name__}: {e}")
                failed.add(name)
                runs[name] = []
                continue
            runs[name].append((v, c))
            log(f"  [{r + 1}/{repeats}] {name:<30} {v:9.1f} samples/s  {c:9.1f} samples/cpu-s")
    wall = {k: statistics.median(x[0] for x in v) for k, v in runs.items() if v}
    cpu = {k: statistics.median(x[1] for x in v) for k, v in runs.items() if v}
    return wall, cpu
