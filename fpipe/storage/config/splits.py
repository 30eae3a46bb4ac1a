"""The split.yaml ``fpipe prepare`` writes: ratios, shard globs, or a given split config.

:func:`build_split_config` makes the :class:`~fpipe.storage.config.dataset_yaml.SplitConfig`;
:func:`fpipe.storage.read._split_indices.resolve_split` resolves it on an opened dataset.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from fpipe.storage.config.dataset_yaml import SplitConfig, parse_split_ratios
from fpipe.storage.paths import expand_braces

__all__ = ["build_split_config"]


def build_split_config(
    split: str | Mapping[str, Any] | SplitConfig | None,
    shards: list[str],
    exclude: Iterable[str],
    seed: int | None,
) -> SplitConfig | None:
    """The split.yaml ``fpipe prepare`` writes for ``shards``.

    ``split`` is ratios (``"8,1,1"``: train/val/test by shard counts, shards shuffled with
    ``seed`` first when given), a mapping split name -> shard names or globs (braces
    expanded), or a :class:`SplitConfig`; ``None`` with excludes puts every shard in train.
    """
    exclude = list(exclude)
    if split is None:
        if not exclude:
            return None
        return SplitConfig(split_parts={"train": list(shards)}, exclude=exclude)
    if isinstance(split, SplitConfig):
        return SplitConfig(split_parts=split.split_parts, exclude=list(split.exclude) + exclude)
    if isinstance(split, Mapping):
        parts = {}
        for name, pats in split.items():
            pats = [pats] if isinstance(pats, str) else list(pats)
            pats = [q for p in pats for q in expand_braces(p)]
            parts[str(name)] = [s for s in shards if any(fnmatch.fnmatch(s, p) for p in pats)]
        return SplitConfig(split_parts=parts, exclude=exclude)
    ratios = parse_split_ratios(split)
    order = list(shards)
    if seed is not None:
        perm = np.random.Generator(np.random.Philox(seed)).permutation(len(order))
        order = [order[i] for i in perm]
    parts, start, acc = {}, 0, 0.0
    for name, r in ratios.items():
        acc += r
        end = len(order) if name == list(ratios)[-1] else round(acc * len(order))
        parts[name] = sorted(order[start:end])
        start = end
    return SplitConfig(split_parts=parts, exclude=exclude)
