"""Benchmark: fpipe on Parquet files read in place, against Hugging Face ``datasets`` and
against fpipe on the same data in tar shards.

Data: the 128-512 px image-caption set of ``bench/loader.py`` (``_loader_data.ensure_image_set``,
JPEGs in 8 tar shards), copied once into 8 Parquet files as the Hugging Face Hub stores them
(``data/train-0000k-of-00008.parquet`` written by ``datasets.Dataset.to_parquet``: an ``Image``
column of ``{bytes, path}`` structs and a ``text`` column, row groups of 100 rows, the size
``datasets`` uses for image datasets).

Rows (batch 32, uint8 ``[32, 3, 224, 224]`` + captions, 2 worker processes, the same full
decode and the same resize + center crop, ``_peers.resize_crop_np``, whose output is
bit-identical to fpipe's ``ImageDecodeOptions(target_size=224, draft=False)``). With
``datasets`` the user writes the decode, so its rows call fpipe's own decode function
(``_peers.decode_fpipe``: libjpeg-turbo through simplejpeg for the plain JPEGs fpipe decodes
so, Pillow for the others): the same decoder on both sides.

- ``fpipe parquet nw=2``: ``fpipe prepare`` on the Parquet folder, then ``get_train_dataset``
  (shuffle buffer 1000, ``max_samples_per_sequence`` 100 = the row-group size);
- ``fpipe tar nw=2``: the same on the tar shards;
- ``fpipe arrow nw=2``: the same on the Parquet rows written by ``Dataset.save_to_disk`` (8
  Arrow stream files, record batches of 100 rows, the size ``datasets`` writes for image
  datasets), prepared and read in place;
- ``hf datasets nw=2``: ``load_dataset("parquet", ...)`` (its Arrow cache built before timing),
  the image column read as bytes, ``.with_format("torch")``, a torch ``DataLoader`` with a
  seeded ``RandomSampler`` and 2 workers whose ``__getitem__`` decodes (fpipe's decode
  function) and resizes like the others;
- ``hf datasets nw=2 (Pillow)``: the same with ``Image.open`` (the previous release's row:
  ``hf_datasets_same_decoder_vs_pillow`` is what the decoder alone gives it);
- ``decode only nw=2``: the same ``DataLoader`` over the rows' image bytes and captions held in
  a Python list: the ``datasets`` row with the cost of reading a row taken out (what is left is
  the decode, resize and collate, and the ``DataLoader``'s per-sample fetch and its transfer
  of each batch to the main process). ``decode_only_vs_hf_datasets`` is how much faster the
  ``datasets`` loader could be if reading a row cost nothing; ``nw2_vs_decode_only`` compares
  fpipe (which reads the Parquet files) with that;
- ``decode only nw=0``: the same list decoded in this process (no worker): the decode,
  resize and collate alone. ``cpu_decode_alone_vs_hf_datasets``, its samples per CPU-second
  over the ``datasets`` loader's, is what a loader that spent nothing but this decode would
  reach: the bound of ``cpu_nw2_vs_hf_datasets``, and of the wall ratio where both loaders keep
  the cores busy.

Each rate is samples over the wall time of ``--batches`` batches (60: about 2,000 samples,
1.5-3 s per run on 2 quiet cores) after a warm-up (worker start and the batches decoded ahead
excluded), median of ``--repeats`` runs, the loaders interleaved within each repeat.
``prepare_parquet_samples_per_s``: ``fpipe prepare`` of the Parquet folder (one process:
index, image headers, columns), samples over seconds, median of the repeats
(``prepare_parquet_samples_per_cpu_s``: over the process's CPU seconds).

Usage::

    python bench/parquet.py            # --quick: smaller set, one repeat

The last line is one JSON object: ``nw2_vs_hf_datasets_same_decoder``,
``hf_datasets_same_decoder_vs_pillow``, ``nw2_vs_hf_datasets_same_decode`` (datasets on Pillow:
the previous release's key, kept for one release),
``parquet_vs_tar_samples_per_s``, ``arrow_vs_parquet_samples_per_s``,
``decode_only_vs_hf_datasets``, ``nw2_vs_decode_only``, ``cpu_decode_alone_vs_hf_datasets``,
``prepare_parquet_samples_per_s``,
``prepare_arrow_samples_per_s``, the rates, and the ratios per CPU-second (``cpu_*``: CPU
seconds of the process and its workers, which move less than wall time on a shared machine).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import sys
import tarfile
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line, warm_files  # noqa: E402  (also puts the repo root on sys.path)
from _loader_data import ensure_image_set  # noqa: E402
from _loader_runs import in_process, measure  # noqa: E402
from _peers import decode_fpipe, decode_pillow  # noqa: E402

import fpipe  # noqa: E402
from fpipe.decode.image import ImageDecodeOptions  # noqa: E402

TARGET = 224
SHUFFLE = 1000
MAX_SEQ = 100  # = the row-group size of the Parquet files
BATCH = 32
SEED = 1


def write_parquet(tar_root: Path, out: Path) -> int:
    """The tar shards' samples as Hub-layout Parquet files (one per shard); returns samples."""
    import datasets

    datasets.disable_progress_bars()
    params = out / "bench-params.json"
    shards = sorted(tar_root.glob("shard-*.tar"))
    want = {"from": [p.name for p in shards], "sizes": [p.stat().st_size for p in shards]}
    if params.exists() and json.loads(params.read_text()) == want:
        return int(json.loads((out / "count.json").read_text()))
    shutil.rmtree(out, ignore_errors=True)
    (out / "data").mkdir(parents=True)
    features = datasets.Features({"image": datasets.Image(), "text": datasets.Value("string")})
    total = 0
    for k, shard in enumerate(shards):
        rows: dict[str, dict] = {}
        with tarfile.open(shard) as tf:
            for m in tf:
                if not m.isfile():
                    continue
                key, ext = m.name.split(".", 1)
                data = tf.extractfile(m).read()  # type: ignore[union-attr]
                rows.setdefault(key, {})[ext] = data
        table = {
            "image": [{"bytes": r["jpg"], "path": f"{key}.jpg"} for key, r in rows.items()],
            "text": [r["txt"].decode() for r in rows.values()],
        }
        ds = datasets.Dataset.from_dict(table, features=features)
        name = f"train-{k:05d}-of-{len(shards):05d}.parquet"
        ds.to_parquet(str(out / "data" / name), batch_size=MAX_SEQ)
        total += len(rows)
    (out / "count.json").write_text(json.dumps(total))
    params.write_text(json.dumps(want))
    return total


