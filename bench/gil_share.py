"""Benchmark: how much of a sample's time holds the GIL, and what that costs thread workers.

fpipe's thread workers (``worker_mode="thread"``) overlap only the parts of materializing a
sample that release the GIL: Pillow's JPEG decode and resize (and numpy's large copies). The
rest (Pillow's Python JPEG header parser, fpipe's reading, cooking and collating) runs one
thread at a time. This measures, on the small-image set of ``bench/loader.py`` with the same
full decode (``draft=False``):

- ``per_sample_ms``: one sample at ``num_workers=0`` (no profiler), median of repeats;
- ``gil_free_ms``: the GIL-releasing C calls per sample (Pillow's ``ImagingDecoder.decode`` and
  ``ImagingCore.resize``, simplejpeg's decode, numpy's copies), from cProfile's own time of
  those calls (one call per sample each, so the profiler adds little to them);
- ``gil_held_ms = per_sample_ms - gil_free_ms`` and its share, split by who runs it (Pillow's
  Python, fpipe, the rest) in proportion to cProfile's own time of their Python functions;
- ``threads{N}_cores_busy``: samples/s over samples per CPU-second with N thread workers (2.0
  would be both cores busy all the time), and ``threads{N}_vs_nw0`` the speed-up over nw=0.

Usage::

    python bench/gil_share.py                    # 640 images, 40 batches, 3 repeats

The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line  # noqa: E402  (also puts the repo root on sys.path)
from _loader_data import ensure_image_set  # noqa: E402

import fpipe  # noqa: E402
from fpipe.decode.image import ImageDecodeOptions  # noqa: E402

#: C calls that release the GIL while they run (Pillow: ImagingSectionEnter; numpy copies)
GIL_FREE = {
    "<method 'decode' of 'ImagingDecoder' objects>",
    "<method 'resize' of 'ImagingCore' objects>",
    "<built-in method numpy.ascontiguousarray>",
}
#: fpipe's simplejpeg decode: cProfile does not see simplejpeg's (Cython) call, so the own time
#: of the function making it is that GIL-free decode (and a few microseconds of Python)
JPEG = os.path.join("fpipe", "decode", "_jpeg.py")


def _loader(root: Path, nw: int):
    ds = fpipe.get_train_dataset(
        root,
        batch_size=32,
        shuffle_buffer_size=1000,
        max_samples_per_sequence=100,
        seed=1234,
        image_decode=ImageDecodeOptions(target_size=224, draft=False),
    )
    return fpipe.get_loader(ds, num_workers=nw, prefetch_factor=2, worker_mode="thread")


def _rate(root: Path, nw: int, batches: int, profile: cProfile.Profile | None = None):
    """(samples/s, samples per CPU-second) over ``batches`` batches after 4 warm-up batches."""
    it = iter(_loader(root, nw))
    for _ in range(4):
        next(it)
    if profile is not None:
        profile.enable()
    t, c = time.perf_counter(), time.process_time()
    for _ in range(batches):
        next(it)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    if profile is not None:
        profile.disable()
    return batches * 32 / wall, batches * 32 / cpu


def _owner(filename: str) -> str:
    if f"{os.sep}PIL{os.sep}" in filename:
        return "pillow"
    if f"{os.sep}fpipe{os.sep}" in filename:
        return "fpipe"
    return "other"


def _split(profile: cProfile.Profile, samples: int) -> tuple[float, dict[str, float]]:
    """GIL-free C time per sample (ms), and the own time of everything else by owner (s)."""
    stats = pstats.Stats(profile).stats  # {(file, line, name): (cc, nc, tottime, cumtime, ...)}
    free, held = 0.0, {"pillow": 0.0, "fpipe": 0.0, "other": 0.0}
    for (filename, _, name), (_, _, tottime, _, _) in stats.items():
        if (filename == "~" and name in GIL_FREE) or (filename.endswith(JPEG) and name == "decode"):
            free += tottime
        else:
            held[_owner(filename)] += tottime
    return free / samples * 1e3, held


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "fpipe-bench-loader"))
    ap.add_argument("--images", type=int, default=640)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    root = Path(args.data) / "images"
    with contextlib.redirect_stdout(io.StringIO()):
        ensure_image_set(root, samples=args.images, shards=8, lo=128, hi=512, pool=400)
    print(f"# GIL share of a sample\n{machine_line()}, torch {torch.__version__}", flush=True)

    rates: dict[str, list[tuple[float, float]]] = {"0": [], "2": [], "3": []}
    for r in range(args.repeats):  # interleaved, so drift hits every row alike
        for nw in rates:
            rates[nw].append(_rate(root, int(nw), args.batches))
            wall, cpu = rates[nw][-1]
            print(
                f"  [{r + 1}/{args.repeats}] threads={nw}: {wall:7.1f} samples/s "
                f"{cpu:7.1f} samples/cpu-s",
                flush=True,
            )
    med = {
        nw: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
        for nw, v in rates.items()
    }

    profile = cProfile.Profile()
    _rate(root, 0, args.batches, profile)
    samples = args.batches * 32
    free_ms, held_s = _split(profile, samples)
    per_sample_ms = 1e3 / med["0"][0]
    held_ms = max(per_sample_ms - free_ms, 0.0)
    total_held = sum(held_s.values()) or 1.0
    out = {
        "per_sample_ms": round(per_sample_ms, 4),
        "gil_free_ms": round(free_ms, 4),
        "gil_held_ms": round(held_ms, 4),
        "gil_held_share": round(held_ms / per_sample_ms, 3),
        **{f"gil_held_{k}_ms": round(held_ms * v / total_held, 4) for k, v in held_s.items()},
    }
    for nw in ("2", "3"):
        wall, cpu = med[nw]
        out[f"threads{nw}_cores_busy"] = round(wall / cpu, 3)
        out[f"threads{nw}_vs_nw0"] = round(wall / med["0"][0], 3)
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
