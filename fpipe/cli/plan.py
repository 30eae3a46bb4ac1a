"""``fpipe plan CONFIG --step N``: which samples make global step N on each rank.

Only the plan runs: the dataset index is read (keys, metadata columns), never a payload, so
this is quick even for a large dataset and a late step — the tool for a loss spike at step N.

CONFIG is a small YAML file holding the arguments of :func:`fpipe.get_train_dataset`::

    path: data/coco              # relative to the YAML file's folder
    batch_size: 32               # per rank (or global_batch_size: 256)
    world_size: 8                # data-parallel ranks (default 1)
    seed: 1234
    shuffle_buffer_size: 1000
    max_samples_per_sequence: 100
    split: train                 # default train
    num_epochs: null             # default: repeat forever
    drop_last: true
    distribution: global         # or per_rank
    bucket_config: buckets.yaml  # OpenSora's bucket_config (a mapping, or a YAML file next to
                                 # this one) instead of batch_size: prints each step's bucket

``path`` may be a metadataset.yaml (each sample then also names its dataset). CONFIG may also
be the dataset folder or the metadataset.yaml itself, with the same settings as flags
(``--batch-size 32 --world-size 8 ...``); flags override the YAML. Steps count from 0, like
``enumerate(loader)`` on a fresh loader. With a ``bucket_config``, ``--buckets N`` prints how
many of the first N steps each bucket gets (a histogram, from the plan alone).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from fpipe.core.errors import ConfigError, FpipeError

__all__ = [
    "add_parser",
    "bucket_histogram",
    "build_dataset",
    "format_histogram",
    "load_plan_config",
    "plan_step",
    "run",
]

#: Keys a plan CONFIG may hold (all but ``path`` and ``world_size`` go to get_train_dataset).
CONFIG_KEYS = (
    "path",
    "batch_size",
    "global_batch_size",
    "world_size",
    "seed",
    "shuffle_buffer_size",
    "max_samples_per_sequence",
    "split",
    "num_epochs",
    "drop_last",
    "distribution",
    "bucket_config",
    "bucket_window",
)


def add_config_arguments(p: argparse.ArgumentParser) -> None:
    """The flags that describe a plan (shared with ``fpipe state show``)."""
    p.add_argument("--batch-size", type=int, help="samples per batch on each rank")
    p.add_argument("--global-batch-size", type=int, help="samples per step over all ranks")
    p.add_argument("--world-size", type=int, help="data-parallel ranks (default 1)")
    p.add_argument("--seed", type=int)
    p.add_argument("--shuffle-buffer-size", type=int)
    p.add_argument("--max-samples-per-sequence", type=int)
    p.add_argument("--split")
    p.add_argument("--num-epochs", type=int)
    p.add_argument(
        "--keep-last",
        dest="drop_last",
        action="store_false",
        default=None,
        help="keep a short final batch (drop_last=False)",
    )
    p.add_argument("--distribution", choices=("global", "per_rank"))


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``plan`` sub-command."""
    p = sub.add_parser(
        "plan",
        help="which sample keys make step N on each rank (no payload is read)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", help="plan YAML file, or a prepared dataset folder plus flags")
    p.add_argument("--step", type=int, default=0, help="global step, counted from 0")
    p.add_argument(
        "--buckets",
        type=int,
        metavar="N",
        help="with a bucket_config: a histogram of the buckets of the first N steps",
    )
    p.add_argument("--rank", type=int, help="show only this rank")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_config_arguments(p)
    return p


