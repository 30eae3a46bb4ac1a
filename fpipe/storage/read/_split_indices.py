"""Which samples a split holds: the indices of one split of an opened dataset.

In Energon's order (shards as split.yaml lists them), after excludes.
"""

from __future__ import annotations

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.storage.config.dataset_yaml import SplitConfig
from fpipe.storage.read.record import IndexRecord
from fpipe.storage.read.webdataset import shard_stem

__all__ = ["resolve_split", "split_samples"]


def resolve_split(
    split: SplitConfig | None,
    name: str,
    record: IndexRecord,
    index_of_key,
    where: str,
) -> np.ndarray:
    """Sample indices of split ``name`` after excludes (all samples when ``split`` is None):
    :func:`split_samples` as an int64 array."""
    return as_indices(split_samples(split, name, record, index_of_key, where))


def as_indices(samples: range | np.ndarray) -> np.ndarray:
    """What :func:`split_samples` gave, as an int64 array."""
    if isinstance(samples, range):
        return np.arange(samples.start, samples.stop, dtype=np.int64)
    return samples


def split_samples(
    split: SplitConfig | None,
    name: str,
    record: IndexRecord,
    index_of_key,
    where: str,
) -> range | np.ndarray:
    """Sample indices of split ``name`` after excludes (all samples when ``split`` is None):
    a ``range`` where they are one run (shards listed in index order, none excluded, as most
    splits are: the plan then needs no array of them), else an int64 array.

    Shards come in the order split.yaml lists them (as Energon reads them; ``energon prepare
    --shuffle-tars`` lists them shuffled), samples in shard order. Exclude entries are a shard
    name, ``"<shard name>/<key in the shard>"`` (Energon reads it so: ``parts/a.tar/000035``
    is the sample of key ``000035`` in ``parts/a.tar``), ``"<shard name>/<index within
    shard>"`` when the shard has no sample of that key, or a sample key ``"<shard stem>/<key>"``.
    """
    n = record.num_samples
    if split is None:
        return range(n)
    if name not in split.split_parts:
        raise ConfigError(f"{where}: no split {name!r}; split.yaml has {sorted(split.split_parts)}")
    pos = {s: i for i, s in enumerate(record.shard_names)}
    starts = record.shard_starts()
    ids = []
    for s in split.split_parts[name] or ():
        if s not in pos:
            raise ConfigError(f"{where}: split {name!r} names shard {s!r}, not in the index")
        ids.append(pos[s])
    keep = np.ones(n if split.exclude else 0, dtype=bool)  # no excludes: no mask to build
    for entry in split.exclude or ():
        if entry in pos:
            keep[starts[pos[entry]] : starts[pos[entry] + 1]] = False
            continue
        head, _, tail = entry.rpartition("/")
        if head in pos:  # Energon's "<shard name>/<sample key>": that shard's sample of the key
            j = index_of_key(f"{shard_stem(head)}/{tail}")
            if j is not None and starts[pos[head]] <= j < starts[pos[head] + 1]:
                keep[j] = False
                continue
        if head in pos and tail.isdigit():
            count = int(starts[pos[head] + 1] - starts[pos[head]])
            if int(tail) >= count:
                raise ConfigError(
                    f"{where}: exclude entry {entry!r} names sample {int(tail)} of shard "
                    f"{head!r}, which holds {count} samples in the index (0..{count - 1})"
                )
            keep[starts[pos[head]] + int(tail)] = False
            continue
        j = index_of_key(entry)
        if j is not None:
            keep[j] = False
    if not ids:
        return np.zeros(0, dtype=np.int64)
    if ids == list(range(ids[0], ids[0] + len(ids))):  # shards in index order: one run
        runs = [(int(starts[ids[0]]), int(starts[ids[-1] + 1]))]
    else:
        runs = _shard_runs(starts, np.asarray(ids, dtype=np.int64))
    if len(runs) == 1 and keep.all():
        return range(*runs[0])
    idx = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in runs])
    return idx if keep.all() else idx[keep[idx]]


def _shard_runs(starts: np.ndarray, ids: np.ndarray) -> list[tuple[int, int]]:
    """The sample indices of shards ``ids`` in that order, as ``(first, end)`` of each run of
    consecutive shards (a split of every shard in index order is one run), not one per shard."""
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    firsts = ids[np.concatenate([[0], breaks])]
    lasts = ids[np.concatenate([breaks - 1, [len(ids) - 1]])]
    return [(int(starts[a]), int(starts[b + 1])) for a, b in zip(firsts, lasts)]