def write_arrow(pq_root: Path, out: Path, cache: Path) -> None:
    """The Parquet rows as ``Dataset.save_to_disk`` writes them (8 Arrow stream files)."""
    import datasets

    datasets.disable_progress_bars()
    params = out / "bench-params.json"
    want = (pq_root / "bench-params.json").read_text()
    if params.exists() and params.read_text() == want:
        return
    shutil.rmtree(out, ignore_errors=True)
    files = sorted(str(p) for p in (pq_root / "data").glob("train-*.parquet"))
    hf = datasets.load_dataset("parquet", data_files={"train": files}, cache_dir=str(cache))
    hf["train"].save_to_disk(str(out), num_shards=len(files))
    params.write_text(want)


def prepare_rate(root: Path, samples: int) -> tuple[float, float]:
    """``fpipe prepare`` of the Parquet folder (index written anew): samples per second and
    samples per CPU-second of this process (the second moves less with other load)."""
    from fpipe.storage import prepare_dataset

    shutil.rmtree(root / ".fpipe", ignore_errors=True)
    c0, t0 = time.process_time(), time.perf_counter()
    report = prepare_dataset(root)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert report.num_samples == samples and not report.problems, report
    return samples / elapsed, samples / max(cpu, 1e-9)


def fpipe_iter(root: Path, nw: int) -> Iterator:
    ds = fpipe.get_train_dataset(
        root,
        batch_size=BATCH,
        shuffle_buffer_size=SHUFFLE,
        max_samples_per_sequence=MAX_SEQ,
        seed=SEED,
        image_decode=ImageDecodeOptions(target_size=TARGET, draft=False),
    )
    return iter(fpipe.get_loader(ds, num_workers=nw, prefetch_factor=2))


class BytesImages(torch.utils.data.Dataset):
    """``(image bytes, caption)`` rows held in a list, decoded (fpipe's decode function) and
    resized as the others."""

    def __init__(self, rows: list[tuple[bytes, str]]):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int):
        data, text = self.rows[int(i)]
        return torch.from_numpy(decode_fpipe(data)), text


