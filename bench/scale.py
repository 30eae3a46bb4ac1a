"""Internet scale by simulation: plan a rank of a large job on synthetic indexes.

A synthetic index says what a real one would (shard count, samples per shard, members,
columns) and holds no payload: every per-sample array is a sparse ``.npy`` file (a header,
then a hole), so a 5 x 10^9-sample index takes a few MB of disk. Whatever the plan reads of
those arrays shows up as pages mapped into the process (``touched_mb``, from
``/proc/self/smaps``): the plan of one rank must touch O(its batches), never O(samples).
The shard list is written as arrays (index format 3, ``fpipe/storage/read/tar/shard_table.py``).

Scenarios, each in its own subprocess (``ru_maxrss`` is per process):

- ``5e9``: 10^6 shards x 5,000 samples (members jpg + txt), rank 17 of 4,096, 8 workers per
  rank, global distribution, batch 32 per rank, slices of 100, window 1,000.
- ``10k``: a blend of 10,000 datasets of 10^3..10^7 samples (log-uniform, fixed seed), as one
  flat ``blend:`` list (``--flat``) or 100 nested metadatasets of 100 (default); each dataset
  folder links to one of 100 index templates (seconds to build). A weighted blend draws each
  position's dataset, so its seek goes to step 100, not 10^6 (1.3 x 10^11 draws, refused);
  ``state_bytes_fixed`` / ``state_bytes_online``: the loader snapshot there with fixed weights
  and with the weights changed once (at step 50), with the blend's quota draw
  (``blend_draw="quota"``: no per-dataset counter); the same with the default hash draw as
  ``state_bytes_fixed_hash_draw`` / ``state_bytes_online_hash_draw``. The quota draw's counts
  are a formula of the position, so its plan also seeks to step 10^6 on counts
  (``seek_1e6_quota_s``, plan snapshot there ``state_bytes_1e6_quota``).
- ``tokens``: 2 x 10^5 shards x 5,000 samples = 10^9 samples with a real int32 ``tokens``
  column (4 GB written once, ``--tokens``), blended by tokens with a small second dataset:
  how much of the column one rank touches.

Per scenario: ``open_s`` (get_train_dataset), ``rss_mb`` (peak), ``first_recipe_s``,
``refs_per_s`` (global refs planned per second: every rank plans the whole global batch),
``seek_1e6_s`` (``seek_state`` to step 10^6 from a fresh plan; ``seek_1e2_s`` for ``10k``),
``state_bytes`` (plan snapshot there), ``elastic_restore_s`` (restore the snapshot into the
plan of rank 5 of 3,072 and take its first recipe; ``elastic_rss_mb`` of that
process). The last line is one JSON object.

- ``index``: bytes per sample on disk of a prepared image + caption index written by the real
  writer at 10^6 and 10^7 samples, extrapolated to 10^8 (``bench/_scale_index.py``):
  ``index_bytes_per_sample`` (10^8, extrapolated), ``index_bytes_per_sample_1e6``,
  ``index_bytes_per_shard``, ``index_flat_bytes_per_sample_1e6`` (the flat layout).
- ``prepare`` (not in the default run: about 7 minutes at 10^5 shards): ``fpipe prepare`` of
  ``--prepare-shards`` tiny shards on one process, killed halfway and resumed, and on a local
  Ray cluster of 2 nodes (``bench/_scale_prepare.py``): ``prepare_shards_per_s``,
  ``prepare_ray_shards_per_s`` and the figures named there.

Usage: ``python bench/scale.py [--dir /tmp/fpipe-scale] [--only 5e9,10k,index,prepare]
[--tokens] [--prepare-shards 100000]``.
Timings are wall-clock on whatever machine runs it (shared machines vary).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent


def _sparse(path: Path, dtype, shape: int, tail=None) -> None:
    """A ``.npy`` file of ``shape`` zeros that takes no disk (a hole); ``tail`` sets the last
    value (``members/start`` must end at the member count)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(shape,))
    if tail is not None and shape:
        arr[-1] = tail
    arr.flush()
    del arr


