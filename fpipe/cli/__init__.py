"""The `fpipe` command line: argument parsing and printing only, one module per command."""

from __future__ import annotations

import argparse
from typing import Any


def add_media_root(p: argparse.ArgumentParser) -> None:
    """``--media-root DIR`` (repeatable): open a prepared table whose media folder lies
    outside the table's folder (see "Paths a dataset names stay inside it" in
    ``docs/failures.md``)."""
    p.add_argument(
        "--media-root",
        action="append",
        metavar="DIR",
        help="a prepared table: a folder you trust to hold its media when its info.yaml "
        "names a media folder outside the table's folder (repeatable)",
    )


def open_args(args: argparse.Namespace) -> dict[str, Any]:
    """``open_dataset`` keyword arguments from :func:`add_media_root`'s option."""
    return {"media_root": args.media_root} if args.media_root else {}
