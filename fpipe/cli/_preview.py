"""``fpipe preview DATASET --out grid.png``: a picture of the first samples of a dataset."""

from __future__ import annotations

import argparse
import sys

from fpipe.cli import add_media_root, open_args
from fpipe.core.errors import FpipeError

__all__ = ["add_parser", "run"]

DESCRIPTION = """\
Draw the first N samples of a split as a grid: each cell shows the sample key, the image (or
a strip of frames spread over a video), the text members (captions, JSON) as excerpts, and
every member with its size. Samples are taken in index order, so the picture is stable.
"""


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``preview`` sub-command."""
    p = sub.add_parser(
        "preview",
        help="draw the first samples of a dataset into a PNG grid",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", help="prepared folder (fpipe or Energon) or a .jsonl/.csv table")
    p.add_argument("--split", default="train", help="split to show (default: train)")
    p.add_argument("--n", type=int, default=16, help="number of samples (default: 16)")
    p.add_argument("--cell-size", type=int, default=192, help="picture size of a cell in pixels")
    p.add_argument("--out", default="preview.png", help="PNG file to write (default: preview.png)")
    add_media_root(p)
    return p


def run(args: argparse.Namespace) -> int:
    """Write the PNG and print its path; exit status 2 if the dataset cannot be opened."""
    from fpipe.preview import save_preview
    from fpipe.storage import open_dataset

    if args.n < 1:
        print("fpipe preview: error: --n must be at least 1", file=sys.stderr)
        return 2
    try:
        ds = open_dataset(args.path, **open_args(args))
        count = min(args.n, len(ds.split_indices(args.split)))
        path = save_preview(ds, args.out, split=args.split, n=args.n, cell_size=args.cell_size)
    except FpipeError as e:
        print(f"fpipe preview: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path} ({count} samples of split {args.split!r})")
    return 0
