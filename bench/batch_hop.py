"""Benchmark: moving a collated batch from a DataLoader worker process to the main process.

With fpipe's own batch hooks, collate builds a batch in shared memory inside a worker
(``fpipe.encode.batch_memory``), so torch's pickler sends a handle; the old way built it in
ordinary memory and the pickler copied it into a fresh shared segment. Both ways run in the same
process, interleaved; the old way is the new code with ``batch_memory.collate_into_shared``
patched to False (workers fork, so they inherit the patch).

1. **Worker side** (one process, uint8 ``[32, 3, 224, 224]`` = 4.8 MB): collate + moving the
   batch into shared memory as the pickler does (``share_memory_()``, the same call), old vs new;
   stacking into a shared buffer already mapped and touched (what reusing buffers across batches
   could save at most); and a hook that replaces the batch (``float() / 255``) after collate:
   old, and what collating into shared memory regardless of the hooks would cost.
2. **Hop** (synthetic): a torch DataLoader, 2 workers, each batch collated from pre-made
   tensors (no decode), so the hop is most of the work; the main process copies each batch
   once into a preallocated buffer (as a host-to-device copy would read it). Three ways: old,
   new (a fresh shared segment per batch), and slots (``fpipe.encode.batch_slots``: collated
   into a slot the worker reuses, copied out in the main process as it arrives).
3. **fpipe** on the quick image set of ``bench/loader.py`` (640 JPEGs 128-512 px, decode +
   resize + crop to 224, ``draft=False``, batch 32): ``get_loader(num_workers=2)`` old, new
   with slots turned off (``batch_slots.new_config`` patched to None), and as it ships (slots).

Rates are samples per wall second and per CPU-second of the main process and its workers
(``_loader_runs.measure``: medians of interleaved repeats).

Usage: ``python bench/batch_hop.py [--repeats 5] [--batches 40] [--image-batches 16]``.
The last line of output is one JSON object (``hop_new_vs_old``, ``fpipe_new_vs_old``,
``hop_slots_vs_new``, ``fpipe_slots_vs_new``, ...).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import numpy as np
import torch
import torch.utils.data

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line, median_time  # noqa: E402  (also puts the repo root on sys.path)
from _loader_data import ensure_image_set  # noqa: E402
from _loader_runs import in_process, measure  # noqa: E402

import fpipe  # noqa: E402
from fpipe.decode.image import ImageDecodeOptions  # noqa: E402
from fpipe.encode import batch_memory, batch_slots  # noqa: E402
from fpipe.encode._collate import collate_samples  # noqa: E402

BATCH = 32
SHAPE = (3, 224, 224)


def _old_way():
    """The collate of before: ordinary memory in workers too."""
    return mock.patch.object(batch_memory, "collate_into_shared", lambda: False)


def _new_way():
    """Collate into shared memory, as in a worker with fpipe's own batch hooks."""
    return mock.patch.object(batch_memory, "collate_into_shared", lambda: True)


def _images(n: int, seed: int = 0) -> list[torch.Tensor]:
    rng = np.random.default_rng(seed)
    return [torch.from_numpy(rng.integers(0, 256, SHAPE, dtype=np.uint8)) for _ in range(n)]


def _samples(pool: list[torch.Tensor], i: int) -> list[dict]:
    return [{"image": pool[(i + k) % len(pool)], "caption": "a photo"} for k in range(BATCH)]


def worker_side(repeats: int) -> dict[str, float]:
    """Milliseconds per batch for collate + share: old vs new, into a reused buffer, and with a
    hook that replaces the batch."""
    pool = _images(BATCH)
    images = [s["image"] for s in _samples(pool, 0)]
    arrays = [t.numpy() for t in images]
    reused = batch_memory.shared_empty((BATCH, *SHAPE), torch.uint8)
    reused.zero_()

    def send(way, hook=lambda x: x):
        with way():
            hook(collate_samples([{"image": t} for t in images])["image"]).share_memory_()

    def into_reused():
        np.stack(arrays, out=reused.numpy())

    def normalize(x):
        return x.float() / 255

    ways = {
        "old_ms": lambda: send(_old_way),
        "new_ms": lambda: send(_new_way),
        "reused_buffer_ms": into_reused,
        "float_hook_old_ms": lambda: send(_old_way, normalize),
        "float_hook_collated_into_shared_ms": lambda: send(_new_way, normalize),
    }
    for fn in ways.values():  # warm-up: the allocator's first large blocks
        fn()
    # rounds of 5 calls each way, interleaved so load on the machine hits the ways alike
    rounds = [{k: median_time(fn, 5) for k, fn in ways.items()} for _ in range(4 * repeats)]
    return {k: round(statistics.median(r[k] for r in rounds) * 1e3, 3) for k in ways}


class _Synthetic(torch.utils.data.Dataset):
    """Batch ``i``: 32 pre-made images (a pool of 64) collated by fpipe; with ``slots``, into
    the worker's reused slots (as fpipe's loader sets them up)."""

    def __init__(self, slots: batch_slots.SlotConfig | None = None):
        self.pool, self.slots = _images(64, seed=1), slots

    def __len__(self):
        return 1 << 30

    def __getitem__(self, i: int) -> dict:
        batch_slots.begin_task(self.slots)
        with batch_memory.sent_as_collated():  # as the materializer does with its own hooks
            return collate_samples(_samples(self.pool, i))