def load_plan_config(config: str, args: argparse.Namespace | None = None) -> dict[str, Any]:
    """The plan settings from a YAML file (or a dataset path) and flags (which win)."""
    p = Path(config)
    cfg: dict[str, Any] = {}
    if p.is_file() and p.suffix.lower() in (".yaml", ".yml"):
        import yaml

        loaded = yaml.safe_load(p.read_text()) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{p}: a plan config is a YAML mapping")
        if "splits" in loaded:  # a metadataset.yaml given directly: it is the dataset
            loaded = {"path": p.name}
        unknown = sorted(set(loaded) - set(CONFIG_KEYS))
        if unknown:
            raise ConfigError(
                f"{p}: unknown keys {unknown}; a plan config may hold {', '.join(CONFIG_KEYS)}"
            )
        cfg.update(loaded)
        if "path" not in cfg:
            raise ConfigError(f"{p}: the plan config needs 'path' (the dataset)")
        dpath = Path(str(cfg["path"])).expanduser()
        cfg["path"] = str(dpath if dpath.is_absolute() else p.parent / dpath)
        bc = cfg.get("bucket_config")
        if isinstance(bc, str) and "\n" not in bc and not Path(bc).expanduser().is_absolute():
            cfg["bucket_config"] = str(p.parent / bc)  # a YAML file next to the config
    else:
        cfg["path"] = config
    if args is not None:
        for k in CONFIG_KEYS[1:]:
            v = getattr(args, k, None)
            if v is not None:
                cfg[k] = v
    if (
        cfg.get("batch_size") is None
        and cfg.get("global_batch_size") is None
        and cfg.get("bucket_config") is None
    ):
        raise ConfigError(
            "the plan needs batch_size (per rank), global_batch_size or a bucket_config"
        )
    return cfg


def build_dataset(cfg: dict[str, Any], rank: int = 0):
    """The :class:`~fpipe.loader.PlannedDataset` of ``rank`` for a plan config."""
    from fpipe.datasets import get_train_dataset
    from fpipe.loader import Topology

    kwargs = {k: v for k, v in cfg.items() if k not in ("path", "world_size")}
    world = int(cfg.get("world_size") or 1)
    return get_train_dataset(cfg["path"], topology=Topology(rank=rank, world_size=world), **kwargs)


def _advance(plan, state, steps: int):
    for done in range(steps):
        state, out = plan.next(state, 1)
        if not len(out):
            return state, done
    return state, steps


def plan_step(cfg: dict[str, Any], step: int, ranks: list[int] | None = None) -> dict[str, Any]:
    """The refs of global step ``step`` on each rank: ``{"step", "ranks": [{"rank", "samples":
    [{"key", "index", "epoch"}...]}...]}``; a rank past the end of its stream has ``None``."""
    from fpipe.storage import open_dataset

    if step < 0:
        raise ConfigError(f"--step must be >= 0, got {step}")
    world = int(cfg.get("world_size") or 1)
    ranks = list(range(world)) if ranks is None else ranks
    for r in ranks:
        if not 0 <= r < world:
            raise ConfigError(f"rank {r} is not in 0..{world - 1}")
    first = build_dataset(cfg, 0)
    distribution = first.distribution
    sources, names, opened = first.materializer.sources, first.datasets, {}

    def sample(d: int, i: int, e: int) -> dict[str, Any]:
        if d not in opened:
            opened[d] = open_dataset(sources[d].path, **sources[d].open_kwargs)
        out = {"key": opened[d].key(i), "index": i, "epoch": e}
        if len(sources) > 1:  # a blend: say which dataset
            out["dataset"] = names[d]
        return out

    start = None
    if distribution == "global":
        # At a global-batch boundary the plan state is the same on every rank: advance one.
        state, done = _advance(first.plan, first.plan.init(), step)
        start = first.plan.snapshot(state)
    out = []
    for r in ranks:
        pd = first if r == 0 else build_dataset(cfg, r)
        plan = pd.plan
        if start is not None:
            state = plan.restore(start)
        else:
            state, done = _advance(plan, plan.init(), step)
        _, got = plan.next(state, 1)
        if not len(got):
            out.append({"rank": r, "samples": None})
            continue
        refs = got[0].refs
        samples = [sample(*t) for t in refs.triples()]
        out.append({"rank": r, "samples": samples, **_bucket_of(pd, got[0])})
    return {
        "step": step,
        "distribution": distribution,
        "world_size": world,
        "batch_size": first.batch_size,
        "ranks": out,
    }


