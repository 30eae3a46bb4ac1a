"""``fpipe info DIR``: sample count, shards, columns and splits of a prepared dataset."""

from __future__ import annotations

import argparse
import sys

from fpipe.core.errors import FpipeError

__all__ = ["add_parser", "format_info", "run"]

_LAYOUTS = {
    "tar": "tar shards, fpipe index",
    "energon": "tar shards, Energon .tar.idx index",
    "table": "table of media files",
}


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``info`` sub-command."""
    p = sub.add_parser("info", help="show samples, shards, columns and splits of a dataset")
    p.add_argument("path", help="prepared folder (fpipe or Energon) or a .jsonl/.csv table")
    p.add_argument("--shards", action="store_true", help="list every shard")
    return p


def format_info(ds, list_shards: bool = False) -> str:
    """Human-readable summary of an opened dataset."""
    layout = _LAYOUTS.get(ds.layout, ds.layout)
    lines = [f"dataset: {ds.path} ({layout})", f"samples: {len(ds)}"]
    shards = getattr(ds, "shards", ())
    lines.append(f"shards: {len(shards)}")
    if list_shards:
        lines += [f"  {s}" for s in shards]
    cfg = ds.config
    lines.append(f"sample_type: {cfg.sample_type}")
    if cfg.field_map:
        lines.append("field_map: " + ", ".join(f"{k}={v}" for k, v in cfg.field_map.items()))
    lines.append("columns: " + ", ".join(ds.column_names))
    splits = getattr(ds, "split_names", ())
    if splits:
        parts = [f"{name}={len(ds.split_indices(name))}" for name in splits]
        lines.append("splits (samples): " + ", ".join(parts))
    else:
        lines.append("splits: none (all samples)")
    if ds.record.problems:
        lines.append(
            f"left out at prepare: {ds.record.problems} samples "
            f"(see {ds.path}/.fpipe/problems.jsonl)"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the summary; exit status 2 if the dataset cannot be opened."""
    from fpipe.storage import open_dataset

    try:
        ds = open_dataset(args.path)
        print(format_info(ds, args.shards))
    except FpipeError as e:
        print(f"fpipe info: error: {e}", file=sys.stderr)
        return 2
    return 0
