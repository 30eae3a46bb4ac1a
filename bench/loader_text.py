"""Benchmark: the text rows of ``bench/loader.py`` alone (fpipe, WebDataset, Energon, nw=0).

The same loaders, the same data set and the same timing as section 3 of ``bench/loader.py``
(token-id samples: one ``.npy`` int32 array of 200-400 ids per sample, batch 256, shuffle
buffer 1000, one zero-padded ``[256, L]`` int32 tensor per batch), without the image and
state sections, so the text figures can be re-measured in a few minutes. Every loader's first
batch is checked to be the same kind of tensor; ``--check-same`` also decodes the same
samples with fpipe and with ``np.load`` (WebDataset's ``.npy`` decoder) and compares them.

Usage::

    python bench/loader_text.py                 # 200,000 samples, 40 timed batches, 3 repeats
    python bench/loader_text.py --profile 40    # cProfile of 40 fpipe batches (top functions)

The last line of output is one JSON object (``text_nw0_vs_webdataset``, ...).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import warm_files  # noqa: E402
from _loader_data import ensure_text_set  # noqa: E402
from _loader_runs import close_iter, in_process, measure  # noqa: E402
from loader import TokenEncoder, energon_iter, fpipe_loader, wds_iter  # noqa: E402

import fpipe  # noqa: E402

BATCH = 256


def fpipe_text_iter(root: Path):
    """fpipe's text row as section 3 of ``bench/loader.py`` runs it (the peers' collate)."""
    return iter(fpipe_loader(root, BATCH, 0, None, task_encoder=TokenEncoder()))


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def check_same(root: Path, count: int = 512) -> int:
    """fpipe's decoded token ids of ``count`` samples equal ``np.load`` of the raw members
    (what WebDataset's default ``.npy`` decoder returns); returns how many were compared."""
    ds = fpipe.open_dataset(root)
    loader = fpipe.get_loader(
        fpipe.get_train_dataset(root, batch_size=BATCH, shuffle_buffer_size=1000, seed=1)
    )
    it = iter(loader)
    seen = 0
    while seen < count:
        b = next(it)
        for row, key in zip(b.text, b.__key__):
            i = ds.index_of_key(key)
            ref = np.load(io.BytesIO(ds.read(i)["npy"]), allow_pickle=False)
            got = np.asarray(row)  # the default batch lists numpy arrays
            assert np.array_equal(got[: len(ref)], ref) and not got[len(ref) :].any(), key
            seen += 1
    close_iter(it)
    return seen


def profile(root: Path, batches: int, top: int) -> None:
    it = fpipe_text_iter(root)
    for _ in range(2):
        next(it)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(batches):
        next(it)
    pr.disable()
    close_iter(it)
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(top)
    print(s.getvalue())
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(top)
    print(s.getvalue())


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--data", default=os.path.join(tempfile.gettempdir(), "fpipe-bench-loader-text")
    )
    ap.add_argument("--text", type=int, default=200_000, help="samples in the text set")
    ap.add_argument("--text-batches", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-energon", action="store_true")
    ap.add_argument("--check-same", action="store_true", help="compare decoded ids with np.load")
    ap.add_argument("--profile", type=int, default=0, help="cProfile N fpipe batches, then stop")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)  # as bench/loader.py: one intra-op thread in the main process
    t_start = time.perf_counter()
    load_start = _loadavg()
    root = Path(args.data) / "text"
    with contextlib.redirect_stdout(io.StringIO()):  # Energon's prepare prints progress
        info = ensure_text_set(root, samples=args.text, shards=20)
    print(f"text set: {json.dumps(info)}", flush=True)
    warm_files(root)
    if args.profile:
        profile(root, args.profile, args.top)
        return {}
    result: dict[str, Any] = {}
    if args.check_same:
        result["checked_same_samples"] = check_same(root)
    loaders = {
        "fpipe nw=0": in_process(lambda: fpipe_text_iter(root), "text", BATCH, 2),
        "webdataset nw=0": in_process(lambda: wds_iter(root, BATCH, 0, "text"), "text", BATCH, 2),
    }
    if not args.no_energon:
        try:
            import megatron.energon  # noqa: F401

            loaders["energon nw=0"] = in_process(
                lambda: energon_iter(root, BATCH, 0, "text"), "text", BATCH, 2
            )
        except Exception as e:  # noqa: BLE001 - not installed or broken: its row is skipped
            print(f"Energon unavailable ({type(e).__name__}: {e})")
    wall, cpu = measure(loaders, args.text_batches, args.repeats, print, lambda: warm_files(root))

    def ratio(a, b):
        return round(a / b, 3) if a and b else None

    result.update(
        {
            "text_nw0_vs_webdataset": ratio(wall.get("fpipe nw=0"), wall.get("webdataset nw=0")),
            "text_nw0_vs_energon": ratio(wall.get("fpipe nw=0"), wall.get("energon nw=0")),
            "cpu_text_nw0_vs_webdataset": ratio(cpu.get("fpipe nw=0"), cpu.get("webdataset nw=0")),
            "samples_per_s": {k: round(v, 1) for k, v in wall.items()},
            "samples_per_cpu_s": {k: round(v, 1) for k, v in cpu.items()},
            "samples": args.text,
            "batches": args.text_batches,
            "repeats": args.repeats,
            "loadavg_start": load_start,
            "loadavg_end": _loadavg(),
            "wall_s": round(time.perf_counter() - t_start, 1),
        }
    )
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