def _bucket_of(pd, recipe) -> dict[str, Any]:
    if pd.buckets is None or recipe.bucket < 0:
        return {}
    b = pd.buckets.buckets[recipe.bucket]
    return {"bucket": b.label, "shape": list(b.shape), "bucket_batch_size": b.batch_size}


def bucket_histogram(cfg: dict[str, Any], steps: int) -> dict[str, Any]:
    """How many of the first ``steps`` steps each bucket gets (rank 0's plan; in global mode
    every rank has the same bucket at every step): ``{"steps", "buckets": [{"bucket",
    "shape", "batch_size", "steps", "samples_per_rank"}...], "unfit", "rejected",
    "dropped"}``."""
    pd = build_dataset(cfg, 0)
    if pd.buckets is None:
        raise ConfigError("--buckets needs a bucket_config in the plan")
    table = pd.buckets
    counts = [0] * len(table)
    state, done = pd.plan.init(), 0
    while done < steps:
        state, got = pd.plan.next(state, min(1024, steps - done))
        if not len(got):
            break
        for r in got:
            counts[r.bucket] += 1
        done += len(got)
    rows = [
        {
            "bucket": b.label,
            "shape": list(b.shape),
            "batch_size": b.batch_size,
            "steps": counts[i],
            "samples_per_rank": counts[i] * b.batch_size,
        }
        for i, b in enumerate(table.buckets)
    ]
    from fpipe.plan import drop_counters

    dropped = drop_counters(pd.plan.stats(state))
    return {
        "steps": done,
        "buckets": rows,
        "unfit": dropped.get("unfit", 0),
        "rejected": dropped.get("rejected", 0),
        "dropped": dropped.get("group_remainder", 0),
    }


def format_histogram(result: dict[str, Any]) -> str:
    """Human-readable form of :func:`bucket_histogram`'s result."""
    n = max(result["steps"], 1)
    lines = [f"buckets of the first {result['steps']} steps:"]
    for row in result["buckets"]:
        t, h, w = row["shape"]
        bar = "#" * round(40 * row["steps"] / n)
        lines.append(
            f"  {row['bucket']:<20} {t:>3}x{h}x{w:<5} bs {row['batch_size']:>3} "
            f"{row['steps']:>7} steps {100 * row['steps'] / n:5.1f}% {bar}"
        )
    lines.append(
        f"samples seen so far that fit no bucket: {result['unfit']}, not kept by probability: "
        f"{result['rejected']}, dropped as window leftovers: {result['dropped']}"
    )
    return "\n".join(lines)


def format_plan(result: dict[str, Any]) -> str:
    """Human-readable form of :func:`plan_step`'s result."""
    first = next((r for r in result["ranks"] if r.get("bucket")), None)
    if first is not None:
        t, h, w = first["shape"]
        head = (
            f"bucket {first['bucket']} ({t} frames of {h}x{w}), batch {first['bucket_batch_size']}"
        )
    else:
        head = f"batch {result['batch_size']}"
    lines = [
        f"step {result['step']}: {result['world_size']} rank(s) x {head}"
        f" ({result['distribution']} mode)"
    ]
    for r in result["ranks"]:
        if r["samples"] is None:
            lines.append(f"rank {r['rank']}: past the end of the stream")
            continue
        lines.append(f"rank {r['rank']} ({len(r['samples'])} samples):")
        lines += [
            f"  {s['key']}  ({s['dataset'] + ', ' if 'dataset' in s else ''}index {s['index']}, "
            f"epoch {s['epoch']})"
            for s in r["samples"]
        ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the keys of the step; exit status 2 on a bad config, 1 if past the end."""
    try:
        cfg = load_plan_config(args.config, args)
        if args.buckets is not None:
            hist = bucket_histogram(cfg, args.buckets)
            print(json.dumps(hist, indent=1) if args.json else format_histogram(hist))
            return 0
        result = plan_step(cfg, args.step, None if args.rank is None else [args.rank])
    except FpipeError as e:
        print(f"fpipe plan: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1) if args.json else format_plan(result))
    return 1 if all(r["samples"] is None for r in result["ranks"]) else 0
