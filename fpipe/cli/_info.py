"""``fpipe info DATASET``: what a prepared dataset holds, read from its index alone.

Sample and shard counts (``--shards``: samples per shard), the field map, how many samples have
each field, splits, and a summary of every metadata column (min / median / max, how many
samples lack it), with text histograms of image sizes and of lengths (tokens, characters,
frames, durations). No payload is read and torch is not imported. For a metadataset.yaml: each
split's datasets with their weights (or repetitions), samples, split parts and subflavors, and
the draw of a weighted blend (``blend_draw``) and what its weights are shares of
(``blend_unit``, when not samples).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from fpipe.cli import add_media_root, open_args
from fpipe.core.errors import FpipeError
from fpipe.storage import Dataset

__all__ = [
    "add_parser",
    "column_summaries",
    "format_info",
    "format_metadataset_info",
    "run",
    "text_histogram",
]

DESCRIPTION = """\
Show what a prepared dataset holds, from its index alone (no payload is read): samples and
shards, the field map and how many samples have each field, splits, and a summary of every
metadata column with text histograms of image sizes and lengths. For a metadataset.yaml: each
split's datasets with their weights, samples, split parts and subflavors, and how a weighted
blend draws (blend_draw: hash, the default, or quota).
"""

_LAYOUTS = {
    "tar": "tar shards, fpipe index",
    "energon": "tar shards, Energon .tar.idx index",
    "table": "table of media files",
}

#: Column name endings summarized as a length histogram.
_LENGTHS = ("tokens", "chars", "frames", "duration")


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``info`` sub-command."""
    p = sub.add_parser(
        "info",
        help="samples, shards, fields, splits and column summaries of a dataset",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "path", help="prepared folder (fpipe or Energon), a .jsonl/.csv table or a metadataset.yaml"
    )
    p.add_argument("--shards", action="store_true", help="list every shard with its samples")
    add_media_root(p)
    return p


