"""Which samples a split holds: building split.yaml at prepare, resolving it on open.

- :func:`build_split_config`: the split.yaml ``fpipe prepare`` writes (ratios, shard globs, or
  a given :class:`~fpipe.storage.config.dataset_yaml.SplitConfig`);
- :func:`resolve_split`: the sample indices of one split of an opened dataset, in Energon's
  order (shards as split.yaml lists them), after excludes.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.storage.config.dataset_yaml import SplitConfig, parse_split_ratios
from fpipe.storage.paths import expand_braces
from fpipe.storage.read.record import IndexRecord

__all__ = ["build_split_config", "resolve_split"]


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


def resolve_split(
    split: SplitConfig | None,
    name: str,
    record: IndexRecord,
    index_of_key,
    where: str,
) -> np.ndarray:
    """Sample indices of split ``name`` after excludes (all samples when ``split`` is None).

    Shards come in the order split.yaml lists them (as Energon reads them; ``energon prepare
    --shuffle-tars`` lists them shuffled), samples in shard order. Exclude entries are a shard
    name, ``"<shard name>/<index within shard>"`` or a sample key ``"<shard stem>/<key>"``.
    """
    n = record.num_samples
    if split is None:
        return np.arange(n, dtype=np.int64)
    if name not in split.split_parts:
        raise ConfigError(f"{where}: no split {name!r}; split.yaml has {sorted(split.split_parts)}")
    pos = {s: i for i, s in enumerate(record.shard_names)}
    starts = record.shard_starts()
    ids = []
    for s in split.split_parts[name] or ():
        if s not in pos:
            raise ConfigError(f"{where}: split {name!r} names shard {s!r}, not in the index")
        ids.append(pos[s])
    keep = np.ones(n, dtype=bool)
    for entry in split.exclude or ():
        if entry in pos:
            keep[starts[pos[entry]] : starts[pos[entry] + 1]] = False
            continue
        head, _, tail = entry.rpartition("/")
        if head in pos and tail.isdigit():
            j = starts[pos[head]] + int(tail)
            if j < starts[pos[head] + 1]:
                keep[j] = False
            continue
        j = index_of_key(entry)
        if j is not None:
            keep[j] = False
    if not ids:
        return np.zeros(0, dtype=np.int64)
    idx = np.concatenate([np.arange(starts[i], starts[i + 1], dtype=np.int64) for i in ids])
    return idx[keep[idx]]
