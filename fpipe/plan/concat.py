"""Concatenation of views: validation and test splits of a metadataset, in one pass.

Position ``p`` of the concatenation is position ``p - start[d]`` of view ``d``, where view
``d`` covers ``[start[d], start[d] + size[d])``: no shuffle, no weights, no repetition. An
optional ``limit`` keeps the first ``limit`` positions.
"""

from __future__ import annotations

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.core.graph import input_root
from fpipe.core.records import Config, Refs
from fpipe.core.stage import View

__all__ = ["ConcatConfig", "concat"]


class ConcatConfig(Config, frozen=True):
    """Views ``datasets`` (names) of ``sizes`` refs one after the other, cut at ``limit``."""

    datasets: tuple[str, ...]
    sizes: tuple[int, ...]
    limit: int | None = None


def concat(
    views: list[View],
    *,
    names: list[str] | None = None,
    limit: int | None = None,
    name: str = "concat",
) -> View:
    """One view that visits ``views`` in order (the first ``limit`` positions when given).

    Example:
        >>> from fpipe.plan.source import samples
        >>> v = concat([samples(2, dataset=0), samples(3, dataset=1)], limit=4)
        >>> v.size, v.gather(0, 0, np.arange(4)).triples()
        (4, [(0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0)])
    """
    names = list(names) if names is not None else [f"d{i}" for i in range(len(views))]
    if not views or len(names) != len(views) or len(set(names)) != len(names):
        raise ConfigError(f"concat needs one unique name per view, got {names}")
    if limit is not None and limit < 0:
        raise ConfigError(f"limit must be >= 0, got {limit}")
    sizes = tuple(v.size for v in views)
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    total = int(starts[-1]) if limit is None else min(int(starts[-1]), limit)
    config = ConcatConfig(datasets=tuple(names), sizes=sizes, limit=limit)

    def gather(key, epoch, positions):
        p = np.asarray(positions, dtype=np.int64)
        which = np.searchsorted(starts, p, side="right") - 1
        chunks, order = [], []
        for d in np.unique(which).tolist():
            m = np.flatnonzero(which == d)
            v = views[d]
            chunks.append(v.gather(input_root(key, name, d), epoch, p[m] - starts[d]))
            order.append(m)
        if not chunks:
            return views[0].gather(input_root(key, name, 0), epoch, p)
        out = Refs.concat(chunks)
        if len(chunks) == 1:
            return out
        inv = np.empty(len(p), dtype=np.int64)
        inv[np.concatenate(order)] = np.arange(len(p), dtype=np.int64)
        return out[inv]

    return View(name=name, config=config, size=total, gather=gather, inputs=tuple(views))
