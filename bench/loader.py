"""Benchmark: fpipe's loader against a bare loop, WebDataset, Megatron-Energon, Grain and SPDL.

Sections (competitors measured alongside, interleaved within each repeat):

1. **Images** (JPEG 128-512 px, decode + resize short side + center crop to 224, batch 32):
   a bare loop (``tarfile`` sequential + Pillow, one core), two bare loops at once on separate
   shards (processes: the practical 2-core ceiling; with fpipe's decoder, and with Pillow),
   fpipe at ``num_workers`` 0 and 2 (full decode, ``draft=False``, and its default draft
   decode; with ``draft=False`` also 2 thread workers, ``worker_mode="thread"``), WebDataset
   and Energon at 0 and 2,
   Grain (2 threads; 2 processes), SPDL (2 threads; SPDL's FFmpeg decode too), each with
   fpipe's decode function and with Pillow.
2. **Large images** (JPEG 800-1600 px, same 224 target): fpipe nw=2 (full and draft decode;
   full decode in 2 threads too),
   WebDataset nw=2, Grain, SPDL, two bare loops; the PSNR of fpipe's draft decode and of
   SPDL's FFmpeg decode against the shared full decode.
3. **Text** (200,000 token-id samples, 200-400 int32 ids in one ``.npy`` member, batch 256,
   ``num_workers=0``): fpipe, WebDataset, Energon, each row timed over at least 320 batches
   and at least 5 s (``--text-seconds``: a full collection of the interpreter's garbage,
   ~70 ms once every ~600 fpipe batches, then counts by its share in every row).
4. **State**: snapshot bytes at step 10 and step 100,000 for 0, 2 and 4 workers, and the time
   from ``load_state_dict`` to the first batch at both steps (and, at ``num_workers=0``,
   against an ordinary batch).

Same work. Every image loader yields uint8 ``[32, 3, 224, 224]`` + captions from the same
``.tar`` files, with 2 workers or threads where it runs in parallel. All but two rows decode
the same pixels with the same transform (``_peers.resize_crop_np``: torchvision's
``Resize(224) + CenterCrop(224)`` geometry, bilinear, resampling only the kept box), whose
output is bit-identical to fpipe's ``ImageDecodeOptions(target_size=224, draft=False)``.

Same decoder where the user picks it. fpipe decodes plain JPEGs with libjpeg-turbo through
simplejpeg and the others with Pillow. With Grain and SPDL the user writes the decode
function, so their rows call fpipe's own public decode function (``_peers.decode_fpipe``:
``decode_image_with``, simplejpeg or Pillow per image as fpipe picks): the work is
identical and ``nw2_vs_grain_same_decoder`` / ``nw2_vs_spdl_same_decoder`` measure the
loader alone. The 2-core ceiling is two bare loops with that decoder
(``nw2_vs_2x_bare_loop_same_decoder``, ``threads2_vs_2x_bare_loop_same_decoder``).
WebDataset and Energon decode inside the library (``.decode("pil")``,
``SampleDecoder(image_decode="pilrgb")``: Pillow), so ``nw2_vs_webdataset_builtin_decode``
and ``nw2_vs_energon_builtin_decode`` include fpipe's decoder in its lead. Grain, SPDL and the
bare loops are run with Pillow too (rows ``... (Pillow)``):
``grain_same_decoder_vs_pillow``, ``spdl_same_decoder_vs_pillow`` and
``2x_bare_loop_same_decoder_vs_pillow`` say how much the decoder alone is worth. The keys of
the previous release (``nw2_vs_<peer>_same_decode``, ``nw2_vs_2x_bare_loop``,
``threads2_vs_2x_bare_loop_simplejpeg``, ...: the peers on Pillow) are printed for one more
release (docs/benchmarks.md).

The ratios use the faster of fpipe's two ``draft=False`` rows (2 processes, 2 threads), as
Grain's figure is the faster of its two modes; each mode has its own keys too
(``processes2_*``, ``threads2_*``). fpipe's draft decode (reduced DCT scale, other pixels: its
PSNR is printed) and SPDL's FFmpeg decode (swscale bilinear in YUV, RGB at 224: other pixels,
PSNR printed) are separately labelled rows. Shuffling is each loader's own idiom (buffer 1000
for fpipe, Energon, WebDataset; a global permutation for Grain and SPDL, which read members by
offset). Energon runs through ``get_savable_loader``, WebDataset through ``WebLoader``. Grain
and SPDL run in their own Python (``--peers-python``; it needs fpipe's dependencies for the
same-decoder rows, torch is optional) as one subprocess per run, startup and warm-up untimed.

Timing: each rate is samples over the wall time of ``--batches`` batches taken after a warm-up
(worker start, shuffle-buffer fill and, for images, the batches decoded
ahead during it excluded), median of ``--repeats`` runs; the loaders of a
section are interleaved within each repeat so machine noise hits them alike; each run first
reads its set's files (untimed: ``_common.warm_files``), so that it finds them in the page
cache. The main process runs torch with one intra-op thread (``--torch-threads``; workers
always do): on a busy 2-core machine torch's default pool made every ``torch.stack`` wait
~15 ms for a second core and every loader 2-5x slower, in whatever order the scheduler chose.
Samples per CPU-second of the loader's processes are printed beside the wall rates: they move
far less with other load on the machine. Datasets are written once under ``--data`` and
reused (``bench-params.json``).

Usage::

    pip install -e '.[bench]'          # webdataset, megatron-energon, grain, spdl (bench only)
    python bench/loader.py --peers-python /path/to/venv/bin/python   # if grain/spdl live there
    python bench/loader.py --quick     # smaller sets, one repeat: a smoke run

The last line of output is one JSON object (``nw0_vs_bare_loop``,
``nw2_vs_grain_same_decoder``, ``nw2_vs_spdl_same_decoder``,
``nw2_vs_webdataset_builtin_decode``, ``nw2_vs_2x_bare_loop_same_decoder``, ...).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line, warm_files  # noqa: E402  (also puts the repo root on sys.path)
from _loader_data import ensure_image_set, ensure_text_set  # noqa: E402
from _loader_runs import (  # noqa: E402
    close_iter,
    in_process,
    measure,
    peer_psnr,
    peer_run,
    two_bare_loops,
)
from _peers import bare_batches, resize_crop_np, resize_then_crop_np  # noqa: E402

import fpipe  # noqa: E402
from fpipe.decode.image import ImageDecodeOptions, decode_image, psnr  # noqa: E402
from fpipe.encode import pad_stack  # noqa: E402
from fpipe.loader.state import LoaderState, encode_loader_state  # noqa: E402

TARGET = 224
SHUFFLE = 1000
MAX_SEQ = 100
SEED = 1
#: fpipe's thread workers (``worker_mode="thread"``), full decode
FPIPE_THREADS = "fpipe threads=2 draft=False"
#: The 2-core ceiling: two bare loops decoding with fpipe's decode function (the same decoder)
BARE_SAME = "2 bare loops (2 processes)"
#: ... and with Pillow (the ceiling of the previous release's keys)
BARE_PIL = "2 bare loops, Pillow (2 processes)"
#: rows of a peer decoding with Pillow (its own rows decode with fpipe's decode function)
PIL = "(Pillow)"
#: where the peers find fpipe's decode function (``_peers.decode_fpipe``)
FPIPE_DEC = "fpipe.decode.image"
ROOT = Path(__file__).resolve().parent.parent
#: fpipe over each peer: the same decoder where the user writes the decode, else the peer's own
PEER_KEYS = [
    f"{p}nw2_vs_{peer}_{how}"
    for p in ("", "large_")
    for peer, how in (
        ("grain", "same_decoder"),
        ("spdl", "same_decoder"),
        ("webdataset", "builtin_decode"),
        ("energon", "builtin_decode"),
    )
]

# --------------------------------------------------------------------------------------------
# The user-written transform the bare loop, WebDataset and Energon share
# --------------------------------------------------------------------------------------------


def resize_crop(img: Image.Image, size: int = TARGET) -> torch.Tensor:
    """The shared transform (``_peers.resize_crop_np``) as a uint8 CHW tensor."""
    return torch.from_numpy(resize_crop_np(img, size))


def decode_resize(data: bytes) -> torch.Tensor:
    return resize_crop(Image.open(io.BytesIO(data)))


def collate_images(samples: list) -> dict:
    return {"image": torch.stack([s[0] for s in samples]), "caption": [s[1] for s in samples]}


def collate_tokens(samples: list) -> torch.Tensor:
    return pad_stack([torch.from_numpy(s[0]) for s in samples])


class TokenEncoder(fpipe.DefaultTaskEncoder):
    """fpipe's side of the text rows: the peers' collate_tokens (the default batch gives
    numpy arrays as lists, as Energon's generic_batch does)."""

    def batch(self, samples: list) -> torch.Tensor:
        return collate_tokens([(s.text,) for s in samples])


def decoder_ratios(small: dict, big: dict, ratio: Callable) -> dict[str, float | None]:
    """fpipe ``draft=False`` (the better of its 2 processes / 2 threads) over each peer.

    ``*_same_decoder``: Grain, SPDL and the 2 bare loops decode with fpipe's own decode
    function (``_peers.decode_fpipe``: simplejpeg or Pillow per image, as fpipe picks), so
    the ratio is the loader's alone. ``*_builtin_decode``: WebDataset and Energon decode
    inside the library (Pillow), so the ratio includes fpipe's decoder.
    ``*_same_decoder_vs_pillow``: what fpipe's decoder gives a peer by itself. fpipe's draft
    decode (other pixels) has keys of its own."""
    out = {}
    for prefix, rates in (("", small), ("large_", big)):
        procs, threads = rates.get("fpipe nw=2 draft=False"), rates.get(FPIPE_THREADS)
        mine = max(procs or 0, threads or 0) or None
        grain = _best(rates, "grain threads=2", "grain processes=2")
        grain_pil = _best(rates, f"grain threads=2 {PIL}", f"grain processes=2 {PIL}")
        same = {"grain": grain, "spdl": rates.get("spdl threads=2")}
        for name, v in same.items():
            out[f"{prefix}nw2_vs_{name}_same_decoder"] = ratio(mine, v)
        for name in ("webdataset", "energon")[: 1 if prefix else 2]:
            out[f"{prefix}nw2_vs_{name}_builtin_decode"] = ratio(mine, rates.get(f"{name} nw=2"))
        out[f"{prefix}nw2_vs_grain_threads_same_decoder"] = ratio(
            mine, rates.get("grain threads=2")
        )
        out[f"{prefix}nw2_vs_grain_processes_same_decoder"] = ratio(
            mine, rates.get("grain processes=2")
        )
        ceiling, ceiling_pil = rates.get(BARE_SAME), rates.get(BARE_PIL)
        out[f"{prefix}nw2_vs_2x_bare_loop_same_decoder"] = ratio(mine, ceiling)
        out[f"{prefix}processes2_vs_2x_bare_loop_same_decoder"] = ratio(procs, ceiling)
        out[f"{prefix}threads2_vs_2x_bare_loop_same_decoder"] = ratio(threads, ceiling)
        out[f"{prefix}grain_best_vs_2x_bare_loop_same_decoder"] = ratio(grain, ceiling)
        out[f"{prefix}threads2_vs_processes2"] = ratio(threads, procs)
        out[f"{prefix}nw2_vs_spdl_ffmpeg"] = ratio(mine, rates.get("spdl-ffmpeg threads=2"))
        out[f"{prefix}nw2_draft_vs_2x_bare_loop_same_decoder"] = ratio(
            rates.get("fpipe nw=2" if not prefix else "fpipe nw=2 (draft)"), ceiling
        )
        # how much of the lead over a Pillow-decoding peer is the decoder
        out[f"{prefix}grain_same_decoder_vs_pillow"] = ratio(grain, grain_pil)
        out[f"{prefix}spdl_same_decoder_vs_pillow"] = ratio(
            rates.get("spdl threads=2"), rates.get(f"spdl threads=2 {PIL}")
        )
        out[f"{prefix}2x_bare_loop_same_decoder_vs_pillow"] = ratio(ceiling, ceiling_pil)
        # Keys of the previous release, kept for one release (docs/benchmarks.md), then
        # dropped: the peers and the bare loops decoding with Pillow, fpipe with its decoder.
        for name, v in {
            "webdataset": rates.get("webdataset nw=2"),
            "energon": rates.get("energon nw=2"),
            "grain": grain_pil,
            "spdl": rates.get(f"spdl threads=2 {PIL}"),
        }.items():
            if not (prefix and name == "energon"):
                out[f"{prefix}nw2_vs_{name}_same_decode"] = ratio(mine, v)
        out[f"{prefix}nw2_vs_grain_threads"] = ratio(mine, rates.get(f"grain threads=2 {PIL}"))
        out[f"{prefix}nw2_vs_grain_processes"] = ratio(mine, rates.get(f"grain processes=2 {PIL}"))
        out[f"{prefix}nw2_vs_2x_bare_loop"] = ratio(mine, ceiling_pil)
        out[f"{prefix}processes2_vs_2x_bare_loop"] = ratio(procs, ceiling_pil)
        out[f"{prefix}threads2_vs_2x_bare_loop"] = ratio(threads, ceiling_pil)
        out[f"{prefix}threads2_vs_2x_bare_loop_simplejpeg"] = ratio(threads, ceiling)
        out[f"{prefix}grain_best_vs_2x_bare_loop"] = ratio(grain_pil, ceiling_pil)
        out[f"{prefix}nw2_draft_vs_2x_bare_loop"] = ratio(
            rates.get("fpipe nw=2" if not prefix else "fpipe nw=2 (draft)"), ceiling_pil
        )
    out["large_nw2_vs_webdataset_draft"] = ratio(
        big.get("fpipe nw=2 (draft)"), big.get("webdataset nw=2")
    )
    out["two_bare_loops_vs_one"] = ratio(small.get(BARE_PIL), small.get("bare loop (1 core)"))
    return out


def _best(rates: dict, *names: str) -> float | None:
    return max(rates.get(n) or 0 for n in names) or None


@functools.cache
def _importable(python: str, module: str) -> bool:
    """Whether ``module`` imports in ``python`` (asked once per run; a row needing a peer that
    is not installed there is left out, and said so, rather than failing every repeat)."""
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); import {module}"
    p = subprocess.run([python, "-c", code], capture_output=True, timeout=120)
    if p.returncode:
        print(f"  {module} is not importable in {python}: its rows are left out (--peers-python)")
    return p.returncode == 0