def parquet_rows(root: Path) -> list[tuple[bytes, str]]:
    """Every row's image bytes and caption, read from the Parquet files into memory."""
    import pyarrow.parquet as pq

    rows: list[tuple[bytes, str]] = []
    for f in sorted((root / "data").glob("train-*.parquet")):
        t = pq.read_table(f, columns=["image", "text"])
        images, texts = t.column("image").to_pylist(), t.column("text").to_pylist()
        rows += [(im["bytes"], tx) for im, tx in zip(images, texts)]
    return rows


class HFImages(torch.utils.data.Dataset):
    """Rows of a ``datasets`` dataset (image bytes, text), decoded by ``decode`` (the user's
    decode function: fpipe's, ``_peers.decode_fpipe``, or Pillow's) and resized as the
    others."""

    def __init__(self, hf, decode=decode_fpipe):
        self.hf = hf
        self.decode = decode

    def __len__(self) -> int:
        return len(self.hf)

    def __getitem__(self, i: int):
        row = self.hf[int(i)]
        return torch.from_numpy(self.decode(row["image"]["bytes"])), row["text"]


def collate(samples: list) -> dict:
    return {"image": torch.stack([s[0] for s in samples]), "caption": [s[1] for s in samples]}


def hf_dataset(root: Path, cache: Path):
    import datasets

    datasets.disable_progress_bars()
    files = sorted(str(p) for p in (root / "data").glob("train-*.parquet"))
    hf = datasets.load_dataset("parquet", data_files={"train": files}, cache_dir=str(cache))
    train = hf["train"].cast_column("image", datasets.Image(decode=False))
    return train.with_format("torch")


