"""Benchmark: fpipe's video loading against two bare PyAV loops, SPDL and Megatron-Energon.

Same work for every loader (``bench/_video_data.py``): synthetic H.264 MP4s, 30 fps, a keyframe
every 2 s, 10 s each (a 360p set of 48 at 640x360 and a 720p set of 24 at 1280x720); per sample
16 frames at stride 4 from a seeded start, resized to 256x256, ``uint8 [16, 3, 256, 256]``,
batches of 4; 2 workers, processes or threads. Rows, per set:

- **2 bare PyAV loops**: two processes at once, one on the even and one on the odd videos,
  timed from the same instant after both warmed up (``_video_peers.py bare``): open, seek,
  decode, convert the kept frames, stack; nothing else. The practical 2-core ceiling.
- **fpipe get_clips, processes / threads**: ``fpipe.get_train_dataset`` with a user
  ``DefaultTaskEncoder`` whose ``encode_sample`` calls ``sample.video.get_clips([(i, i), ...],
  video_unit="frames", video_out_frame_size=(256, 256))``; ``get_loader(num_workers=2)`` with
  ``worker_mode="process"`` and ``"thread"``. ``get_clips`` passes over the H.264
  non-reference frames no kept frame needs without decoding them (the same frames come out);
  the row **fpipe get_clips, every frame decoded** (``skip_unneeded_frames=False``, processes)
  decodes every frame from the keyframe on, as the bare loops, SPDL and Energon do: the
  same-decode figures ``processes_all_frames_vs_2x_bare`` and ``vs_spdl_all_frames``.
- **fpipe VideoTaskEncoder (stock), processes**: ``VideoTaskEncoder(VideoTransformConfig(
  num_frames=16, height=256, width=256, stride=4), resize="ffmpeg", normalize=False)``: start
  drawn from the sample's generator, short side scaled while decoding and center cropped, uint8
  ``[3, 16, 256, 256]`` (the bare loop's work; ``stock_vs_2x_bare``). With its default settings
  (torch antialiased resize, ``float32`` in ``[-1, 1]``: more work per sample on the same
  decoded frames) it is a separate row, ``stock_default_vs_2x_bare``.
- **SPDL, 2 threads** and **Energon's AVDecoder in a torch DataLoader, 2 workers**
  (``_video_peers.py``, run in ``--peers-python``).

Every loader's warm-up batches are checked: the frame index written in each frame's pixels must
be the one asked for (the shared seeded clip, or, for the stock encoder, its ``frame_indices``
at stride 4). Timing as ``bench/loader.py``: each rate is samples over the wall time of
``--batches`` batches after a warm-up and after the batches decoded ahead during it; medians of
``--repeats`` runs with the loaders interleaved in each repeat; samples per CPU-second of the
loader's processes beside it (reported as CPU seconds per sample).

Usage::

    python bench/video_loader.py --peers-python /work/venvs/peers/bin/python
    python bench/video_loader.py --peers-python /work/venvs/peers/bin/python --quick  # smoke

The last line is one JSON object: per set (``s360_``, ``s720_``) ``stock_vs_2x_bare``,
``processes_vs_2x_bare``, ``threads_vs_2x_bare``, ``vs_spdl`` and ``vs_energon`` (fpipe's faster
get_clips mode over the peer), ``processes_all_frames_vs_2x_bare`` and ``vs_spdl_all_frames``
(every frame decoded) on wall rates, the same under ``cpu_ratios`` on samples per CPU-second
(steadier on a shared machine), and the rates behind them.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line  # noqa: E402  (also puts the repo root on sys.path)
from _loader_runs import close_iter, last_json, measure, run_together  # noqa: E402
from _peers import cpu_seconds  # noqa: E402
from _video_data import (  # noqa: E402
    BATCH,
    FRAMES,
    OUT,
    SEED,
    STRIDE,
    clip_indices,
    ensure_video_set,
    marker_x,
    read_index,
    video_number,
)
from _video_peers import drain_buffered  # noqa: E402

import fpipe  # noqa: E402
from fpipe.encode.task_encoder import DefaultTaskEncoder  # noqa: E402
from fpipe.encode.video import VideoTransformConfig  # noqa: E402
from fpipe.encode.video_task import VideoTaskEncoder  # noqa: E402

PEERS = str(Path(__file__).resolve().parent / "_video_peers.py")
SETS = {"s360": (640, 360), "s720": (1280, 720)}
BARE, PROCS, THREADS, ALL_FRAMES, STOCK, STOCK_DEFAULT = (
    "2 bare PyAV loops",
    "fpipe get_clips processes=2",
    "fpipe get_clips threads=2",
    "fpipe get_clips every frame decoded processes=2",
    "fpipe VideoTaskEncoder processes=2",
    "fpipe VideoTaskEncoder default processes=2",
)
SPDL, ENERGON = "spdl threads=2", "energon AVDecoder nw=2"

Run = Callable[[int], tuple[float, float]]


class ClipEncoder(DefaultTaskEncoder):
    """The user's encoder: the shared clip of each video through ``AVDecoder.get_clips``
    (``skip=False``: every frame decoded, the peers' decode work)."""

    def __init__(self, skip: bool = True):
        super().__init__()
        self.skip = skip

    def encode_sample(self, sample, rng):
        idx = clip_indices(video_number(sample.__key__))
        out = sample.video.get_clips(
            [(int(i), int(i)) for i in idx],
            video_unit="frames",
            video_out_frame_size=(OUT, OUT),
            skip_unneeded_frames=self.skip,
        )
        return sample.replace(video=torch.cat(out.video_clips))


def stock_encoder(same_work: bool = True) -> VideoTaskEncoder:
    """The stock encoder doing the bare loop's work (scaled while decoding, uint8 out), or with
    its default settings (torch antialiased resize, float32 normalized: more work)."""
    cfg = VideoTransformConfig(num_frames=FRAMES, height=OUT, width=OUT, stride=STRIDE)
    if same_work:
        return VideoTaskEncoder(cfg, resize="ffmpeg", normalize=False)
    return VideoTaskEncoder(cfg)


def fpipe_iter(root: Path, encoder, mode: str) -> Iterator:
    ds = fpipe.get_train_dataset(
        root, batch_size=BATCH, task_encoder=encoder, seed=SEED, shuffle_buffer_size=16
    )
    return iter(fpipe.get_loader(ds, num_workers=2, prefetch_factor=2, worker_mode=mode))


def check_clips(batch) -> int:
    """The shared clip of every sample (uint8 ``[B, T, 3, H, W]``)."""
    video = batch.video
    assert video.dtype == torch.uint8 and tuple(video.shape) == (BATCH, FRAMES, 3, OUT, OUT)
    for clip, key in zip(video, batch.__key__):
        got = [read_index(f.numpy()) for f in clip]
        want = clip_indices(video_number(key)).tolist()
        if got != want:
            raise AssertionError(f"{key}: frames {got}, expected {want}")
    return BATCH


def stock_checker(w: int, h: int) -> Callable:
    span = marker_x(w, h, OUT, crop=True)

    def check(batch) -> int:
        """The stock encoder's frames are its ``frame_indices``, 16 at stride 4."""
        video = batch.video
        assert tuple(video.shape) == (BATCH, 3, FRAMES, OUT, OUT)
        assert video.dtype in (torch.float32, torch.uint8), video.dtype
        if video.dtype == torch.float32:  # default settings: normalized to [-1, 1]
            video = (video + 1) * 127.5
        pixels = video.permute(0, 2, 1, 3, 4)
        for j, key in enumerate(batch.__key__):
            want = batch.frame_indices[j].tolist()
            got = [read_index(f.numpy(), span) for f in pixels[j]]
            if got != want or set(np.diff(want)) != {STRIDE}:
                raise AssertionError(f"{key}: frames {got}, frame_indices {want}")
        return BATCH

    return check


def in_process(make: Callable[[], Iterator], check: Callable, warm: int, checked: dict) -> Run:
    """(samples/s, samples per CPU-s of this process and its workers) over ``n`` batches of a
    fresh iterator, after ``warm`` checked batches and the batches decoded ahead."""

    def run(n: int) -> tuple[float, float]:
        it = make()
        try:
            for _ in range(warm):
                checked["n"] += check(next(it))
            drain_buffered(it)
            c0, t0 = cpu_seconds(), time.perf_counter()
            for _ in range(n):
                next(it)
            dt, dc = time.perf_counter() - t0, cpu_seconds() - c0
        finally:
            close_iter(it)
        return n * BATCH / dt, n * BATCH / dc

    return run


def _cmd(python: str, loader: str, root: Path, warm: int, n: int, *extra: str) -> list[str]:
    return [python, PEERS, loader, "--root", str(root), "--warm", str(warm), "--n", str(n), *extra]


def peer_run(python: str, loader: str, root: Path, warm: int, checked: dict) -> Run:
    def run(n: int) -> tuple[float, float]:
        p = subprocess.run(
            _cmd(python, loader, root, warm, n), capture_output=True, text=True, timeout=900
        )
        r = last_json(p.stdout, p.stderr, p.returncode)
        checked["n"] += r["checked"]
        return r["rate"], r["cpu_rate"]

    return run


def two_bare_loops(python: str, root: Path, warm: int, checked: dict) -> Run:
    """Two bare loops at once on the even and odd videos, timed from the same instant;
    ``n // 2`` batches each (at least 1)."""

    def run(n: int) -> tuple[float, float]:
        n = max(1, n // 2)
        res = run_together(
            [_cmd(python, "bare", root, warm, n, "--half", str(k), "--wait") for k in (0, 1)], 900
        )
        checked["n"] += sum(r["checked"] for r in res)
        cpu_s = sum(n * BATCH / r["cpu_rate"] for r in res)
        return sum(r["rate"] for r in res), 2 * n * BATCH / cpu_s

    return run


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def ratios(prefix: str, rates: dict[str, float]) -> dict[str, float | None]:
    ceiling = rates.get(BARE)
    best = max(rates.get(PROCS, 0), rates.get(THREADS, 0)) or None
    return {
        f"{prefix}_stock_vs_2x_bare": _ratio(rates.get(STOCK), ceiling),
        # default settings do more work than the bare loop: a separate, labelled figure
        f"{prefix}_stock_default_vs_2x_bare": _ratio(rates.get(STOCK_DEFAULT), ceiling),
        f"{prefix}_processes_vs_2x_bare": _ratio(rates.get(PROCS), ceiling),
        f"{prefix}_threads_vs_2x_bare": _ratio(rates.get(THREADS), ceiling),
        f"{prefix}_vs_spdl": _ratio(best, rates.get(SPDL)),
        f"{prefix}_vs_energon": _ratio(best, rates.get(ENERGON)),
        # every frame decoded, as the peers do: the same-decode figures
        f"{prefix}_processes_all_frames_vs_2x_bare": _ratio(rates.get(ALL_FRAMES), ceiling),
        f"{prefix}_vs_spdl_all_frames": _ratio(rates.get(ALL_FRAMES), rates.get(SPDL)),
        f"{prefix}_spdl_vs_2x_bare": _ratio(rates.get(SPDL), ceiling),
        f"{prefix}_energon_vs_2x_bare": _ratio(rates.get(ENERGON), ceiling),
    }


TARGETS = (
    ("stock_vs_2x_bare", 0.9),
    ("processes_vs_2x_bare", 0.95),
    ("threads_vs_2x_bare", 0.9),
    ("vs_spdl", 1.05),
    ("vs_energon", 1.05),
)


def run_set(name: str, root: Path, a: argparse.Namespace, n: int, repeats: int, log) -> dict:
    """Every loader on one set, interleaved; medians, checks and ratios."""
    w, h = SETS[name]
    names = (BARE, PROCS, THREADS, ALL_FRAMES, STOCK, STOCK_DEFAULT, SPDL, ENERGON)
    checked = {k: {"n": 0} for k in names}
    py, warm = a.peers_python, a.warm
    loaders = {
        BARE: two_bare_loops(py, root, warm, checked[BARE]),
        PROCS: in_process(
            functools.partial(fpipe_iter, root, ClipEncoder(), "process"),
            check_clips,
            warm,
            checked[PROCS],
        ),
        THREADS: in_process(
            functools.partial(fpipe_iter, root, ClipEncoder(), "thread"),
            check_clips,
            warm,
            checked[THREADS],
        ),
        ALL_FRAMES: in_process(
            functools.partial(fpipe_iter, root, ClipEncoder(skip=False), "process"),
            check_clips,
            warm,
            checked[ALL_FRAMES],
        ),
        STOCK: in_process(
            functools.partial(fpipe_iter, root, stock_encoder(), "process"),
            stock_checker(w, h),
            warm,
            checked[STOCK],
        ),
        STOCK_DEFAULT: in_process(
            functools.partial(fpipe_iter, root, stock_encoder(same_work=False), "process"),
            stock_checker(w, h),
            warm,
            checked[STOCK_DEFAULT],
        ),
        SPDL: peer_run(py, "spdl", root, warm, checked[SPDL]),
        ENERGON: peer_run(py, "energon", root, warm, checked[ENERGON]),
    }
    wall, cpu = measure(loaders, n, repeats, log)
    log(f"{'loader':<36} {'samples/s':>10} {'CPU-s/sample':>13} {'vs ceiling':>10}")
    for k, v in wall.items():
        log(f"{k:<36} {v:>10.2f} {1 / cpu[k]:>13.4f} {_ratio(v, wall.get(BARE)) or 0:>10.3f}")
    return {
        "ratios": ratios(name, wall),
        # the same ratios on samples per CPU-second: far steadier on a shared machine
        "cpu_ratios": ratios(name, cpu),
        "samples_per_s": {k: round(v, 2) for k, v in wall.items()},
        "cpu_s_per_sample": {k: round(1 / v, 4) for k, v in cpu.items()},
        "samples_checked": {k: v["n"] for k, v in checked.items()},
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "fpipe-bench-video"))
    ap.add_argument(
        "--peers-python",
        default=sys.executable,
        help="a Python with PyAV, SPDL, megatron-energon and torch (bench/_video_peers.py)",
    )
    ap.add_argument("--repeats", type=int, default=None, help="median of N (3; --quick: 1)")
    ap.add_argument(
        "--videos",
        type=int,
        nargs=2,
        default=None,
        metavar=("N360", "N720"),
        help="videos per set (48 24; --quick: 8 8)",
    )
    ap.add_argument(
        "--batches",
        type=int,
        nargs=2,
        default=None,
        metavar=("B360", "B720"),
        help="timed batches of 4 per run (12 6; --quick: 2 2)",
    )
    ap.add_argument("--warm", type=int, default=2, help="checked warm-up batches per run")
    ap.add_argument("--sets", default="s360,s720")
    ap.add_argument("--quick", action="store_true", help="small sets, one repeat: a smoke run")
    a = ap.parse_args(argv)
    repeats = a.repeats or (1 if a.quick else 3)
    videos = a.videos or ((8, 8) if a.quick else (48, 24))
    batches = a.batches or ((2, 2) if a.quick else (12, 6))
    torch.set_num_threads(1)  # as bench/loader.py: torch's pool only waits on 2 busy cores
    log = functools.partial(print, file=sys.stderr, flush=True)
    log(machine_line())
    t_start, load = time.perf_counter(), [os.getloadavg()[0]]
    result: dict = {}
    per_set: dict[str, dict] = {}
    for i, name in enumerate(SETS):
        if name not in a.sets.split(","):
            continue
        root = Path(a.data) / f"{name}-{videos[i]}"
        info = ensure_video_set(root, videos[i], *SETS[name])
        log(f"\n## {name}: {info}")
        for p in sorted(root.glob("*.tar")):  # warm the page cache
            p.read_bytes()
        per_set[name] = {"set": info, **run_set(name, root, a, batches[i], repeats, log)}
        load.append(os.getloadavg()[0])
        result.update(per_set[name].pop("ratios"))
    for key in ("cpu_ratios", "samples_per_s", "cpu_s_per_sample", "samples_checked", "set"):
        result[key] = {name: d[key] for name, d in per_set.items()}
    met = {}
    for name in per_set:
        for key, thr in TARGETS:
            v = result.get(f"{name}_{key}")
            met[f"{name}_{key} >= {thr}"] = ok = v is not None and v >= thr
            log(f"{'MET ' if ok else 'MISS'}  {name}_{key:<22} {v}")
    result.update(
        targets_met=met,
        repeats=repeats,
        batches=dict(zip(SETS, batches)),
        loadavg=[round(x, 2) for x in load],
        cpus=os.cpu_count(),
        quick=a.quick,
        wall_s=round(time.perf_counter() - t_start, 1),
    )
    log(
        f"load average (1 min) at the start and after each set: {result['loadavg']}; "
        f"total {result['wall_s']:.0f} s"
    )
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
