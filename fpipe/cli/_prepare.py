"""``fpipe prepare DIR``: index shards (or a table) and write dataset.yaml / split.yaml."""

from __future__ import annotations

import argparse
import functools
import sys

from fpipe.core.errors import FpipeError

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``prepare`` sub-command."""
    p = sub.add_parser(
        "prepare",
        help="index a WebDataset folder, an Energon folder or a JSONL/CSV table",
        description="Index tar shards (or a table) into DIR/.fpipe: byte offsets of every "
        "member, metadata columns, dataset.yaml and split.yaml. Asks for missing settings "
        "only when run on a terminal.",
    )
    p.add_argument(
        "path", help="dataset folder, a .jsonl/.csv table, or a URL (s3://bucket/prefix)"
    )
    p.add_argument(
        "--field",
        action="append",
        metavar="NAME=SPEC",
        default=None,
        help="field map entry, e.g. image=jpg, caption=txt, caption=json[caption], "
        "image=jpg,png (repeatable)",
    )
    p.add_argument(
        "--sample-type",
        default=None,
        metavar="TYPE",
        help="e.g. CaptioningSample, or your own class as package.module:Class (that module "
        "is imported; dataset.yaml then names package.module.Class, which your training code "
        "registers with fpipe.samples.register_sample_type)",
    )
    p.add_argument(
        "--split",
        default=None,
        help="shard split ratios train,val,test e.g. 8,1,1 (or train=9,val=1)",
    )
    p.add_argument(
        "--split-shards",
        action="append",
        metavar="SPLIT=GLOB",
        default=None,
        help="explicit shards of a split, e.g. val='shard-000{0..1}.tar' (repeatable)",
    )
    p.add_argument(
        "--split-seed",
        type=int,
        default=None,
        help="shuffle shards with this seed before splitting by ratio",
    )
    p.add_argument(
        "--exclude",
        action="append",
        default=[],
        help="shard name, SHARD/INDEX or sample key to exclude (repeatable)",
    )
    p.add_argument(
        "--shards",
        action="append",
        default=[],
        help="shard glob relative to DIR, braces allowed (default: all *.tar, "
        "*.tar.gz, *.tgz below DIR)",
    )
    p.add_argument(
        "--column",
        action="append",
        default=[],
        metavar="NAME=SPEC",
        help="metadata column from JSON, e.g. aes=json[aesthetic] or "
        "n=len(json[tags]); for Parquet and tables, from a column: ntok=len(input_ids) "
        "(repeatable)",
    )
    p.add_argument(
        "--extra-columns",
        default=None,
        metavar="MODULE:FUNCTION",
        help="function(members: dict[str, bytes]) -> dict[str, number]",
    )
    p.add_argument("--workers", type=int, default=1, help="parallel processes (default 1)")
    p.add_argument(
        "--part",
        default=None,
        metavar="I/N",
        help="index only slice I (0-based) of N, for cluster jobs; then --merge",
    )
    p.add_argument("--merge", action="store_true", help="combine the parts written by --part")
    p.add_argument(
        "--ray",
        action="store_true",
        help="index the shard slices as Ray tasks on a Ray cluster, then merge them (the "
        "folder must be on a file system every node sees; see docs/ray.md)",
    )
    p.add_argument(
        "--ray-parts",
        type=int,
        default=None,
        metavar="N",
        help="slices (default: the cluster's CPUs)",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        help="ray.init address (default: RAY_ADDRESS, a running local cluster, else a new one)",
    )
    p.add_argument("--root", default=None, help="tables: media root (default: table folder)")
    p.add_argument(
        "--media-column",
        action="append",
        default=None,
        help="tables: column naming media files (default: guessed)",
    )
    p.add_argument("--aux", default=None, help="tables: prepared tar dataset holding media")
    p.add_argument(
        "--index-dir",
        default=None,
        help="for s3://, gs://, az:// datasets: write the index to this local folder "
        "(default: PATH/.fpipe/ in the bucket)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--compact-index",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="write a tar dataset's index in the compact layout (about 14 bytes per image + "
        "caption sample instead of ~117, for very large datasets; reading a sample costs more) "
        "(default: off, the flat layout)",
    )
    p.add_argument(
        "--probe-av",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="probe audio/video members (demux only) and store duration, fps, size and "
        "keyframes for fast seeks; unreadable media are left out (default: on)",
    )
    p.add_argument(
        "--show-problems",
        type=int,
        default=20,
        metavar="N",
        help="print at most N problems to stderr (default 20; all of them are in "
        ".fpipe/problems.jsonl, whose path the summary prints)",
    )
    return p


def _prompt(args: argparse.Namespace) -> None:
    """Ask for the field map, sample type and split when missing (terminal only)."""
    from pathlib import Path

    from fpipe.storage.config.dataset_yaml import load_dataset_config
    from fpipe.storage.paths import is_url
    from fpipe.storage.read.energon import is_energon
    from fpipe.storage.read.tables import is_table
    from fpipe.storage.read.webdataset import list_shards, peek_extensions

    if is_url(args.path):
        return
    root = Path(args.path)
    if is_table(root) or is_energon(root) or args.merge or args.part:
        return
    has_cfg = bool(load_dataset_config(root / ".fpipe" / "dataset.yaml").field_map)
    if args.field is None and not has_cfg:
        shards = list_shards(root, args.shards)
        exts = peek_extensions(root, shards[0]) if shards else []
        print(f"member extensions in {shards[0] if shards else '?'}: {', '.join(exts)}")
        ans = input("field map (e.g. image=jpg caption=txt; empty for raw fields): ").split()
        args.field = ans or None
        if args.sample_type is None and ans:
            args.sample_type = input("sample type (empty to guess): ").strip() or None
    if args.split is None and args.split_shards is None and not has_cfg:
        args.split = input("split ratios train,val,test (empty for none): ").strip() or None


def run(args: argparse.Namespace) -> int:
    """Run ``fpipe prepare``; exit status 0 (problems are reported, not fatal), 2 on errors."""
    from fpipe.storage.prepare.run import prepare_dataset

    if sys.stdin.isatty() and sys.stdout.isatty():
        _prompt(args)
    split = args.split
    if args.split_shards:
        split = {}
        for item in args.split_shards:
            name, _, pattern = item.partition("=")
            split.setdefault(name, []).append(pattern)
    prepare = prepare_dataset
    if args.ray:
        if args.part or args.merge:
            print("fpipe prepare: error: --ray makes the parts and merges them", file=sys.stderr)
            return 2
        from fpipe.storage.prepare.ray_prepare import prepare_on_ray

        prepare = functools.partial(prepare_on_ray, parts=args.ray_parts, address=args.ray_address)
    try:
        report = prepare(
            args.path,
            fields=args.field,
            split=split,
            sample_type=args.sample_type,
            workers=args.workers,
            **({} if args.ray else {"part": args.part, "merge": args.merge}),
            columns=args.column,
            extra_columns_fn=args.extra_columns,
            progress=not args.no_progress,
            shards=args.shards,
            exclude=args.exclude,
            split_seed=args.split_seed,
            root=args.root,
            media_columns=args.media_column,
            aux=args.aux,
            probe_av=args.probe_av,
            index_dir=args.index_dir,
            compact_index=args.compact_index,
        )
    except FpipeError as e:
        print(f"fpipe prepare: error: {e}", file=sys.stderr)
        return 2
    for prob in report.problems[: args.show_problems]:
        print(f"problem: {prob}", file=sys.stderr)
    if len(report.problems) > args.show_problems:
        print(
            f"... {len(report.problems) - args.show_problems} more problems in "
            f"{report.problems_file}",
            file=sys.stderr,
        )
    part = f" (part {report.part[0]}/{report.part[1]})" if report.part else ""
    print(
        f"indexed {report.num_samples} samples from {report.num_shards} shards{part} in "
        f"{report.elapsed_s:.2f} s ({report.samples_per_s:,.0f} samples/s); "
        f"{len(report.problems)} left out; wrote {report.index_dir}"
    )
    if report.problems:
        print(report.left_out_summary())
    if report.splits:
        print("splits (shards): " + ", ".join(f"{k}={v}" for k, v in report.splits.items()))
    if report.part is None:
        print(_what_was_written(report, asked=args.field is not None))
    return 0


def _what_was_written(report, asked: bool) -> str:
    """One line on the dataset.yaml written; for a crude dataset, how to set fields."""
    from fpipe.storage.config.dataset_yaml import is_crude

    if report.sample_type and not is_crude(report.sample_type):
        fields = ", ".join(
            f"{k}={v if isinstance(v, str) else ','.join(v)}" for k, v in report.field_map.items()
        )
        line = f"dataset.yaml: sample_type {report.sample_type}, fields {fields}"
        if "." in report.sample_type:  # the user's own class: fpipe never imports it on load
            line += (
                f"; to load it, import {report.sample_type.rsplit('.', 1)[0]} in your training "
                "code and register the class there (@fpipe.samples.register_sample_type)"
            )
        return line
    members = [m for m in report.members if not m.endswith(".gz")] or ["jpg", "txt"]
    example = " ".join(f"--field NAME={m}" for m in members[:2])
    why = "" if asked else " (no --field given)"
    return (
        f"dataset.yaml: CrudeSample{why}: samples are dicts of raw members "
        f"({', '.join(report.members)}) for your TaskEncoder's cookers. For typed samples run "
        f"`fpipe prepare {report.path} {example} --sample-type TYPE`, "
        "e.g. --field image=jpg --field caption=txt --sample-type CaptioningSample"
    )