def torch_iter(data: torch.utils.data.Dataset, nw: int) -> Iterator:
    """Batches of a torch ``DataLoader`` over ``data`` (seeded random order), endlessly."""
    gen = torch.Generator()
    gen.manual_seed(SEED)
    loader = torch.utils.data.DataLoader(
        data,
        batch_size=BATCH,
        sampler=torch.utils.data.RandomSampler(data, generator=gen),
        num_workers=nw,
        collate_fn=collate,
        prefetch_factor=2 if nw else None,
        persistent_workers=nw > 0,
        drop_last=True,
    )

    def forever():
        while True:
            yield from loader

    return forever()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "fpipe-bench-loader"))
    ap.add_argument("--images", type=int, default=3200, help="samples (128-512 px JPEGs)")
    ap.add_argument("--batches", type=int, default=60, help="timed batches per run")
    ap.add_argument("--repeats", type=int, default=None, help="median of N (3; --quick: 1)")
    ap.add_argument("--torch-threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="small set, 1 repeat (smoke run)")
    args = ap.parse_args(argv)
    if args.quick:
        args.images, args.batches = min(args.images, 640), min(args.batches, 8)
    args.repeats = args.repeats or (1 if args.quick else 3)
    torch.set_num_threads(args.torch_threads)
    warnings.filterwarnings("ignore", message=".*worker processes in total.*")

    def log(msg: str) -> None:
        print(msg, flush=True)

    data = Path(args.data)
    log(f"# fpipe Parquet benchmark\n{machine_line()}, torch {torch.__version__}")
    with contextlib.redirect_stdout(io.StringIO()):
        info = ensure_image_set(
            data / "images", samples=args.images, shards=8, lo=128, hi=512,
            pool=min(args.images, 400),
        )  # fmt: skip
    tar = data / "images"
    pq_root = data / "images-parquet"
    n = write_parquet(tar, pq_root)
    log(f"images: {json.dumps(info)}; {n} rows in {pq_root}/data (row groups of {MAX_SEQ})")
    arrow_root = data / "images-arrow"
    with contextlib.redirect_stderr(io.StringIO()):
        write_arrow(pq_root, arrow_root, data / "hf-cache")
    runs = [prepare_rate(pq_root, n) for _ in range(args.repeats)]
    prepare = statistics.median(r[0] for r in runs)
    prepare_cpu = statistics.median(r[1] for r in runs)
    log(
        f"fpipe prepare (Parquet, one process): {prepare:.0f} samples/s, "
        f"{prepare_cpu:.0f} samples/cpu-s"
    )
    prepare_arrow = statistics.median(prepare_rate(arrow_root, n)[0] for _ in range(args.repeats))
    log(f"fpipe prepare (save_to_disk Arrow, one process): {prepare_arrow:.0f} samples/s")
    with contextlib.redirect_stderr(io.StringIO()):
        hf = hf_dataset(pq_root, data / "hf-cache")
    rows = parquet_rows(pq_root)
    warm = 4 if args.quick else 6
    loaders = {
        "fpipe parquet nw=2": in_process(lambda: fpipe_iter(pq_root, 2), "images", BATCH, warm),
        "fpipe tar nw=2": in_process(lambda: fpipe_iter(tar, 2), "images", BATCH, warm),
        "fpipe arrow nw=2": in_process(lambda: fpipe_iter(arrow_root, 2), "images", BATCH, warm),
        "hf datasets nw=2": in_process(lambda: torch_iter(HFImages(hf), 2), "images", BATCH, warm),
        "hf datasets nw=2 (Pillow)": in_process(
            lambda: torch_iter(HFImages(hf, decode_pillow), 2), "images", BATCH, warm
        ),
        "decode only nw=2": in_process(
            lambda: torch_iter(BytesImages(rows), 2), "images", BATCH, warm
        ),
        # the decode, resize and collate alone, in this process: no row read, no process hop
        "decode only nw=0": in_process(
            lambda: torch_iter(BytesImages(rows), 0), "images", BATCH, warm
        ),
    }
    log(f"\n## batch {BATCH}, {args.batches} timed batches, {args.repeats} repeats")
    # each run finds the files in the page cache (see _common.warm_files)
    roots = (pq_root, tar, arrow_root, data / "hf-cache")
    wall, cpu = measure(loaders, args.batches, args.repeats, log, lambda: warm_files(*roots))

    def ratio(a, b):
        return None if not a or not b else round(a / b, 3)

    ours, hf_rate = wall.get("fpipe parquet nw=2"), wall.get("hf datasets nw=2")
    alone = wall.get("decode only nw=2")
    out = {
        "nw2_vs_hf_datasets_same_decoder": ratio(ours, hf_rate),
        "hf_datasets_same_decoder_vs_pillow": ratio(hf_rate, wall.get("hf datasets nw=2 (Pillow)")),
        # the previous release's key (datasets decoding with Pillow), kept for one release
        "nw2_vs_hf_datasets_same_decode": ratio(ours, wall.get("hf datasets nw=2 (Pillow)")),
        "parquet_vs_tar_samples_per_s": ratio(ours, wall.get("fpipe tar nw=2")),
        "arrow_vs_parquet_samples_per_s": ratio(wall.get("fpipe arrow nw=2"), ours),
        "decode_only_vs_hf_datasets": ratio(alone, hf_rate),
        "nw2_vs_decode_only": ratio(ours, alone),
        "prepare_parquet_samples_per_s": round(prepare, 1),
        "prepare_arrow_samples_per_s": round(prepare_arrow, 1),
        "prepare_parquet_samples_per_cpu_s": round(prepare_cpu, 1),
        "samples_per_s": {k: round(v, 1) for k, v in wall.items()},
        "samples_per_cpu_s": {k: round(v, 1) for k, v in cpu.items()},
        "cpu_nw2_vs_hf_datasets": ratio(cpu.get("fpipe parquet nw=2"), cpu.get("hf datasets nw=2")),
        "cpu_parquet_vs_tar": ratio(cpu.get("fpipe parquet nw=2"), cpu.get("fpipe tar nw=2")),
        "cpu_decode_only_vs_hf_datasets": ratio(
            cpu.get("decode only nw=2"), cpu.get("hf datasets nw=2")
        ),
        # what a loader whose only cost is this decode would reach per CPU-second: the bound
        # of cpu_nw2_vs_hf_datasets (and, with both loaders keeping 2 cores busy, of the wall)
        "cpu_decode_alone_vs_hf_datasets": ratio(
            cpu.get("decode only nw=0"), cpu.get("hf datasets nw=2")
        ),
        "images": args.images,
        "batches": args.batches,
        "repeats": args.repeats,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