def peer_loaders(python: str, root: Path, warm: int) -> dict:
    """Grain (threads, processes) and SPDL, 2 each, with fpipe's decode function and with
    Pillow, and SPDL's own FFmpeg decode, where the peers' Python has them."""
    rows = {
        "grain threads=2": ("grain", "grain-threads", "fpipe"),
        "grain processes=2": ("grain", "grain-procs", "fpipe"),
        "spdl threads=2": ("spdl", "spdl", "fpipe"),
        f"grain threads=2 {PIL}": ("grain", "grain-threads", "pillow"),
        f"grain processes=2 {PIL}": ("grain", "grain-procs", "pillow"),
        f"spdl threads=2 {PIL}": ("spdl", "spdl", "pillow"),
        "spdl-ffmpeg threads=2": ("spdl", "spdl-ffmpeg", "pillow"),
    }
    return {
        name: peer_run(python, loader, root, warm, decode)
        for name, (module, loader, decode) in rows.items()
        if _importable(python, module) and (decode != "fpipe" or _importable(python, FPIPE_DEC))
    }


# --------------------------------------------------------------------------------------------
# Loaders: each factory returns a fresh infinite iterator of batches
# --------------------------------------------------------------------------------------------


def bare_loop(root: Path, batch_size: int) -> Iterator[dict]:
    """tarfile sequential read + Pillow decode + the shared transform, one core, no shuffle."""
    return bare_batches(sorted(root.glob("*.tar")), batch_size, decode_resize, torch.stack)


