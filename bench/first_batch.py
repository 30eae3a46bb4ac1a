"""Benchmark: time to the first batch, fpipe against Grain, SPDL, WebDataset and Energon.

What a user waits for before training starts: from the start of the loader's construction
(``get_train_dataset`` + ``get_loader`` and their peers' equivalents) in a fresh process to the
first batch in the consumer's hands, worker start included. Two sets, written once under
``--data``:

- **single**: 10^6 image-caption samples in 1,000 shards (JPEGs of 16-24 px, ~0.7 KB);
- **blend**: 100 datasets of 10^4 such samples (10 shards each), mixed with equal weights (a
  ``metadataset.yaml`` for fpipe and Energon; ``MapDataset.mix`` for Grain, SPDL's
  ``MergeIterator``, WebDataset's ``RandomMix``).

Each loader decodes with fpipe's own public decode function (``_peers.decode_fpipe``:
16 x 16 center crop), batch 32, with 2 and 8 workers (threads or processes, each loader's
idiom; fpipe in both modes, the faster counts; Grain's processes with ``--loaders``). Every
run is a fresh process (``--one``) that imports torch and the loader's library first (a
training process has them loaded; the import is printed apart), then times construction to
first batch; its CPU time (process and workers) is printed beside the wall time. Runs are
interleaved, median of ``--repeats`` (a peer whose first run took over 3x the fastest peer's
is run once), after every index file was read once (page cache).

Grain and SPDL read members through an index of ``(shard, offset, size)`` that
``_peers.cached_tar_index`` writes beside the shards once (their "prepare", as fpipe and
Energon read their prepared index); shuffling is each loader's idiom (fpipe and Energon:
``shuffle_buffer_size=1000, max_samples_per_sequence=100``; WebDataset: resampled shards and
``shuffle(1000)``; Grain and SPDL: a global permutation).

Also printed: the bytes fpipe pickles for each worker (what a ``spawn`` or ``forkserver``
worker receives; a ``fork`` worker inherits it), and how many datasets a worker opens for its
first recipe.

Usage::

    python bench/first_batch.py            # ~3 min (the first run writes 5.6 GB, ~25 min)
    python bench/first_batch.py --quick    # 2 workers, one repeat

The last line is one JSON object; ``first_batch_1e6_vs_fastest_peer`` is fpipe's time over the
fastest peer's, the worst of the 10^6-sample configurations.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import machine_line, warm_files  # noqa: E402  (also puts the repo root on sys.path)
from _peers import (  # noqa: E402
    SEED,
    ArrayTarSource,
    Decode,
    cached_tar_index,
    collate_np,
    cpu_seconds,
    grain_batches,
    shuffled_forever,
    spdl_batches,
)

BS = 32
SIZE = 16  #: decoded side (center crop of the 16-24 px JPEGs)
SHUFFLE = 1000
MAX_SEQ = 100
BLEND_N = 100
LOADERS = (
    "fpipe-processes",
    "fpipe-threads",
    "grain-threads",
    "grain-processes",
    "spdl",
    "webdataset",
    "energon",
)
#: the default rows: Grain's processes (``mp_prefetch``, spawned workers) take seconds more
#: than its threads here, so they are left out unless ``--loaders`` names them
DEFAULT_LOADERS = tuple(ld for ld in LOADERS if ld != "grain-processes")

# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------


def ensure_sets(data: Path, samples: int, blend_n: int, per_blend: int) -> dict[str, Any]:
    """The single set and the blend's datasets and ``blend.yaml`` (reused when present)."""
    from _loader_data import ensure_image_set

    from fpipe.storage.config.yaml_record import RECORD_NAME, write_yaml_record

    t0 = time.perf_counter()
    kw = dict(lo=16, hi=24, pool=256, quality=80)

    def ensure(root: Path, n: int, seed: int) -> None:
        if not _ready(root, dict(kind="images", samples=n, shards=n // 1000, **kw, seed=seed)):
            ensure_image_set(root, samples=n, shards=n // 1000, seed=seed, **kw)
        elif not _fpipe_index_current(root, n // 1000):  # fpipe's index alone, written again
            from fpipe.storage import prepare_dataset

            fields = {"image": "jpg", "caption": "txt"}
            prepare_dataset(root, fields=fields, sample_type="CaptioningSample", split="1,0,0")
        elif not (root / ".fpipe" / RECORD_NAME).exists():  # indexed by an fpipe without it
            write_yaml_record(root / ".fpipe")  # what this fpipe's prepare writes beside them
        cached_tar_index(root)

    with contextlib.redirect_stdout(io.StringIO()):  # Energon's prepare prints progress
        ensure(data / "single", samples, 0)
        blend = data / "blend"
        for i in range(blend_n):
            ensure(blend / f"ds{i:03d}", per_blend, i)
    lines = ["__module__: megatron.energon", "__class__: MetadatasetV2", "splits:", "  train:"]
    lines += ["    blend:"]
    lines += [f"      - weight: 1\n        path: ds{i:03d}" for i in range(blend_n)]
    text = "\n".join(lines) + "\n"
    yml = blend / "blend.yaml"
    if not yml.exists() or yml.read_text() != text:
        yml.write_text(text)
    info = data / "single" / ".fpipe" / "info.yaml"
    version = next(ln for ln in info.read_text().splitlines() if ln.startswith("version"))
    return {"index": version.replace(": ", " "), "setup_s": round(time.perf_counter() - t0, 1)}


def _fpipe_index_current(root: Path, shards: int) -> bool:
    """fpipe's index is what this fpipe's prepare writes (its format, its shard list form): an
    older one is still read, by other code, and the timing would not be this fpipe's."""
    import yaml

    from fpipe.storage.read.tar.shard_table import SHARD_ARRAYS_FROM

    info = yaml.safe_load((root / ".fpipe" / "info.yaml").read_text())
    arrays = shards >= SHARD_ARRAYS_FROM  # the flat layout, shard list as arrays (format 3)
    return info.get("version") == (3 if arrays else 2) and ("num_shards" in info) == arrays


def _ready(root: Path, params: dict) -> bool:
    """The set was written with these parameters and prepared by fpipe and Energon (an fpipe
    index of another format is written again alone: :func:`_fpipe_index_current`)."""
    f = root / "bench-params.json"
    if not f.exists() or {**json.loads(f.read_text()), "version": 0} != {**params, "version": 0}:
        return False
    return (root / ".fpipe" / "info.yaml").exists() and (root / ".nv-meta").is_dir()


def blend_roots(yml: Path) -> list[Path]:
    import yaml

    entries = yaml.safe_load(yml.read_text())["splits"]["train"]["blend"]
    return [yml.parent / e["path"] for e in entries]


# --------------------------------------------------------------------------------------------
# Loaders (each: target path, workers -> an iterator of batches); run in a fresh process
# --------------------------------------------------------------------------------------------


def fpipe_dataset(path: Path):
    """fpipe's dataset of ``path`` as every fpipe row plans it."""
    import fpipe
    from fpipe.decode.image import ImageDecodeOptions

    return fpipe.get_train_dataset(
        path,
        batch_size=BS,
        shuffle_buffer_size=SHUFFLE,
        max_samples_per_sequence=MAX_SEQ,
        seed=SEED,
        image_decode=ImageDecodeOptions(target_size=SIZE, draft=False),
    )


def fpipe_first(path: Path, nw: int, mode: str) -> Iterator:
    import fpipe

    return iter(fpipe.get_loader(fpipe_dataset(path), num_workers=nw, worker_mode=mode))


def grain_first(path: Path, nw: int, procs: bool) -> Iterator:
    import grain

    def source(root: Path, seed: int):
        return grain.MapDataset.source(ArrayTarSource(str(root))).shuffle(seed=seed).repeat()

    if path.suffix == ".yaml":
        parts = [source(r, SEED + i) for i, r in enumerate(blend_roots(path))]
        ds = grain.MapDataset.mix(parts, weights=[1.0] * len(parts))
    else:
        ds = source(path, SEED)
    return grain_batches(ds.map(Decode("fpipe", SIZE)), BS, nw, procs)


def spdl_first(path: Path, nw: int) -> Iterator:
    def samples(root: Path, seed: int) -> Iterator:
        src = ArrayTarSource(str(root))
        rng = np.random.default_rng(seed)
        while True:
            for i in rng.permutation(len(src)).tolist():
                yield src[i]

    if path.suffix == ".yaml":
        from spdl.source.utils import MergeIterator

        roots = blend_roots(path)
        gens = [samples(r, SEED + i) for i, r in enumerate(roots)]
        stream = iter(MergeIterator(gens, weights=[1.0] * len(gens), seed=SEED))
    else:
        src = ArrayTarSource(str(path))
        stream = (src[i] for i in shuffled_forever(len(src)))
    return spdl_batches(stream, Decode("fpipe", SIZE), BS, nw)


def _decode_pair(sample: tuple) -> tuple:
    return Decode("fpipe", SIZE)((sample[0], sample[1].decode()))


def webdataset_first(path: Path, nw: int) -> Iterator:
    import webdataset as wds

    def shards(root: Path) -> list[str]:
        return [str(p) for p in sorted(root.glob("*.tar"))]

    if path.suffix == ".yaml":
        parts = [
            wds.WebDataset(shards(r), resampled=True, shardshuffle=False, seed=SEED + i)
            for i, r in enumerate(blend_roots(path))
        ]
        ds = wds.DataPipeline(
            wds.RandomMix(parts, probs=[1.0] * len(parts)),
            wds.shuffle(SHUFFLE),
            wds.to_tuple("jpg", "txt"),
            wds.map(_decode_pair),
            wds.batched(BS, collation_fn=collate_np),
        )
    else:
        ds = wds.WebDataset(shards(path), resampled=True, shardshuffle=False, seed=SEED)
        ds = ds.shuffle(SHUFFLE).to_tuple("jpg", "txt").map(_decode_pair)
        ds = ds.batched(BS, collation_fn=collate_np)
    return iter(wds.WebLoader(ds, batch_size=None, num_workers=nw, prefetch_factor=2))


def _energon_encoder():
    from megatron.energon import DefaultTaskEncoder, stateless

    class TinyImageEncoder(DefaultTaskEncoder):
        decoder = None  # raw bytes: fpipe's decode function, as the others

        @stateless
        def encode_sample(self, sample):
            return Decode("fpipe", SIZE)((sample.image, sample.caption))

        def batch(self, samples):
            return collate_np(samples)

    return TinyImageEncoder()


def energon_first(path: Path, nw: int) -> Iterator:
    import warnings

    from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset

    wc = WorkerConfig(rank=0, world_size=1, num_workers=nw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = get_train_dataset(
            str(path),
            split_part="train",
            worker_config=wc,
            batch_size=BS,
            batch_drop_last=True,
            shuffle_buffer_size=SHUFFLE,
            max_samples_per_sequence=MAX_SEQ,
            task_encoder=_energon_encoder(),
        )
        return iter(get_savable_loader(ds))


FIRST: dict[str, Callable[[Path, int], Iterator]] = {
    "fpipe-processes": lambda p, nw: fpipe_first(p, nw, "process"),
    "fpipe-threads": lambda p, nw: fpipe_first(p, nw, "thread"),
    "grain-threads": lambda p, nw: grain_first(p, nw, False),
    "grain-processes": lambda p, nw: grain_first(p, nw, True),
    "spdl": spdl_first,
    "webdataset": webdataset_first,
    "energon": energon_first,
}
#: what each loader imports before its clock starts (a training process has it loaded):
#: modules, ``module:name`` for a name taken from it (fpipe loads its names on first use)
LIBRARY = {
    "fpipe-processes": "fpipe:get_train_dataset, fpipe:get_loader",
    "fpipe-threads": "fpipe:get_train_dataset, fpipe:get_loader",
    "grain-threads": "grain",
    "grain-processes": "grain",
    "spdl": "spdl.pipeline, spdl.source.utils",
    "webdataset": "webdataset",
    "energon": "megatron.energon",
}


def run_one(loader: str, path: Path, nw: int) -> dict[str, float]:
    """In a fresh process: import, then time construction -> first batch."""
    import importlib

    t0 = time.perf_counter()
    with contextlib.suppress(ImportError):
        import torch  # noqa: F401
    torch_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for spec in LIBRARY[loader].split(", "):
        mod, _, name = spec.partition(":")
        m = importlib.import_module(mod)
        if name:
            getattr(m, name)
    import_s = time.perf_counter() - t0
    c0 = cpu_seconds()
    t0 = time.perf_counter()
    it = FIRST[loader](path, nw)
    batch = next(it)
    dt = time.perf_counter() - t0
    dc = cpu_seconds() - c0
    img = batch["image"] if isinstance(batch, dict) else batch.image
    cap = batch["caption"] if isinstance(batch, dict) else batch.caption
    assert tuple(img.shape) == (BS, 3, SIZE, SIZE), img.shape
    assert len(cap) == BS
    return {"first_batch_s": dt, "cpu_s": dc, "import_s": import_s, "torch_import_s": torch_s}


def fresh_run(python: str, loader: str, path: Path, nw: int, timeout: float) -> dict:
    cmd = [python, __file__, "--one", loader, "--path", str(path), "--workers", str(nw)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        raise RuntimeError(f"rc={p.returncode}: {p.stderr.strip().splitlines()[-3:]}")
    return json.loads(lines[-1])


def _index_file(f: Path) -> bool:
    """An index file (fpipe's, Energon's, the peers'), not a shard: what is read once before
    the runs, so that the first run of each loader finds them in the page cache, as the later
    ones do."""
    return not f.name.endswith(".tar") and ".tar." not in f.name


def _out_of_the_race(runs: dict, t: str, nw: int, ld: str) -> bool:
    """A peer whose first run took over 3x the fastest peer's cannot be the fastest: it is not
    run again (its one figure is printed), which keeps a full run short."""
    if ld.startswith("fpipe"):
        return False
    first = {k[2]: v[0]["first_batch_s"] for k, v in runs.items() if k[:2] == (t, nw) and v}
    peers = [v for k, v in first.items() if not k.startswith("fpipe")]
    return ld in first and bool(peers) and first[ld] > 3 * min(peers)


# --------------------------------------------------------------------------------------------
# What a worker receives and opens
# --------------------------------------------------------------------------------------------


def worker_payload(path: Path) -> dict[str, int]:
    """Bytes of fpipe's per-worker dataset object as pickled for a spawn/forkserver worker,
    and the index files the worker's copy opens to materialize the first recipe."""
    import pickle

    from fpipe.loader._iteration import RecipeDataset

    ds = fpipe_dataset(path)
    payload = pickle.dumps(RecipeDataset(ds.materializer))
    mat = pickle.loads(payload).materializer
    _, recipes = ds.plan.next(ds.plan.init(), 1)
    mat(recipes[0])
    return {"payload_bytes": len(payload), "datasets_opened": len(mat._datasets)}


# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    tmp = tempfile.gettempdir()
    ap.add_argument("--data", default=os.path.join(tmp, "fpipe-bench-first-batch"))
    ap.add_argument("--repeats", type=int, default=None, help="median of N (3; --quick: 1)")
    ap.add_argument("--workers", default=None, help="comma-separated (2,8; --quick: 2)")
    ap.add_argument("--loaders", default=",".join(DEFAULT_LOADERS), help="of " + ",".join(LOADERS))
    ap.add_argument("--no-blend", action="store_true")
    ap.add_argument("--python", default=sys.executable, help="Python of the fresh processes")
    ap.add_argument("--quick", action="store_true", help="2 workers, one repeat")
    ap.add_argument("--one", choices=LOADERS, help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:  # a fresh process: one timed run
        print(json.dumps(run_one(args.one, Path(args.path), int(args.workers))), flush=True)
        sys.stdout.flush()
        os._exit(0)  # do not wait on the loader's threads and worker processes
    repeats = args.repeats or (1 if args.quick else 3)
    workers = [int(w) for w in (args.workers or ("2" if args.quick else "2,8")).split(",")]
    loaders = args.loaders.split(",")
    t_start = time.perf_counter()

    def log(msg: str) -> None:
        print(msg, flush=True)

    data = Path(args.data)
    log(f"# time to the first batch\n{machine_line()}")
    info = ensure_sets(data, 10**6, BLEND_N, 10**4)
    log(f"data under {data}: {json.dumps(info)}")
    targets = {"1e6": data / "single"}
    if not args.no_blend:
        targets["blend100"] = data / "blend" / "blend.yaml"
    payload = {name: worker_payload(p) for name, p in targets.items()}
    for name, v in payload.items():
        log(
            f"  fpipe worker payload, {name}: {v['payload_bytes']:,} bytes pickled; "
            f"datasets opened for the first recipe: {v['datasets_opened']}"
        )
    configs = [(t, nw) for t in targets for nw in workers]
    runs: dict[tuple, list[dict]] = {(t, nw, ld): [] for t, nw in configs for ld in loaders}
    failed: dict[tuple, str] = {}
    warm_files(data, keep=_index_file)
    for r in range(1, repeats + 1):
        for t, nw in configs:
            for ld in loaders:
                key = (t, nw, ld)
                if key in failed or (r > 1 and _out_of_the_race(runs, t, nw, ld)):
                    continue
                try:
                    res = fresh_run(args.python, ld, targets[t], nw, 300)
                except Exception as e:  # a peer that fails is reported, not hidden
                    failed[key] = f"{type(e).__name__}: {e}"
                    log(f"  {t} nw={nw} {ld}: FAILED {failed[key]}")
                    continue
                runs[key].append(res)
                log(
                    f"  [{r}/{repeats}] {t:<8} nw={nw} {ld:<16} "
                    f"{res['first_batch_s'] * 1e3:8.0f} ms  cpu {res['cpu_s'] * 1e3:7.0f} ms"
                    f"  (import {res['import_s'] * 1e3:.0f} ms)"
                )

    def med(key: tuple, field: str) -> float | None:
        vals = [x[field] for x in runs.get(key, [])]
        return round(statistics.median(vals), 4) if vals else None

    per_config: dict[str, Any] = {}
    worst: dict[str, float] = {}
    for t, nw in configs:
        wall = {ld: med((t, nw, ld), "first_batch_s") for ld in loaders}
        cpu = {ld: med((t, nw, ld), "cpu_s") for ld in loaders}
        mine = [wall[k] for k in ("fpipe-processes", "fpipe-threads") if wall.get(k)]
        peers = {k: v for k, v in wall.items() if v and not k.startswith("fpipe")}
        fastest = min(peers, key=peers.get) if peers else None
        ratio = round(min(mine) / peers[fastest], 3) if mine and fastest else None
        proc = wall.get("fpipe-processes")
        name = f"{t}_nw{nw}"
        per_config[name] = {
            "first_batch_s": wall,
            "cpu_s": cpu,
            "import_s": {ld: med((t, nw, ld), "import_s") for ld in loaders},
            "fastest_peer": fastest,
            "fpipe_vs_fastest_peer": ratio,
            "fpipe_processes_vs_fastest_peer": (
                round(proc / peers[fastest], 3) if proc and fastest else None
            ),
        }
        if ratio is not None:
            worst[t] = max(worst.get(t, 0.0), ratio)
    log("\n## summary (median first-batch wall time, ms; CPU ms of process + workers)")
    for name, c in per_config.items():
        log(f"{name}: fastest peer {c['fastest_peer']}, fpipe/fastest {c['fpipe_vs_fastest_peer']}")
        for ld in loaders:
            w, cp = c["first_batch_s"][ld], c["cpu_s"][ld]
            if w is not None:
                log(f"    {ld:<16} {w * 1e3:8.0f} ms   cpu {cp * 1e3:7.0f} ms")
    result = {
        "first_batch_1e6_vs_fastest_peer": worst.get("1e6"),
        "first_batch_blend100_vs_fastest_peer": worst.get("blend100"),
        "per_config": per_config,
        "worker_payload": payload,
        "failed": {f"{t}_nw{nw}_{ld}": v for (t, nw, ld), v in failed.items()},
        "repeats": repeats,
        "loadavg_end": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "wall_s": round(time.perf_counter() - t_start, 1),
    }
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
