"""Joined datasets (``join:`` in a metadataset): samples of several datasets matched by key.

The plan tier orders the refs of the first (primary) dataset only; its shuffle, epochs and
distribution are those of any dataset. The joined (secondary) datasets are resolved here, in
the materialize tier: each worker builds, once, a sorted key lookup over each secondary
dataset's split from its index (:class:`fpipe.storage.read.keys.KeyLookup`), finds the sample with
the primary sample's key (its key inside the shard, so the shards may differ), reads and cooks
it with its own dataset.yaml, and joins the samples with the joiner's ``from_joined``
(:meth:`fpipe.samples.Sample.from_joined`: fields merged in order, as Energon does).

A primary sample without a match in a secondary dataset becomes, by that dataset's
``nonmatch``: ``error`` a :class:`~fpipe.core.errors.BadSampleError` (subject to the error
policy), ``skip`` a skipped and counted sample, ``none`` a None part (its fields None).
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import numpy as np

from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.encode.hooks import SkipSample
from fpipe.materialize.sources import DatasetSource, open_source, read_many_held
from fpipe.samples.base import BASE_FIELDS, Sample
from fpipe.storage.config.dataset_yaml import is_crude
from fpipe.storage.config.metadataset_entries import JOINER_FUNCTION

__all__ = [
    "JoinSource",
    "NoMatch",
    "joined_sample",
    "prefetch_parts",
    "read_joined",
    "with_join",
]

_PART_TAG = 2  # fold_in tag of part k's cooking rng: 2 + k (0 and 1: the primary's rngs)


@dataclasses.dataclass(frozen=True)
class JoinSource:
    """A secondary dataset of a join: how to read and cook it (``source``), the split whose
    samples are matched, the ``nonmatch`` policy, the part's name (mapping form) and the
    config / split files that split is read with (None: the dataset's own; see
    :meth:`fpipe.storage.Dataset.split_indices`)."""

    source: DatasetSource
    split_part: str
    nonmatch: str = "error"
    name: str = ""
    split_config: str | None = None
    dataset_config: str | None = None


class NoMatch(SkipSample):  # noqa: N818 - a SkipSample, counted the same way
    """A primary sample left out because a ``nonmatch: skip`` dataset has no sample with its
    key; ``where`` names the file, the key and the dataset."""

    def __init__(self, where: str):
        super().__init__(where)
        self.where = where


def with_join(
    primary: DatasetSource, parts: list[JoinSource], joiner: str | None, where: str
) -> DatasetSource:
    """``primary`` with its joined ``parts``, checked in the main process: crude and typed
    datasets are not mixed, the joiner is a registered sample type, and with the default
    ``from_joined`` every part's fields are fields of the joiner and the joiner's required
    fields are given by some part. Errors name ``where`` (the metadataset entry)."""
    from fpipe.samples import sample_type_from_name

    srcs = [primary, *(p.source for p in parts)]
    crude = [is_crude(s.sample_type) for s in srcs]
    if any(crude) and not all(crude):
        kinds = ", ".join(f"{s.path} ({s.sample_type})" for s in srcs)
        raise ConfigError(f"{where}: a join mixes crude and typed datasets: {kinds}")
    if all(crude):
        if joiner is not None:
            raise ConfigError(
                f"{where}: the datasets of this join are crude: the joined sample is one crude "
                "sample with the members of all of them, for your cooker; remove 'joiner'"
            )
        return dataclasses.replace(primary, join=tuple(parts))
    if joiner is not None and joiner.startswith(JOINER_FUNCTION):  # resolved in the worker
        return dataclasses.replace(primary, join=tuple(parts), joiner=joiner)
    try:
        cls = sample_type_from_name(joiner if joiner is not None else primary.sample_type)
    except ConfigError:
        # Not registered in this process (`fpipe plan` does not import the training code):
        # the worker resolves it, and refuses it there if it is still unknown.
        cls = None
    if (
        cls is not None
        and getattr(cls.from_joined, "__func__", None) is Sample.from_joined.__func__
    ):
        _check_fields(cls, srcs, where)
    return dataclasses.replace(primary, join=tuple(parts), joiner=joiner)


def _user_fields(cls: type) -> dict[str, Any]:
    return {f.name: f for f in dataclasses.fields(cls) if f.init and f.name not in BASE_FIELDS}


def _check_fields(cls: type, srcs: list[DatasetSource], where: str) -> None:
    from fpipe.samples import sample_type_from_name

    own = _user_fields(cls)
    given: set[str] = set()
    for src in srcs:
        fields = set(_user_fields(sample_type_from_name(src.sample_type)))
        extra = sorted(fields - set(own))
        if extra:
            raise ConfigError(
                f"{where}: joiner {cls.__name__} has no field(s) {', '.join(extra)} of "
                f"{src.path} ({src.sample_type}); its fields: {', '.join(own)}. Join into a "
                "sample type with these fields, or register one whose from_joined maps them"
            )
        given |= fields
    missing = [
        n
        for n, f in own.items()
        if n not in given and f.default is f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(
            f"{where}: no joined dataset gives field(s) {', '.join(missing)} of joiner "
            f"{cls.__name__}"
        )


def _part_dataset(m, d: int, k: int):
    ds = m.joins.get(("ds", d, k))
    if ds is None:
        ds = m.joins[("ds", d, k)] = open_source(m.sources[d].join[k].source)
    return ds


def _lookup(m, d: int, k: int):
    """The key lookup of part ``k`` of dataset ``d`` (built once per process)."""
    lk = m.joins.get(("lookup", d, k))
    if lk is None:
        from fpipe.storage.read.keys import KeyLookup, member_keys

        part = m.sources[d].join[k]
        ds = _part_dataset(m, d, k)
        idx = ds.split_indices(
            part.split_part, part.split_config, dataset_config=part.dataset_config
        )
        idx = np.asarray(idx, np.int64)
        where = f"{part.source.path} (split {part.split_part!r})"
        lk = m.joins[("lookup", d, k)] = KeyLookup(member_keys(ds, idx), idx, where)
    return lk


def part_indices(m, d: int, indices: np.ndarray) -> np.ndarray:
    """Sample index in each part of dataset ``d`` of the primary samples ``indices``, shape
    (parts, len(indices)); -1 where a part has no sample with the key."""
    from fpipe.storage.read.keys import member_keys

    keys = member_keys(m.dataset(d), np.asarray(indices, np.int64))
    return np.stack([_lookup(m, d, k).find(keys) for k in range(len(m.sources[d].join))])


def prefetch_parts(m, d: int, indices: np.ndarray) -> np.ndarray:
    """Let the parts of dataset ``d`` start fetching the matches of a recipe's samples;
    returns their :func:`part_indices`, for :func:`read_joined` to reuse."""
    found = part_indices(m, d, indices)
    for k, part in enumerate(m.sources[d].join):
        hits = found[k][found[k] >= 0]
        if len(hits):
            _part_dataset(m, d, k).prefetch(hits.tolist(), m.wanted(part.source))
    return found


def read_joined(m, d: int, indices: np.ndarray, found: np.ndarray | None = None) -> list[tuple]:
    """What :func:`joined_sample` needs of each of ``indices`` (samples of the joined dataset
    ``d``), read a batch at once (``Dataset.read_many``): ``((key, members), part reads,
    part indices)``, a part's read None where it has no match (index -1); members hold the
    exception of a failed read, raised in the sample's turn. ``found``: their
    :func:`part_indices` when already known (None: looked up here)."""
    indices = np.asarray(indices, np.int64)
    src = m.sources[d]
    if found is None:
        found = part_indices(m, d, indices)
    own = read_many_held(m.dataset(d), indices, m.wanted(src), m.decode_limits)
    reads: list[list] = []
    for k, part in enumerate(src.join):
        got: list = [None] * len(indices)
        hits = np.flatnonzero(found[k] >= 0)
        if len(hits):
            pds = _part_dataset(m, d, k)
            pread = read_many_held(pds, found[k][hits], m.wanted(part.source), m.decode_limits)
            for p, r in zip(hits.tolist(), pread):
                got[p] = r
        reads.append(got)
    return [
        (own[p], tuple(r[p] for r in reads), tuple(found[:, p].tolist()))
        for p in range(len(indices))
    ]


def joined_sample(m, d: int, index: int, restore_key: tuple, skey: int, read=None) -> Any:
    """Sample ``index`` of the joined dataset ``d``: its own sample joined with the sample of
    the same key in each part (see the module docstring for ``nonmatch``); ``read``: its entry
    of :func:`read_joined` (None: read here)."""
    from fpipe.core.rng import LazyGenerator

    src = m.sources[d]
    ds = m.dataset(d)
    (key, raw), part_reads, found = read if read is not None else read_joined(m, d, [index])[0]
    if isinstance(raw, Exception):
        raise raw
    crude = is_crude(src.sample_type)
    parts: list[Any] = []
    for k, (part, j, pread) in enumerate(zip(src.join, found, part_reads)):
        if j < 0:
            _no_match(ds, index, part)
            parts.append(None)  # nonmatch: none
            continue
        pkey, praw = pread
        if isinstance(praw, Exception):
            raise praw
        if crude:  # one crude sample with every part's members (later parts win)
            raw = {**raw, **praw}
        else:
            rng = LazyGenerator(skey, _PART_TAG + k)
            pds = _part_dataset(m, d, k)
            parts.append(m.cook(part.source, pds, j, praw, restore_key, rng, pkey))
    sample = m.cook(src, ds, index, raw, restore_key, LazyGenerator(skey, 0), key)
    if crude:
        return sample
    cls = _joiner(m, d)
    if src.join_name:  # a mapping of named parts: the joiner gets them by name
        names = [src.join_name, *(p.name for p in src.join)]
        return cls.from_joined(**dict(zip(names, [sample, *parts])))
    return cls.from_joined(sample, *parts)


def _joiner(m, d: int) -> Any:
    """The joiner of dataset ``d``: a class with ``from_joined``, or a registered joiner
    function in its place (resolved once per process)."""
    from fpipe.samples import joiner_from_name, sample_type_from_name
    from fpipe.samples.registry import imported_joiner

    cls = m.joins.get(("joiner", d))
    if cls is None:
        src = m.sources[d]
        try:
            if src.joiner is not None and src.joiner.startswith(JOINER_FUNCTION):
                fn = joiner_from_name(src.joiner[len(JOINER_FUNCTION) :])
                cls = types.SimpleNamespace(from_joined=fn)  # called as Energon calls it
            elif src.joiner is not None:  # a sample type, registered or of the user's code
                cls = imported_joiner(src.joiner, sample_type=True) or sample_type_from_name(
                    src.joiner
                )
            else:
                cls = sample_type_from_name(src.sample_type)
        except ConfigError as e:
            raise ConfigError(f"joiner of the join of {src.path}: {e}") from None
        m.joins[("joiner", d)] = cls
    return cls


def _no_match(ds, index: int, part: JoinSource) -> None:
    """Apply ``part.nonmatch`` to primary sample ``index`` of ``ds`` that has no match."""
    if part.nonmatch == "none":
        return
    from fpipe.storage.read.keys import member_key

    key = ds.key(index)
    what = (
        f"no sample with key {member_key(ds, index)!r} in joined dataset "
        f"{part.source.path} (split {part.split_part!r})"
    )
    if part.nonmatch == "skip":
        raise NoMatch(f"{ds.path}:{key}: {what} (nonmatch: skip)")
    raise BadSampleError(
        ds.path, key, f"{what}; nonmatch: error (set nonmatch: skip or none to allow it)"
    )