def fpipe_loader(
    root: Path,
    batch_size: int,
    nw: int,
    decode: ImageDecodeOptions | None,
    mode="process",
    task_encoder: Any = None,
):
    ds = fpipe.get_train_dataset(
        root,
        batch_size=batch_size,
        shuffle_buffer_size=SHUFFLE,
        max_samples_per_sequence=MAX_SEQ,
        seed=SEED,
        image_decode=decode,
        task_encoder=task_encoder,
    )
    return fpipe.get_loader(ds, num_workers=nw, prefetch_factor=2, worker_mode=mode)


def fpipe_iter(root: Path, batch_size: int, nw: int, decode=None, mode="process") -> Iterator:
    return iter(fpipe_loader(root, batch_size, nw, decode, mode))


def wds_iter(root: Path, batch_size: int, nw: int, kind: str) -> Iterator:
    import webdataset as wds

    urls = [str(p) for p in sorted(root.glob("*.tar"))]
    ds = wds.WebDataset(urls, resampled=True, shardshuffle=False, seed=SEED).shuffle(SHUFFLE)
    if kind == "images":
        ds = (
            ds.decode("pil")
            .to_tuple("jpg", "txt")
            .map_tuple(resize_crop, lambda x: x)
            .batched(batch_size, collation_fn=collate_images)
        )
    else:
        ds = ds.decode().to_tuple("npy").batched(batch_size, collation_fn=collate_tokens)
    pf = 2 if nw else None
    return iter(wds.WebLoader(ds, batch_size=None, num_workers=nw, prefetch_factor=pf))