def _consumed(it: Iterator) -> Iterator:
    """Each batch read once into one preallocated buffer (what a copy to the GPU does)."""
    buf = torch.empty((BATCH, *SHAPE), dtype=torch.uint8)
    for batch in it:
        buf.copy_(batch["image"])
        yield batch


def _started(it: Iterator, old: bool, slots: bool = True) -> Iterator:
    """``it`` with its workers forked under the old way's patch (or not), and with fpipe's
    slots turned off (or not); the first ``next`` of a loader starts torch's iterator, which
    forks the workers (fpipe's loader sets its slots up then)."""
    no_slots = mock.patch.object(batch_slots, "new_config", lambda n: None)
    with (
        _old_way() if old else contextlib.nullcontext(),
        contextlib.nullcontext() if slots else no_slots,
    ):
        first = next(it)
    yield first
    yield from it


def hop_iter(old: bool, slots: bool = False) -> Iterator:
    config = batch_slots.new_config(4) if slots else None
    loader = torch.utils.data.DataLoader(
        _Synthetic(config),
        batch_size=None,
        sampler=itertools.count(),
        num_workers=2,
        prefetch_factor=2,
        collate_fn=_identity,
    )
    it = _consumed(_started(iter(loader), old))
    if config is None:
        return it
    return _detaching(it, config)


def _detaching(it: Iterator, config: batch_slots.SlotConfig) -> Iterator:
    try:
        yield from it
    finally:
        batch_slots.detach(config)


def _identity(x):
    return x


def fpipe_iter(root: Path, old: bool, slots: bool = True) -> Iterator:
    ds = fpipe.get_train_dataset(
        root,
        batch_size=BATCH,
        shuffle_buffer_size=1000,
        max_samples_per_sequence=100,
        seed=1,
        image_decode=ImageDecodeOptions(target_size=224, draft=False),
    )
    return _started(iter(fpipe.get_loader(ds, num_workers=2, prefetch_factor=2)), old, slots)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "fpipe-bench-loader"))
    ap.add_argument("--repeats", type=int, default=5, help="median of N interleaved runs")
    ap.add_argument("--batches", type=int, default=40, help="timed batches, synthetic hop")
    ap.add_argument("--image-batches", type=int, default=16, help="timed batches, image set")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    t_start = time.perf_counter()
    log = lambda msg: print(msg, flush=True)  # noqa: E731
    log(f"# batch hop benchmark\n{machine_line()}, torch {torch.__version__}")

    log("\n## 1. worker side: collate + share one uint8 [32, 3, 224, 224] batch")
    side = worker_side(args.repeats)
    log(f"  {json.dumps(side)}")

    log(f"\n## 2. hop: synthetic batches, 2 workers, {args.batches} timed batches")
    hop, hop_cpu = measure(
        {
            "old (copy into a fresh segment)": in_process(lambda: hop_iter(True), "images", 32, 4),
            "new (collate into shared memory)": in_process(
                lambda: hop_iter(False), "images", 32, 4
            ),
            "slots (collate into a reused slot, copied out)": in_process(
                lambda: hop_iter(False, slots=True), "images", 32, 4
            ),
        },
        args.batches,
        args.repeats,
        log,
    )

    root = Path(args.data) / "images"
    ensure_image_set(root, samples=640, shards=8, lo=128, hi=512, pool=400)
    log(f"\n## 3. fpipe nw=2 draft=False, quick image set, {args.image_batches} timed batches")
    img, img_cpu = measure(
        {
            "fpipe old": in_process(lambda: fpipe_iter(root, True, False), "images", 32, 4),
            "fpipe new": in_process(lambda: fpipe_iter(root, False, False), "images", 32, 4),
            "fpipe slots": in_process(lambda: fpipe_iter(root, False), "images", 32, 4),
        },
        args.image_batches,
        args.repeats,
        log,
    )

    def ratio(rates: dict, i: int = 1, j: int = 0) -> float:
        values = list(rates.values())
        return round(values[i] / values[j], 3)

    result = {
        "worker_side_ms": side,
        "hop_samples_per_s": {k: round(v, 1) for k, v in hop.items()},
        "hop_samples_per_cpu_s": {k: round(v, 1) for k, v in hop_cpu.items()},
        "hop_new_vs_old": ratio(hop),
        "hop_new_vs_old_cpu": ratio(hop_cpu),
        "fpipe_samples_per_s": {k: round(v, 1) for k, v in img.items()},
        "fpipe_samples_per_cpu_s": {k: round(v, 1) for k, v in img_cpu.items()},
        "fpipe_new_vs_old": ratio(img),
        "fpipe_new_vs_old_cpu": ratio(img_cpu),
        "hop_slots_vs_new": ratio(hop, 2, 1),
        "hop_slots_vs_new_cpu": ratio(hop_cpu, 2, 1),
        "fpipe_slots_vs_new": ratio(img, 2, 1),
        "fpipe_slots_vs_new_cpu": ratio(img_cpu, 2, 1),
        "repeats": args.repeats,
        "loadavg": [round(v, 2) for v in os.getloadavg()],
        "wall_s": round(time.perf_counter() - t_start, 1),
    }
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