def text_histogram(values: np.ndarray, *, bins: int = 8, width: int = 30) -> list[str]:
    """Lines of a text histogram of ``values``, one per bin: range, count and a bar. Integer
    values get integer bins (inclusive ranges, one value per bin when few).

    >>> print("\\n".join(text_histogram(np.array([1, 1, 2, 9]), bins=2, width=4)))
      1 .. 5      3  ####
      6 .. 10     1  #
    """
    values = np.asarray(values)
    if values.size == 0:
        return []
    lo, hi = values.min(), values.max()
    if values.dtype.kind in "iu":
        step = max(1, -(-(int(hi) - int(lo) + 1) // bins))
        edges = np.arange(int(lo), int(hi) + step + 1, step)
        counts, _ = np.histogram(values, bins=edges)
        labels = [
            _num(a) if step == 1 else f"{_num(a)} .. {_num(a + step - 1)}" for a in edges[:-1]
        ]
    else:
        counts, edges = np.histogram(values, bins=bins if hi > lo else 1)
        labels = [f"{_num(a)} .. {_num(b)}" for a, b in zip(edges[:-1], edges[1:])]
    top = max(int(counts.max()), 1)
    w = max(len(x) for x in labels)
    return [
        f"  {label:<{w}} {c:>5}  {'#' * max(int(c > 0), round(c / top * width))}"
        for label, c in zip(labels, counts.tolist())
    ]


def _num(x: float) -> str:
    return f"{x:.0f}" if float(x).is_integer() or abs(x) >= 100 else f"{x:.3g}"


def column_summaries(ds: Dataset) -> list[str]:
    """One line per numeric metadata column, then histograms of image sizes and lengths."""
    lines = []
    names, seen = [], []
    for name in ds.column_names:  # aliases (``width`` for ``image.width``) once, by the name
        col = ds.column(name)
        if name != "shard_id" and not any(col is c for c in seen):
            names.append(name)
            seen.append(col)
    for name in names:
        col = np.asarray(ds.column(name))
        if col.dtype.kind not in "iuf":
            continue
        ok = col[col >= 0] if col.dtype.kind in "iu" else col[~np.isnan(col)]
        missing = len(col) - len(ok)
        if len(ok) == 0:
            lines.append(f"  {name}: no values")
            continue
        stats = f"min {_num(ok.min())}, median {_num(np.median(ok))}, max {_num(ok.max())}"
        lines.append(f"  {name}: {stats}" + (f"; {missing} without" if missing else ""))
    for field in sorted({n.rsplit(".", 1)[0] for n in names if n.endswith(".width")}):
        if f"{field}.height" not in names:
            continue
        w, h = np.asarray(ds.column(f"{field}.width")), np.asarray(ds.column(f"{field}.height"))
        keep = (w >= 0) & (h >= 0)
        sizes, counts = np.unique(np.stack([w[keep], h[keep]], axis=1), axis=0, return_counts=True)
        if len(sizes) <= 8:
            lines.append(f"{field} sizes (width x height: samples):")
            order = np.argsort(-counts, kind="stable")
            lines += [f"  {sizes[j][0]} x {sizes[j][1]}: {counts[j]}" for j in order]
            continue
        for side, col in (("width", w[keep]), ("height", h[keep])):
            lines.append(f"{field} {side} histogram ({len(sizes)} distinct sizes):")
            lines += text_histogram(col)
    for name in names:
        if name.rsplit(".", 1)[-1] in _LENGTHS or name.endswith("_tokens"):
            col = np.asarray(ds.column(name))
            lines.append(f"{name} histogram:")
            lines += text_histogram(col[col >= 0] if col.dtype.kind in "iu" else col)
    return lines


def format_info(ds: Dataset, list_shards: bool = False) -> str:
    """Human-readable summary of an opened dataset (see the module docstring)."""
    layout = _LAYOUTS.get(ds.layout, ds.layout)
    lines = [f"dataset: {ds.path} ({layout})", f"samples: {len(ds)}"]
    shard_names = list(ds.shards)
    lines.append(f"shards: {len(shard_names)}")
    if list_shards and shard_names:
        counts = np.bincount(np.asarray(ds.column("shard_id")), minlength=len(shard_names))
        w = max((len(s) for s in shard_names), default=0)
        lines += [f"  {s:<{w}}  {int(c)} samples" for s, c in zip(shard_names, counts)]
    cfg = ds.config
    lines.append(f"sample_type: {cfg.sample_type}")
    if cfg.field_map:
        lines.append("field_map: " + ", ".join(f"{k}={v}" for k, v in cfg.field_map.items()))
        cover = []
        for field in cfg.field_map:
            if f"{field}.bytes" in ds.column_names:
                have = int((np.asarray(ds.column(f"{field}.bytes")) >= 0).sum())
                cover.append(f"{field} {have}/{len(ds)}")
        if cover:
            lines.append("samples with each field: " + ", ".join(cover))
    splits = getattr(ds, "split_names", ())
    if splits:
        parts = [f"{name}={len(ds.split_indices(name))}" for name in splits]
        lines.append("splits (samples): " + ", ".join(parts))
    else:
        lines.append("splits: none (all samples)")
    lines.append("metadata columns:")
    lines += column_summaries(ds)
    if ds.record.problems:
        lines.append(
            f"left out at prepare: {ds.record.problems} samples "
            f"(see {ds.path}/.fpipe/problems.jsonl)"
        )
    return "\n".join(lines)


def format_metadataset_info(path: str, open_kwargs: dict[str, Any] | None = None) -> str:
    """Each split of a metadataset: mode (a weighted blend with its draw, ``blend_draw``), and
    per dataset its share (weight normalized over the whole split, or repetitions), samples in
    its split part, path and subflavors.
    ``open_kwargs``: given to each dataset whose layout takes them (``media_root``)."""
    from fpipe.storage import load_metadataset, resolve_mix
    from fpipe.storage.read.layouts import open_taking
    from fpipe.storage.read.open_args import refuse_untaken

    md = load_metadataset(path)
    lines = [f"metadataset: {md.path}"]
    taken: list[dict[str, Any]] = []

    def opened(where: str) -> Dataset:  # with the arguments its layout takes, noted
        ds, kwargs = open_taking(where, open_kwargs)
        taken.append(kwargs)
        return ds

    for split in md.splits:
        mix = resolve_mix(md, split, training=split == "train")
        draw = ""
        if mix.mode == "blend":  # the file's blend_draw; without one the loader draws by hash
            draw = f", draw {mix.draw}" if mix.draw else ", draw hash (the default)"
            if mix.unit is not None:  # blend_unit: the weights are shares of an index column
                draw += f", weights share {mix.unit}"
        lines.append(f"split {split}: {mix.mode}, {len(mix.leaves)} dataset(s){draw}")
        for leaf in mix.leaves:
            n = len(
                opened(leaf.path).split_indices(
                    leaf.split_part, leaf.split_config, dataset_config=leaf.dataset_config
                )
            )
            kept = ""
            if leaf.subset is not None:  # subset: the samples kept of the split part
                from fpipe.storage.config.metadataset_subset import subset_bounds

                start, end = subset_bounds(leaf.subset, n, leaf.where)
                n, kept = end - start, f"[{start}:{end}] of "
            share = {
                "blend": f"weight {leaf.weight:.4g}",
                "blend_epochized": f"repetitions {leaf.repetitions:g}",
            }.get(mix.mode, "")
            lines.append(
                f"  {leaf.name}: {share + ', ' if share else ''}{n} samples "
                f"({kept}{leaf.split_part} of {leaf.path})"
                + (f", subflavors {leaf.subflavors}" if leaf.subflavors else "")
            )
            for part in leaf.join:  # joined datasets: matched by key, in the workers
                n = len(
                    opened(part.path).split_indices(
                        part.split_part, part.split_config, dataset_config=part.dataset_config
                    )
                )
                lines.append(
                    f"    joined: {n} samples ({part.split_part} of {part.path}), "
                    f"nonmatch {part.nonmatch}"
                )
            if leaf.join:
                joiner = leaf.joiner or "(the first dataset's sample type)"
                lines.append(f"    joiner: {joiner}")
        if mix.schedule is not None and len(mix.schedule.points) > 1:
            kind = "linear" if mix.schedule.linear else "steps"
            lines.append(f"  schedule ({kind}) at positions {list(mix.schedule.points)}")
    refuse_untaken(str(path), open_kwargs, taken)
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the summary; exit status 2 if the dataset cannot be opened."""
    from fpipe.storage import open_dataset
    from fpipe.storage.config.metadataset import is_metadataset

    try:
        if is_metadataset(args.path):
            print(format_metadataset_info(args.path, open_args(args)))
            return 0
        ds = open_dataset(args.path, **open_args(args))
        print(format_info(ds, args.shards))
    except FpipeError as e:
        print(f"fpipe info: error: {e}", file=sys.stderr)
        return 2
    return 0
