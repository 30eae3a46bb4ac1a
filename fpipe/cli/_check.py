"""``fpipe check DIR``: verify every member of a dataset against its index (a full pass).

Exit status 0 when everything matches, 1 when problems were found (each printed with its shard
and sample key), 2 when the dataset cannot be opened (a malformed or stale index: the message
says what to do).
"""

from __future__ import annotations

import argparse
import sys

from fpipe.cli import add_media_root, open_args
from fpipe.core.errors import FpipeError

__all__ = ["add_parser", "run"]

DESCRIPTION = """\
Verify every member of a prepared dataset against its index, in one full pass: each shard's
tar headers are walked and every indexed sample's members (extension, offset, size) compared,
then every sample is read. Problems are listed with their shard and sample key. Exit status 0
when everything matches, 1 when problems were found, 2 when the dataset cannot be opened (a
malformed index, or shards changed since prepare: the message says to re-run prepare).

example:
  fpipe check data/coco
"""


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``check`` sub-command."""
    p = sub.add_parser(
        "check",
        help="verify every member against the index",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", help="prepared dataset folder")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_media_root(p)
    return p


def run(args: argparse.Namespace) -> int:
    """``fpipe check``; see the module docstring for the exit status."""
    from fpipe.storage.prepare.check import check_dataset

    try:
        rep = check_dataset(args.path, progress=not args.no_progress, **open_args(args))
    except (FpipeError, OSError) as e:
        print(f"fpipe check: error: {e}", file=sys.stderr)
        return 2
    for shard, key, reason in rep.problems:
        print(f"{shard}: {key or '-'}: {reason}")
    status = "ok" if rep.ok else f"{len(rep.problems)} problem(s)"
    print(f"{rep.path}: {rep.samples} samples in {rep.shards} shards checked: {status}")
    return 0 if rep.ok else 1