def _energon_encoders():
    from megatron.energon import DefaultTaskEncoder, SampleDecoder, stateless

    class ImageEncoder(DefaultTaskEncoder):
        def __init__(self):
            super().__init__()
            self.decoder = SampleDecoder(image_decode="pilrgb")

        @stateless
        def encode_sample(self, sample):
            return (resize_crop(sample.image), sample.caption)

        def batch(self, samples):
            return collate_images(samples)

    class TextEncoder(DefaultTaskEncoder):
        @stateless
        def encode_sample(self, sample):
            return (sample.text,)

        def batch(self, samples):
            return collate_tokens(samples)

    return ImageEncoder, TextEncoder


def energon_iter(root: Path, batch_size: int, nw: int, kind: str) -> Iterator:
    from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset

    image_enc, text_enc = _energon_encoders()
    wc = WorkerConfig(rank=0, world_size=1, num_workers=nw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = get_train_dataset(
            str(root),
            split_part="train",
            worker_config=wc,
            batch_size=batch_size,
            batch_drop_last=True,
            shuffle_buffer_size=SHUFFLE,
            max_samples_per_sequence=MAX_SEQ,
            task_encoder=image_enc() if kind == "images" else text_enc(),
        )
        return iter(get_savable_loader(ds))


# --------------------------------------------------------------------------------------------
# Timing (``_loader_runs``)
# --------------------------------------------------------------------------------------------


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


# --------------------------------------------------------------------------------------------
# State and restore
# --------------------------------------------------------------------------------------------


def _first_batch_after_restore(ds, nw: int, sd: dict) -> float:
    loader = fpipe.get_loader(ds, num_workers=nw, prefetch_factor=2)
    t0 = time.perf_counter()
    loader.load_state_dict(sd)
    it = iter(loader)
    next(it)
    dt = time.perf_counter() - t0
    close_iter(it)
    return dt


def state_section(root: Path, steps_far: int, repeats: int, log) -> dict[str, Any]:
    ds = fpipe.get_train_dataset(
        root,
        batch_size=32,
        shuffle_buffer_size=SHUFFLE,
        max_samples_per_sequence=MAX_SEQ,
        seed=SEED,
        image_decode=ImageDecodeOptions(target_size=TARGET),
    )
    out: dict[str, Any] = {"workers": [0, 2, 4]}
    # step 10: take 10 batches with each worker count, snapshot
    near: dict[int, bytes] = {}
    for nw in (0, 2, 4):
        loader = fpipe.get_loader(ds, num_workers=nw, prefetch_factor=2)
        it = iter(loader)
        for _ in range(10):
            next(it)
        near[nw] = loader.snapshot()
        close_iter(it)
    # step 100,000: advance the plan alone (what the loader records is the plan state after
    # the last batch taken), then wrap it with the loader's counters
    t0 = time.perf_counter()
    state = ds.plan.init()
    nxt = ds.plan.next
    epoch = 0
    for _ in range(steps_far):
        state, recipes = nxt(state, 1)
        epoch = int(recipes[0].refs.epoch.max())
    plan_s = time.perf_counter() - t0
    far_bytes = encode_loader_state(
        ds.plan, LoaderState(state, steps_far, steps_far * 32, 0, epoch)
    )
    far: dict[int, bytes] = {}
    for nw in (0, 2, 4):  # restore, take one batch, snapshot: the state at step 1e5 + 1
        loader = fpipe.get_loader(ds, num_workers=nw, prefetch_factor=2)
        loader.restore(far_bytes)
        it = iter(loader)
        next(it)
        far[nw] = loader.snapshot()
        close_iter(it)
    out["plan_advance_s"] = plan_s
    out["epoch_at_far"] = epoch
    out["bytes_near"] = {nw: len(b) for nw, b in near.items()}
    out["bytes_far"] = {nw: len(b) for nw, b in far.items()}
    out["bytes_far_exact"] = len(far_bytes)
    out["identical_across_workers"] = len(set(near.values())) == 1 and len(set(far.values())) == 1
    # restore -> first batch
    sd_near = {"fpipe_snapshot": near[0]}
    sd_far = {"fpipe_snapshot": far_bytes}
    restore: dict[int, dict[str, float]] = {}
    for nw in (0, 2, 4):
        t_near, t_far = [], []
        for _ in range(max(5, repeats)):
            t_near.append(_first_batch_after_restore(ds, nw, sd_near))
            t_far.append(_first_batch_after_restore(ds, nw, sd_far))
        restore[nw] = {"near_s": statistics.median(t_near), "far_s": statistics.median(t_far)}
        log(
            f"  restore nw={nw}: step 10 {restore[nw]['near_s'] * 1e3:.1f} ms, "
            f"step {steps_far:,} {restore[nw]['far_s'] * 1e3:.1f} ms"
        )
    out["restore"] = restore
    # an ordinary batch at nw=0 (steady state, same loader configuration)
    loader = fpipe.get_loader(ds, num_workers=0)
    it = iter(loader)
    for _ in range(3):
        next(it)
    times = []
    for _ in range(max(20, 10 * repeats)):
        t0 = time.perf_counter()
        next(it)
        times.append(time.perf_counter() - t0)
    close_iter(it)
    out["ordinary_batch_nw0_s"] = statistics.median(times)
    return out


# --------------------------------------------------------------------------------------------
# PSNR of the reduced-scale path
# --------------------------------------------------------------------------------------------


def psnr_section(root: Path, count: int) -> dict[str, float]:
    from fpipe.storage import open_dataset

    ds = open_dataset(root)
    vals, common = [], []
    seen = set()
    for i in range(len(ds)):
        data = ds.read(i)["jpg"]
        if data in seen:
            continue
        seen.add(data)
        a = decode_image(data, out="numpy", target_size=TARGET, draft=True)
        b = decode_image(data, out="numpy", target_size=TARGET, draft=False)
        vals.append(psnr(a, b))
        whole = resize_then_crop_np(Image.open(io.BytesIO(data))).transpose(1, 2, 0)
        common.append(psnr(whole, b))
        if len(vals) >= count:
            break
    return {
        "mean": float(np.mean(vals)),
        "min": float(np.min(vals)),
        "images": len(vals),
        "resize_then_crop_mean": float(np.mean(common)),
    }


# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "fpipe-bench-loader"))
    ap.add_argument("--repeats", type=int, default=None, help="median of N (3; --quick: 1)")
    ap.add_argument("--images", type=int, default=3200, help="samples in the 128-512 px set")
    ap.add_argument("--large", type=int, default=1024, help="samples in the 800-1600 px set")
    ap.add_argument("--text", type=int, default=200_000, help="samples in the text set")
    # about 3 s per window on 2 cores: with 60 and 8 batches (about 1 s) the three repeats of
    # a row in one run spread by 2-15% (fpipe's processes 8%, its threads 15%), and so did the
    # medians from run to run
    ap.add_argument("--batches", type=int, default=150, help="timed batches, 128-512 px set")
    ap.add_argument("--large-batches", type=int, default=20)
    ap.add_argument("--text-batches", type=int, default=320)
    ap.add_argument(
        "--text-seconds",
        type=float,
        default=5.0,
        help="each text row runs at least --text-batches batches and at least this long",
    )
    ap.add_argument("--far-step", type=int, default=100_000)
    ap.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch intra-op threads of the main process (0: torch's default); "
        "DataLoader workers always use 1",
    )
    ap.add_argument("--no-energon", action="store_true")
    ap.add_argument(
        "--peers-python",
        default=os.environ.get("FPIPE_BENCH_PEERS_PYTHON", sys.executable),
        help="Python with grain and spdl installed (Grain/SPDL rows and the 2-loop ceiling run "
        "there as subprocesses; default: $FPIPE_BENCH_PEERS_PYTHON or this Python)",
    )
    ap.add_argument("--quick", action="store_true", help="small sets, 1 repeat (smoke run)")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats = args.repeats or 1
        args.images, args.large, args.text = 640, 128, 20_000
        args.batches, args.large_batches, args.text_batches, args.far_step = 8, 3, 10, 2_000
        args.text_seconds = 0.0
    args.repeats = args.repeats or 3
    t_start = time.perf_counter()
    load_start = _loadavg()
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)

    def log(msg: str) -> None:
        print(msg, flush=True)

    # torch's advice on worker counts above the core count, and Energon's pin_memory on a
    # CPU-only machine: expected here, not news
    warnings.filterwarnings("ignore", message=".*worker processes in total.*")
    warnings.filterwarnings("ignore", message=".*pin_memory.*")

    try:
        import webdataset  # noqa: F401
    except ImportError:
        sys.exit("bench/loader.py needs webdataset: pip install -e '.[bench]'")
    energon = not args.no_energon
    if energon:
        try:
            import megatron.energon  # noqa: F401
        except Exception as e:  # not installed, or broken dependencies
            log(f"Energon unavailable ({type(e).__name__}: {e}); its rows are skipped")
            energon = False

    data = Path(args.data)
    log(f"# fpipe loader benchmark\n{machine_line()}, torch {torch.__version__}")
    log(f"data under {data}; torch intra-op threads in the main process: {torch.get_num_threads()}")
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # Energon's prepare prints progress
        info_img = ensure_image_set(
            data / "images",
            samples=args.images,
            shards=8,
            lo=128,
            hi=512,
            pool=min(args.images, 400),
        )
        info_large = ensure_image_set(
            data / "large",
            samples=args.large,
            shards=4,
            lo=800,
            hi=1600,
            pool=min(args.large, 96),
            seed=1,
        )
        info_text = ensure_text_set(data / "text", samples=args.text, shards=20)
    setup_s = time.perf_counter() - t0
    for name, info in (("images", info_img), ("large", info_large), ("text", info_text)):
        log(f"  {name}: {json.dumps(info)}")
    log(
        f"datasets ready in {setup_s:.1f} s; repeats={args.repeats} (median), "
        f"shuffle buffer {SHUFFLE}, max samples/sequence {MAX_SEQ}, target {TARGET}"
    )

    draft_on = ImageDecodeOptions(target_size=TARGET)
    draft_off = ImageDecodeOptions(target_size=TARGET, draft=False)
    R = args.repeats

    # 1. images 128-512 px
    img = data / "images"
    log(f"\n## 1. images 128-512 px, batch 32, {args.batches} timed batches")

    def inp(make: Callable[[], Iterator], warm: int):
        return in_process(make, "images", 32, warm)

    py = args.peers_python
    loaders = {
        "bare loop (1 core)": inp(lambda: bare_loop(img, 32), 2),
        BARE_SAME: two_bare_loops(py, img, 2, "fpipe"),
        BARE_PIL: two_bare_loops(py, img, 2),
        "fpipe nw=0": inp(lambda: fpipe_iter(img, 32, 0, draft_on), 2),
        "fpipe nw=0 draft=False": inp(lambda: fpipe_iter(img, 32, 0, draft_off), 2),
        "fpipe nw=2": inp(lambda: fpipe_iter(img, 32, 2, draft_on), 6),
        "fpipe nw=2 draft=False": inp(lambda: fpipe_iter(img, 32, 2, draft_off), 6),
        FPIPE_THREADS: inp(lambda: fpipe_iter(img, 32, 2, draft_off, "thread"), 6),
        "webdataset nw=0": inp(lambda: wds_iter(img, 32, 0, "images"), 2),
        "webdataset nw=2": inp(lambda: wds_iter(img, 32, 2, "images"), 6),
    }
    if energon:
        loaders["energon nw=0"] = inp(lambda: energon_iter(img, 32, 0, "images"), 2)
        loaders["energon nw=2"] = inp(lambda: energon_iter(img, 32, 2, "images"), 6)
    loaders.update(peer_loaders(py, img, 6))
    small, small_cpu = measure(loaders, args.batches, R, log, lambda: warm_files(img))

    # 2. large images
    large = data / "large"
    log(f"\n## 2. images 800-1600 px, batch 32, {args.large_batches} timed batches")
    loaders = {
        "fpipe nw=2 (draft)": inp(lambda: fpipe_iter(large, 32, 2, draft_on), 4),
        "fpipe nw=2 draft=False": inp(lambda: fpipe_iter(large, 32, 2, draft_off), 4),
        FPIPE_THREADS: inp(lambda: fpipe_iter(large, 32, 2, draft_off, "thread"), 4),
        "webdataset nw=2": inp(lambda: wds_iter(large, 32, 2, "images"), 4),
        BARE_SAME: two_bare_loops(py, large, 1, "fpipe"),
        BARE_PIL: two_bare_loops(py, large, 1),
        **peer_loaders(py, large, 4),
    }
    big, big_cpu = measure(loaders, args.large_batches, R, log, lambda: warm_files(large))
    ps = psnr_section(large, 32)
    log(
        f"  PSNR reduced-scale vs full decode+resize: mean {ps['mean']:.2f} dB, "
        f"min {ps['min']:.2f} dB over {ps['images']} images; the shared transform vs "
        f"resize-whole-then-crop: mean {ps['resize_then_crop_mean']:.2f} dB"
    )
    ps_ffmpeg = peer_psnr(py, large, 32)
    if ps_ffmpeg:
        log(
            f"  PSNR SPDL FFmpeg decode vs the shared transform: mean {ps_ffmpeg['mean']:.2f} "
            f"dB, min {ps_ffmpeg['min']:.2f} dB over {ps_ffmpeg['images']} images"
        )

    # 3. text
    text = data / "text"
    log(
        f"\n## 3. text, {args.text:,} token-id samples, batch 256, nw=0, "
        f"at least {args.text_batches} timed batches and {args.text_seconds:g} s per row"
    )
    tmin = args.text_seconds
    loaders = {
        "fpipe nw=0": in_process(
            lambda: iter(fpipe_loader(text, 256, 0, None, task_encoder=TokenEncoder())),
            "text",
            256,
            2,
            tmin,
        ),
        "webdataset nw=0": in_process(lambda: wds_iter(text, 256, 0, "text"), "text", 256, 2, tmin),
    }
    if energon:
        loaders["energon nw=0"] = in_process(
            lambda: energon_iter(text, 256, 0, "text"), "text", 256, 2, tmin
        )
    txt, txt_cpu = measure(loaders, args.text_batches, R, log, lambda: warm_files(text))

    # 4. state
    log(f"\n## 4. state and restore (images set, batch 32), steps 10 and {args.far_step:,}")
    st = state_section(img, args.far_step, R, log)

    # ---- summary
    def ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 3) if a and b else None

    rst = st["restore"]
    restore_ratio = max(r["far_s"] / r["near_s"] for r in rst.values())
    nw0_vs_ordinary = rst[0]["far_s"] / st["ordinary_batch_nw0_s"]
    nw0_vs_ordinary_near = rst[0]["near_s"] / st["ordinary_batch_nw0_s"]
    state_bytes = st["bytes_near"][0]
    state_far = st["bytes_far"][0]
    result = {
        "nw0_vs_bare_loop": ratio(small.get("fpipe nw=0"), small.get("bare loop (1 core)")),
        "nw2_vs_webdataset": ratio(small.get("fpipe nw=2"), small.get("webdataset nw=2")),
        "nw2_vs_energon": ratio(small.get("fpipe nw=2"), small.get("energon nw=2")),
        "nw0_vs_webdataset": ratio(small.get("fpipe nw=0"), small.get("webdataset nw=0")),
        "nw0_vs_energon": ratio(small.get("fpipe nw=0"), small.get("energon nw=0")),
        "nw2_vs_webdataset_large": ratio(big.get("fpipe nw=2 (draft)"), big.get("webdataset nw=2")),
        "text_nw0_vs_webdataset": ratio(txt.get("fpipe nw=0"), txt.get("webdataset nw=0")),
        "text_nw0_vs_energon": ratio(txt.get("fpipe nw=0"), txt.get("energon nw=0")),
        **decoder_ratios(small, big, ratio),
        "psnr_spdl_ffmpeg_vs_shared": round(ps_ffmpeg["mean"], 2) if ps_ffmpeg else None,
        "psnr_resize_then_crop_vs_shared": round(ps["resize_then_crop_mean"], 2),
        "psnr_reduced_decode": round(ps["mean"], 2),
        "psnr_reduced_decode_min": round(ps["min"], 2),
        "state_bytes": state_bytes,
        "state_bytes_step_1e5": state_far,
        "state_bytes_by_workers": {"step_10": st["bytes_near"], "step_1e5": st["bytes_far"]},
        "state_identical_across_workers": st["identical_across_workers"],
        "restore_ratio_1e5_vs_10": round(restore_ratio, 3),
        "restore_nw0_vs_ordinary_batch": round(nw0_vs_ordinary, 3),
        "restore_nw0_step10_vs_ordinary_batch": round(nw0_vs_ordinary_near, 3),
        "restore_s": {nw: {k: round(v, 4) for k, v in r.items()} for nw, r in rst.items()},
        "ordinary_batch_nw0_s": round(st["ordinary_batch_nw0_s"], 4),
        "samples_per_s": {
            "images": {k: round(v, 1) for k, v in small.items()},
            "large": {k: round(v, 1) for k, v in big.items()},
            "text": {k: round(v, 1) for k, v in txt.items()},
        },
        # the same, per CPU-second of the loader's process and its workers: robust to other
        # load on the machine (wall rates are what the targets are about)
        "samples_per_cpu_s": {
            "images": {k: round(v, 1) for k, v in small_cpu.items()},
            "large": {k: round(v, 1) for k, v in big_cpu.items()},
            "text": {k: round(v, 1) for k, v in txt_cpu.items()},
        },
        "cpu_ratios": {
            **decoder_ratios(small_cpu, big_cpu, ratio),
            "nw0_vs_bare_loop": ratio(
                small_cpu.get("fpipe nw=0"), small_cpu.get("bare loop (1 core)")
            ),
            "nw2_vs_webdataset": ratio(
                small_cpu.get("fpipe nw=2"), small_cpu.get("webdataset nw=2")
            ),
            "nw2_vs_energon": ratio(small_cpu.get("fpipe nw=2"), small_cpu.get("energon nw=2")),
            "nw2_vs_webdataset_large": ratio(
                big_cpu.get("fpipe nw=2 (draft)"), big_cpu.get("webdataset nw=2")
            ),
            "text_nw0_vs_webdataset": ratio(
                txt_cpu.get("fpipe nw=0"), txt_cpu.get("webdataset nw=0")
            ),
        },
        "loadavg_start_end": [load_start, _loadavg()],
        "far_step": args.far_step,
        "torch_threads": torch.get_num_threads(),
        "repeats": R,
        "energon": energon,
        "cpus": os.cpu_count(),
        "wall_s": None,
    }
    targets = [
        ("nw0 >= 0.9x bare loop", result["nw0_vs_bare_loop"], 0.9, ">="),
        ("nw2 >= 1.0x webdataset", result["nw2_vs_webdataset"], 1.0, ">="),
        ("nw2 >= 1.0x energon", result["nw2_vs_energon"], 1.0, ">="),
        ("large nw2 >= 1.5x webdataset", result["nw2_vs_webdataset_large"], 1.5, ">="),
        ("text nw0 >= 6x webdataset", result["text_nw0_vs_webdataset"], 6.0, ">="),
        *(
            (f"{k} >= {t}", result[k], t, ">=")
            for k in PEER_KEYS
            if k in result
            for t in [1.3 if k.endswith("builtin_decode") else 1.1]
        ),
        *(
            (f"{k} >= {t}", result[k], t, ">=")
            for k, t in (
                ("nw2_vs_2x_bare_loop_same_decoder", 0.97),
                ("large_nw2_vs_2x_bare_loop_same_decoder", 0.97),
                ("threads2_vs_2x_bare_loop_same_decoder", 0.95),
            )
            if k in result
        ),
        ("PSNR reduced decode > 30 dB", result["psnr_reduced_decode"], 30.0, ">="),
        ("state <= 1 KB", max(state_bytes, state_far), 1024, "<="),
        ("restore 1e5 / 10 <= 1.5", result["restore_ratio_1e5_vs_10"], 1.5, "<="),
        ("nw0 restore <= 2x ordinary batch", result["restore_nw0_vs_ordinary_batch"], 2.0, "<="),
    ]
    log("\n## summary")
    log(f"{'section':<8} {'loader':<34} {'samples/s':>10} {'samples/cpu-s':>14}")
    for sec, vals, cpu in (
        ("images", small, small_cpu),
        ("large", big, big_cpu),
        ("text", txt, txt_cpu),
    ):
        for k, v in vals.items():
            log(f"{sec:<8} {k:<34} {v:>10.1f} {cpu[k]:>14.1f}")
    log(f"load average at start / end: {load_start} / {_loadavg()} ({os.cpu_count()} cpus)")
    log(
        f"\nstate bytes: step 10 {st['bytes_near']}, step {args.far_step:,}+1 {st['bytes_far']}"
        f" (identical across workers: {st['identical_across_workers']}); "
        f"plan advanced {args.far_step:,} steps in {st['plan_advance_s']:.1f} s"
    )
    log(
        "restore -> first batch: "
        + ", ".join(
            f"nw={nw}: {r['near_s'] * 1e3:.0f} / {r['far_s'] * 1e3:.0f} ms" for nw, r in rst.items()
        )
        + f" (step 10 / step {args.far_step:,}); ordinary batch nw=0 "
        f"{st['ordinary_batch_nw0_s'] * 1e3:.0f} ms"
    )
    log("")
    for name, val, thr, op in targets:
        ok = val is not None and (val >= thr if op == ">=" else val <= thr)
        shown = "n/a" if val is None else (f"{val:.3g}" if isinstance(val, float) else val)
        log(f"{'MET ' if ok else 'MISS'}  {name:<36} {shown}")
    result["targets_met"] = {
        name: (val is not None and (val >= thr if op == ">=" else val <= thr))
        for name, val, thr, op in targets
    }
    result["wall_s"] = round(time.perf_counter() - t_start, 1)
    log(f"total {result['wall_s']:.0f} s")
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
