"""How batches fill their rows: samples, packs and padding, from recipes and a length column.

A :class:`BatchLayout` lists, for one batch, the rows a model sees: one row per pack when the
recipe holds packs (a ``pack`` column, see :func:`fpipe.plan.pack`), each as long as the pack
budget; else one row per sample, padded to the batch's longest. :func:`layout_stats` sums up
padding, samples per row and load balance; ``fpipe inspect`` prints them and draws the rows.

Example:
    >>> from fpipe.core.records import Recipe, Refs
    >>> r = Recipe(step=0, key=0, refs=Refs.of(index=[0, 1, 2], tokens=[3, 5, 2], pack=[0, 0, 1]))
    >>> lay = batch_layout(r, "tokens", width=8)
    >>> lay.rows, lay.width
    (((3, 5), (2,)), 8)
    >>> round(layout_stats([lay])["padding"], 3)
    0.375
"""

from __future__ import annotations

import msgspec
import numpy as np

__all__ = ["BatchLayout", "batch_layout", "layout_stats"]


class BatchLayout(msgspec.Struct, frozen=True):
    """One batch: ``rows`` of sample lengths (a row is a pack, or one padded sample), each row
    ``width`` long; ``loads`` optionally holds a second per-row load (images per pack)."""

    step: int
    rows: tuple[tuple[int, ...], ...]
    width: int
    loads: tuple[int, ...] = ()


def batch_layout(recipe, column: str, width: int | None = None, load_column: str | None = None):
    """The layout of one recipe, with sample lengths from ``column``.

    ``width``: the row length (the pack budget); None: the longest row of the batch
    (pad-to-longest). ``load_column``: a second column summed per row (e.g. images).
    """
    refs = recipe.refs
    lengths = np.asarray(refs.column(column), dtype=np.int64)
    if "pack" in refs.columns:
        pack = np.asarray(refs.column("pack"))
        starts = np.flatnonzero(np.r_[True, pack[1:] != pack[:-1]])
        bounds = np.r_[starts, len(pack)].tolist()
    else:
        bounds = list(range(len(refs) + 1))
    rows = tuple(tuple(lengths[a:b].tolist()) for a, b in zip(bounds[:-1], bounds[1:]))
    longest = max((sum(r) for r in rows), default=0)
    loads: tuple[int, ...] = ()
    if load_column is not None:
        extra = np.asarray(refs.column(load_column), dtype=np.int64)
        loads = tuple(int(extra[a:b].sum()) for a, b in zip(bounds[:-1], bounds[1:]))
    return BatchLayout(recipe.step, rows, int(width if width is not None else longest), loads)


def layout_stats(layouts: list[BatchLayout]) -> dict:
    """``padding`` (padded share of all row positions), ``samples_per_row`` (mean, min, max),
    ``load_ratio`` (max / mean of the rows' lengths) and, with a second load,
    ``second_load_ratio``."""
    rows = [r for lay in layouts for r in lay.rows]
    used = np.asarray([sum(r) for r in rows], dtype=np.float64)
    capacity = sum(lay.width * len(lay.rows) for lay in layouts)
    sizes = np.asarray([len(r) for r in rows]) if rows else np.zeros(1)
    out = {
        "batches": len(layouts),
        "rows": len(rows),
        "padding": float(1.0 - used.sum() / capacity) if capacity else 0.0,
        "samples_per_row": (float(sizes.mean()), int(sizes.min()), int(sizes.max())),
        "load_ratio": float(used.max() / used.mean()) if len(used) and used.mean() else 0.0,
    }
    second = np.asarray([x for lay in layouts for x in lay.loads], dtype=np.float64)
    if len(second) and second.mean():
        out["second_load_ratio"] = float(second.max() / second.mean())
    return out
