"""``fpipe inspect DATASET --plot out.png``: how the first batches fill their rows.

Only the plan runs (metadata, no payload). Each batch is drawn as rows of samples in colour and
padding in grey: one row per pack when packing (``--budget``), else one row per sample padded
to the batch's longest. Printed: padding %, samples per row, and load balance (max / mean row
load, and of the second budget's load when there is one).

    fpipe inspect data/vqa --batch-size 16 --length-column tokens            # pad-to-longest
    fpipe inspect data/vqa --batch-size 16 --length-column tokens --budget 4096 \\
        --budget-column images=8 --strategy balanced --plot packs.png

DATASET is a prepared folder or a plan YAML file (see ``fpipe plan``). The report is made of
sections (:data:`SECTIONS`); a tool that shows more about the same batches adds one.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from fpipe.core.errors import ConfigError, FpipeError
from fpipe.plan.layout import BatchLayout, batch_layout, layout_stats

if TYPE_CHECKING:
    from fpipe.datasets.plan_config import PlanConfig

__all__ = ["InspectContext", "SECTIONS", "add_parser", "draw_layouts", "inspect", "run"]

PADDING = (200, 200, 200)
PALETTE = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (23, 190, 207),
]


@dataclasses.dataclass(frozen=True)
class InspectContext:
    """What the sections see: the config, the first recipes and their layouts."""

    config: PlanConfig
    recipes: list
    layouts: list[BatchLayout]


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``inspect`` sub-command."""
    from fpipe.cli._plan import add_config_arguments

    p = sub.add_parser(
        "inspect",
        help="padding, packs and load balance of the first batches (no payload is read)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dataset", help="prepared dataset folder, or a plan YAML file")
    p.add_argument("--batches", type=int, default=4, help="batches to look at (default 4)")
    p.add_argument("--plot", help="write a PNG of the batches' rows here")
    p.add_argument("--length-column", default="tokens", help="index column of sample lengths")
    p.add_argument("--budget", type=int, help="pack samples up to this length (on the column)")
    p.add_argument(
        "--budget-column",
        action="append",
        default=[],
        metavar="NAME=LIMIT",
        help="another pack budget on an index column, e.g. images=8 (repeatable)",
    )
    p.add_argument("--strategy", default="ffd", help="greedy, ffd, bfd or balanced")
    p.add_argument("--packing-buffer-size", type=int, default=1000)
    add_config_arguments(p)
    return p


def _budgets(args) -> dict[str, int]:
    budgets = {}
    if args.budget is not None:
        budgets[args.length_column] = args.budget
    for item in args.budget_column:
        name, sep, limit = item.partition("=")
        if not sep or not limit.strip().lstrip("-").isdigit():
            raise ConfigError(f"--budget-column takes NAME=LIMIT, got {item!r}")
        budgets[name.strip()] = int(limit)
    if budgets and args.budget is None:
        raise ConfigError("--budget-column needs --budget (the budget on --length-column)")
    return budgets


def inspect(
    cfg: PlanConfig,
    *,
    batches: int,
    length_column: str,
    budgets: dict,
    strategy: str = "ffd",
    packing_buffer_size: int = 1000,
) -> InspectContext:
    """Plan the first ``batches`` batches of ``cfg`` (a plan config, see ``fpipe plan``),
    packing under ``budgets`` when given, and lay out their rows."""
    import msgspec

    from fpipe.datasets.plan_config import build_dataset
    from fpipe.plan import pack

    columns = [length_column, *[c for c in budgets if c != length_column]]
    stages = []
    if budgets:
        stages = [pack(budgets, strategy=strategy, packing_buffer_size=packing_buffer_size)]
    options = msgspec.structs.replace(cfg.options, columns=tuple(columns), plan_stages=stages)
    cfg = msgspec.structs.replace(cfg, options=options)
    plan = build_dataset(cfg).plan
    state, recipes = plan.init(), []
    while len(recipes) < batches:
        state, out = plan.next(state, 1)
        if not len(out):
            break
        recipes.append(out[0])
    width = budgets.get(length_column)
    second = next((c for c in budgets if c != length_column), None)
    layouts = [batch_layout(r, length_column, width, second) for r in recipes]
    return InspectContext(cfg, recipes, layouts)


def packing_section(ctx: InspectContext) -> list[str]:
    """Padding, samples per row and load balance of the batches."""
    s = layout_stats(ctx.layouts)
    mean, lo, hi = s["samples_per_row"]
    kind = "pack" if any("pack" in r.refs.columns for r in ctx.recipes) else "row"
    lines = [
        f"{s['batches']} batches, {s['rows']} {kind}s: padding {100 * s['padding']:.1f}%",
        f"samples per {kind}: mean {mean:.2f}, min {lo}, max {hi}",
        f"load balance (max/mean {kind} length): {s['load_ratio']:.3f}",
    ]
    if "second_load_ratio" in s:
        lines.append(f"second budget's load balance (max/mean): {s['second_load_ratio']:.3f}")
    return lines


#: Report sections, in order: ``(title, fn(InspectContext) -> lines)``.
SECTIONS: list[tuple[str, Callable[[InspectContext], list[str]]]] = [
    ("packing", packing_section),
]


def draw_layouts(layouts: list[BatchLayout], path: str, *, width_px: int = 640) -> None:
    """Draw each batch as rows of samples (alternating colours) and padding (grey), batches one
    under the other, and save a PNG at ``path``."""
    from PIL import Image, ImageDraw

    row_h, gap, label_h = 8, 6, 12
    height = sum(label_h + len(lay.rows) * (row_h + 1) + gap for lay in layouts) + gap
    widest = max((lay.width for lay in layouts), default=1) or 1
    scale = width_px / widest
    img = Image.new("RGB", (width_px + 2 * gap, max(height, 1)), "white")
    draw = ImageDraw.Draw(img)
    y = gap
    for lay in layouts:
        draw.text((gap, y), f"batch {lay.step}", fill=(0, 0, 0))
        y += label_h
        for r, row in enumerate(lay.rows):
            x = gap
            draw.rectangle([x, y, x + lay.width * scale - 1, y + row_h - 1], fill=PADDING)
            for i, n in enumerate(row):
                w = n * scale
                colour = PALETTE[(i + r) % len(PALETTE)]
                draw.rectangle([x, y, max(x, x + w - 1), y + row_h - 1], fill=colour)
                x += w
            y += row_h + 1
        y += gap
    img.save(path)


def run(args: argparse.Namespace) -> int:
    """Print the report (and write the plot); exit status 2 on a bad config."""
    from fpipe.cli._plan import plan_overrides
    from fpipe.datasets.plan_config import load_plan_config

    try:
        if args.batch_size is None and args.global_batch_size is None:
            args.batch_size = 16
        cfg = load_plan_config(args.dataset, plan_overrides(args))
        ctx = inspect(
            cfg,
            batches=args.batches,
            length_column=args.length_column,
            budgets=_budgets(args),
            strategy=args.strategy,
            packing_buffer_size=args.packing_buffer_size,
        )
    except (FpipeError, KeyError) as e:
        print(f"fpipe inspect: error: {e}", file=sys.stderr)
        return 2
    for title, section in SECTIONS:
        print(f"[{title}]")
        for line in section(ctx):
            print(f"  {line}")
    if args.plot:
        draw_layouts(ctx.layouts, args.plot)
        print(f"wrote {args.plot}")
    return 0