def build_index(
    folder: Path,
    shards: int,
    per_shard,
    members=("jpg", "txt"),
    columns: dict | None = None,
) -> int:
    """A synthetic format 3 index of ``shards`` shards (``per_shard``: an int, or one count
    per shard) at ``folder``; returns the sample count. ``columns``: name -> array written
    as is (anything else is sparse)."""
    idx = folder / ".fpipe"
    if (idx / "info.yaml").exists():
        return int(yaml.safe_load((idx / "info.yaml").read_text())["num_samples"])
    idx.mkdir(parents=True, exist_ok=True)
    counts = np.broadcast_to(np.asarray(per_shard, np.int64), (shards,)).copy()
    n = int(counts.sum())
    m = n * len(members)
    names = "".join(f"shard-{i:07d}.tar" for i in range(shards)).encode()
    width = 17
    (idx / "shards").mkdir(exist_ok=True)
    np.save(idx / "shards/samples.npy", counts)
    np.save(idx / "shards/bytes.npy", np.full(shards, -1, np.int64))
    np.save(idx / "shards/mtime_ns.npy", np.full(shards, -1, np.int64))
    np.save(idx / "shards/names.npy", np.frombuffer(names, np.uint8))
    np.save(idx / "shards/names.offsets.npy", np.arange(shards + 1, dtype=np.int64) * width)
    _sparse(idx / "shard_id.npy", np.int32, n)
    _sparse(idx / "keys.npy", np.uint8, n * 8)
    _sparse(idx / "keys.offsets.npy", np.int64, n + 1, tail=n * 8)
    _sparse(idx / "members/start.npy", np.int64, n + 1, tail=m)
    _sparse(idx / "members/ext.npy", np.int32, m)
    _sparse(idx / "members/offset.npy", np.int64, m)
    _sparse(idx / "members/size.npy", np.int64, m)
    _sparse(idx / "columns/bytes.npy", np.int64, n)
    cols = {"bytes": "int64"}
    for name, arr in (columns or {}).items():
        np.save(idx / f"columns/{name}.npy", arr)
        cols[name] = str(arr.dtype)
    info = {
        "format": "fpipe-index",
        "version": 3,
        "kind": "webdataset",
        "num_samples": n,
        "num_shards": shards,
        "members": sorted(members),
        "num_members": m,
        "columns": cols,
        "source": "synthetic",
    }
    (idx / "dataset.yaml").write_text(yaml.safe_dump({"sample_type": "CrudeSample"}))
    (idx / "info.yaml").write_text(yaml.safe_dump(info, sort_keys=False))
    return n


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _touched_mb(under: str) -> float:
    """MB of pages of files under ``under`` mapped into this process (what the plan read)."""
    total, on = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if "-" in line.split(" ", 1)[0]:
                on = under in line
            elif on and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total / 1024


def _plan(path, world, rank, **kw):
    from fpipe import get_train_dataset
    from fpipe.loader.topology import Topology

    return get_train_dataset(
        str(path),
        batch_size=kw.pop("batch_size", 32),
        shuffle_buffer_size=kw.pop("window", 1000),
        max_samples_per_sequence=100,
        seed=1234,
        topology=Topology(rank=rank, world_size=world, num_workers=8),
        distribution="global",
        **kw,
    ).plan


def measure(path: str, under: str, world: int, kw: dict, seek_to: int = 10**6) -> dict:
    """The figures of one scenario (see the module docstring), in this process."""
    from fpipe.loader.steering import seek_state

    out: dict = {}
    t = time.perf_counter()
    plan = _plan(path, world, 17, **dict(kw))
    out["open_s"] = time.perf_counter() - t
    t = time.perf_counter()
    state, got = plan.next(plan.init(), 1)
    out["first_recipe_s"] = time.perf_counter() - t
    per = len(got[0].refs)
    steps, t = 0, time.perf_counter()
    while time.perf_counter() - t < 2.0:
        state, got = plan.next(state, 8)
        steps += len(got)
    out["refs_per_s"] = steps * per * world / (time.perf_counter() - t)
    t = time.perf_counter()
    state, *_ = seek_state(plan, seek_to, (), ())
    out[f"seek_{seek_to:.0e}_s".replace("+0", "")] = time.perf_counter() - t
    snap = plan.snapshot(state)
    out["state_bytes"] = len(snap)
    if "yaml" in Path(path).suffix:
        out.update(online_state(plan, seek_to, "_hash_draw"))
        t = time.perf_counter()
        quota = _plan(path, world, 17, blend_draw="quota", **dict(kw))
        out["open_quota_s"] = time.perf_counter() - t
        out.update(online_state(quota, seek_to))
        # the plan's seek on counts (a loader's seek_state also plans the last steps until
        # this rank's epoch is known, which here, with 10,000 datasets, takes far longer)
        t = time.perf_counter()
        far, _ = quota.advance(quota.init(), 10**6)
        out["seek_1e6_quota_s"] = time.perf_counter() - t
        out["state_bytes_1e6_quota"] = len(quota.snapshot(far))
    out["rss_mb"] = _rss_mb()
    out["touched_mb"] = _touched_mb(under)
    Path(under, "snap.bin").write_bytes(snap)
    return out


