"""``fpipe plan CONFIG --step N``: which samples make global step N on each rank.

Only the plan runs: the dataset index is read (keys, metadata columns), never a payload, so
this is quick even for a large dataset and a late step — the tool for a loss spike at step N.

CONFIG is a small YAML file holding the arguments of :func:`fpipe.get_train_dataset` (any
option that is plain data, by its keyword name; see :mod:`fpipe.datasets.plan_config`)::

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

Steps in the config's ``skip_steps`` (e.g. ``skip_steps: [[9000, 9300]]``) are shown as
skipped. Lineage: ``--find KEY [--steps A:B]`` lists every (step, rank, position, epoch) where
the sample with that key is delivered (default: the whole stream, if it is finite), and
``--steps A:B --keys`` prints every sample of steps A to B-1 as JSON lines. See
docs/steering.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from fpipe.core.errors import ConfigError, FpipeError

__all__ = [
    "add_config_arguments",
    "add_parser",
    "format_histogram",
    "format_lineage",
    "format_plan",
    "plan_overrides",
    "run",
]


def add_config_arguments(p: argparse.ArgumentParser) -> None:
    """The flags that set options of a plan (shared with ``fpipe state show`` and ``fpipe
    inspect``); :func:`plan_overrides` reads them back."""
    from typing import get_args

    from fpipe.datasets.options import Distribution

    flags = [
        p.add_argument("--batch-size", type=int, help="samples per batch on each rank"),
        p.add_argument("--global-batch-size", type=int, help="samples per step over all ranks"),
        p.add_argument("--world-size", type=int, help="data-parallel ranks (default 1)"),
        p.add_argument("--seed", type=int),
        p.add_argument("--shuffle-buffer-size", type=int),
        p.add_argument("--max-samples-per-sequence", type=int),
        p.add_argument("--split"),
        p.add_argument("--num-epochs", type=int),
        p.add_argument(
            "--keep-last",
            dest="drop_last",
            action="store_false",
            default=None,
            help="keep a short final batch (drop_last=False)",
        ),
        p.add_argument("--distribution", choices=get_args(Distribution)),
    ]
    p.set_defaults(plan_flags=tuple(f.dest for f in flags))


def plan_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The plan options given as flags (:func:`add_config_arguments`), by option name."""
    given = {name: getattr(args, name, None) for name in getattr(args, "plan_flags", ())}
    return {name: v for name, v in given.items() if v is not None}


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
    p.add_argument(
        "--find", metavar="KEY", help="lineage: every step, rank and position of this sample"
    )
    p.add_argument("--steps", metavar="A:B", help="with --find or --keys: steps A to B-1")
    p.add_argument("--keys", action="store_true", help="every sample of --steps A:B, as JSON lines")
    p.add_argument("--dataset", help="with --find: search this dataset of a blend only")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "--mix-history",
        metavar="FILE",
        help="JSON of loader.mix_history(): the run's online weight changes, at their steps",
    )
    add_config_arguments(p)
    return p


def format_histogram(result: dict[str, Any]) -> str:
    """Human-readable form of :func:`fpipe.datasets.plan_queries.bucket_histogram`'s result."""
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
    """Human-readable form of :func:`fpipe.datasets.plan_queries.plan_step`'s result."""
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
    if result.get("skipped"):
        lines.append("SKIPPED (skip_steps): the loader does not deliver these samples")
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


def format_lineage(result: dict[str, Any]) -> str:
    """Human-readable form of :func:`fpipe.datasets.lineage.find_key`'s result."""
    a, b = result["steps"]
    where = ", ".join(f"{s['dataset']} index {s['index']}" for s in result["samples"])
    lines = [
        f"{result['key']} ({where}): {len(result['hits'])} time(s) in steps {a}..{b - 1} "
        f"({result['scanned_refs']} refs scanned)"
    ]
    lines += [
        f"  step {h['step']:>8}  rank {h['rank']:>4}  position {h['position']:>5}  "
        f"epoch {h['epoch']}{'  (skipped)' if h['skipped'] else ''}"
        for h in result["hits"]
    ]
    return "\n".join(lines)


def _lineage(args: argparse.Namespace, cfg: Any) -> int:
    """``--find`` and ``--keys``."""
    from fpipe.datasets.lineage import find_key, step_samples

    if args.keys:
        if args.steps is None:
            raise ConfigError("--keys needs --steps A:B")
        for row in step_samples(cfg, args.steps):
            if args.rank is None or row["rank"] == args.rank:
                print(json.dumps(row))
        return 0
    result = find_key(cfg, args.find, args.steps, dataset=args.dataset)
    if args.rank is not None:
        result["hits"] = [h for h in result["hits"] if h["rank"] == args.rank]
    print(json.dumps(result, indent=1) if args.json else format_lineage(result))
    return 0


def run(args: argparse.Namespace) -> int:
    """Print the keys of the step; exit status 2 on a bad config, 1 if past the end."""
    from fpipe.datasets.plan_config import load_plan_config
    from fpipe.datasets.plan_queries import bucket_histogram, plan_step

    try:
        overrides = plan_overrides(args)
        if getattr(args, "mix_history", None):
            overrides["mix_history"] = os.path.abspath(args.mix_history)
        cfg = load_plan_config(args.config, overrides)
        if args.find is not None or args.keys:
            return _lineage(args, cfg)
        if args.steps is not None:
            raise ConfigError("--steps goes with --find KEY or --keys")
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