def online_state(plan, step: int, label: str = "") -> dict:
    """Loader snapshot bytes at ``step``: fixed weights, and the blend's weights changed once
    (at step/2); ``label`` ends each key."""
    from fpipe.loader.state import LoaderState, encode_loader_state
    from fpipe.loader.steering import MixChange, blend_of, seek_state

    _, config = blend_of(plan)
    rng = np.random.default_rng(1)
    change = MixChange(step // 2, tuple(rng.integers(1, 8, len(config.datasets)) * 1.0))
    out: dict = {"blend_datasets": len(config.datasets)}
    for key, changes in (("fixed", []), ("online", [change])):
        t = time.perf_counter()
        state, batches, refs, epoch = seek_state(plan, step, (), changes)
        data = encode_loader_state(plan, LoaderState(state, batches, refs, 0, epoch))
        out[f"seek_{key}{label}_s"] = time.perf_counter() - t
        out[f"state_bytes_{key}{label}"] = len(data)
    return out


def elastic(path: str, under: str, world2: int, kw: dict) -> dict:
    t = time.perf_counter()
    plan = _plan(path, world2, 5, **dict(kw))
    state = plan.restore(Path(under, "snap.bin").read_bytes())
    state, got = plan.next(state, 1)
    assert len(got) == 1
    return {"elastic_restore_s": time.perf_counter() - t, "elastic_rss_mb": _rss_mb()}


def build_sources(root: Path, count: int, flat: bool, templates: int = 100) -> Path:
    """``count`` one-shard datasets of 10^3..10^7 samples (log-uniform) and a metadataset
    blending them. Each dataset is a folder of its own whose ``.fpipe`` is a symbolic link to
    one of ``templates`` indexes of log-spaced sizes (its size rounded to the nearest): fpipe
    opens each folder as a source of its own, and building takes seconds instead of the
    minutes 10,000 indexes of a dozen files each take."""
    rng = np.random.default_rng(0)
    grid = np.round(np.logspace(3, 7, templates)).astype(np.int64)
    pick = np.abs(np.log10(grid)[None, :] - rng.uniform(3, 7, count)[:, None]).argmin(1)
    sizes = grid[pick]
    for k, n in enumerate(grid.tolist()):
        build_index(root / "templates" / f"t{k:03d}", 1, n)
    for i, k in enumerate(pick.tolist()):
        link = root / f"ds{i:05d}" / ".fpipe"
        if not link.is_symlink():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(Path("..", "templates", f"t{k:03d}", ".fpipe"))
    top = root / ("flat.yaml" if flat else "nested.yaml")
    if flat:
        blend = [{"path": f"ds{i:05d}", "weight": float(s)} for i, s in enumerate(sizes)]
    else:
        blend = []
        for g in range(0, count, 100):
            sub = [{"path": f"ds{i:05d}", "weight": float(sizes[i])} for i in range(g, g + 100)]
            (root / f"group{g // 100:03d}.yaml").write_text(
                yaml.safe_dump({"splits": {"train": {"blend": sub}}})
            )
            blend.append(
                {"path": f"group{g // 100:03d}.yaml", "weight": float(sizes[g : g + 100].sum())}
            )
    top.write_text(yaml.safe_dump({"splits": {"train": {"blend": blend}}}))
    return top


def scenario(args) -> dict:
    d = Path(args.dir)
    if args.scenario == "5e9":
        path = d / "5e9"
        build_index(path, 10**6, 5000)
        kw: dict = {}
    elif args.scenario == "tokens":
        path = d / "tokens-mix.yaml"
        kw = {"blend_unit": "tokens"}
    else:
        path = build_sources(d / "10k-shared", 10_000, args.flat)
        kw = {}
    if args.elastic:
        return elastic(str(path), str(d), 3072, kw)
    # a weighted blend draws each position's dataset: step 10^6 of 131,072 refs is 1.3 x 10^11
    # draws, which a seek refuses (a run that far restores its saved state); the state's size
    # does not depend on the step
    seek_to = 100 if args.scenario == "10k" else 10**6
    return measure(str(path), str(d), 4096, kw, seek_to)


def build_tokens(d: Path) -> None:
    """10^9 samples with a real int32 token column (written in chunks) + a small dataset."""
    big = d / "tokens-big"
    if not (big / ".fpipe/info.yaml").exists():
        n = 2 * 10**5 * 5000
        (big / ".fpipe/columns").mkdir(parents=True, exist_ok=True)
        col = np.lib.format.open_memmap(big / ".fpipe/columns/tokens.npy", "w+", np.int32, (n,))
        rng = np.random.default_rng(1)
        for a in range(0, n, 1 << 26):
            col[a : a + (1 << 26)] = rng.integers(50, 2000, min(1 << 26, n - a), dtype=np.int32)
        col.flush()
        del col
        info = big / ".fpipe/columns/tokens.npy"
        build_index(big, 2 * 10**5, 5000, members=("txt",))
        meta = yaml.safe_load((big / ".fpipe/info.yaml").read_text())
        meta["columns"]["tokens"] = "int32"
        (big / ".fpipe/info.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
        assert info.exists()
    small = d / "tokens-small"
    build_index(
        small, 10, 1000, members=("txt",), columns={"tokens": np.full(10_000, 500, np.int32)}
    )
    mix = {
        "splits": {
            "train": {
                "blend_unit": "tokens",
                "blend": [
                    {"path": "tokens-big", "weight": 0.9},
                    {"path": "tokens-small", "weight": 0.1},
                ],
            }
        }
    }
    (d / "tokens-mix.yaml").write_text(yaml.safe_dump(mix))


def run_one(args, name: str, extra=()) -> dict:
    cmd = [sys.executable, __file__, "--dir", args.dir, "--scenario", name, *extra]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode:
        return {"error": res.stderr.strip().splitlines()[-1:] or ["?"]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def run_prepare(args) -> dict:
    cmd = [sys.executable, str(HERE / "_scale_prepare.py"), "all", args.dir]
    res = subprocess.run(
        [*cmd, "--shards", str(args.prepare_shards)], capture_output=True, text=True, check=False
    )
    if res.returncode:
        return {"prepare_error": res.stderr.strip().splitlines()[-1:] or ["?"]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def run_index(args) -> dict:
    cmd = [sys.executable, str(HERE / "_scale_index.py"), str(Path(args.dir) / "index")]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode:
        return {"index_error": res.stderr.strip().splitlines()[-1:] or ["?"]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/fpipe-scale")
    ap.add_argument("--only", default="5e9,10k,index")
    ap.add_argument("--prepare-shards", type=int, default=10**5, help="shards for --only prepare")
    ap.add_argument("--tokens", action="store_true", help="also the 10^9-sample token column")
    ap.add_argument("--flat", action="store_true", help="10k sources as one flat blend list")
    ap.add_argument("--scenario", help=argparse.SUPPRESS)
    ap.add_argument("--elastic", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.scenario:
        print(json.dumps(scenario(args)))
        return
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    final: dict = {}
    names = args.only.split(",") + (["tokens"] if args.tokens else [])
    if "tokens" in names:
        build_tokens(Path(args.dir))
    for name in names:
        if name in ("prepare", "index"):  # own subprocesses and keys (bench/_scale_*.py)
            got = run_prepare(args) if name == "prepare" else run_index(args)
            print(name, json.dumps(got), flush=True)
            final.update({k: round(v, 3) if isinstance(v, float) else v for k, v in got.items()})
            continue
        extra = ["--flat"] if args.flat and name == "10k" else []
        got = run_one(args, name, extra)
        if "error" not in got:
            got.update(run_one(args, name, [*extra, "--elastic"]))
        print(name, json.dumps(got), flush=True)
        suffix = {"5e9": "_5e9", "10k": "_10k_sources", "tokens": "_tokens"}[name]
        for k, v in got.items():
            final[f"{k}{suffix}"] = round(v, 3) if isinstance(v, float) else v
    print(json.dumps(final))


if __name__ == "__main__":
    main()
