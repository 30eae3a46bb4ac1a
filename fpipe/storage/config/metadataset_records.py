"""The records a metadataset is read into: a resolved split's datasets (:class:`Leaf`, with
the :class:`JoinPart` datasets joined to it and its :class:`AuxRef` stores), a weighted
blend's :class:`MixSchedule`, and a reference to a nested metadataset (:class:`NestedRef`).
Plain frozen data: :mod:`fpipe.storage.config.metadataset_entries` and
:mod:`fpipe.storage.config.metadataset_join` build them from the file, the plan tier reads
them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from fpipe.storage.config.metadataset_subset import SampleRange

__all__ = ["AuxRef", "JoinPart", "Leaf", "MixSchedule", "NestedRef"]


class JoinPart(msgspec.Struct, frozen=True, kw_only=True):
    """A secondary dataset of a ``join:``: its samples are found by the primary's sample keys.

    ``nonmatch`` says what a primary sample without a match here becomes: ``"error"`` (a bad
    sample), ``"skip"`` (left out, counted) or ``"none"`` (this part's fields are None);
    ``name``: the part's key when ``join:`` is a mapping (passed to a custom joiner by name);
    ``dataset_config`` / ``split_config``: the part's config / split file to read instead of
    ``dataset.yaml`` / ``split.yaml`` (file names in its index folder).
    """

    path: str
    split_part: str
    nonmatch: str = "error"
    subflavors: dict[str, Any] = msgspec.field(default_factory=dict)
    name: str = ""
    dataset_config: str | None = None
    split_config: str | None = None


class AuxRef(msgspec.Struct, frozen=True, kw_only=True):
    """An auxiliary file store of a crude dataset (Energon's ``aux:``): cookers get it as the
    keyword ``name`` and read files from it by name. ``kind``: ``"filesystem"`` (a folder,
    ``filesystem://dir``) or ``"dataset"`` (a prepared dataset, files named
    ``<sample key>.<member>``); ``path``: absolute, or the URL of a store on object
    storage."""

    name: str
    path: str
    kind: str


class Leaf(msgspec.Struct, frozen=True, kw_only=True):
    """One dataset of a resolved split.

    ``name``: unique within the split (schedule keys, stats and messages use it); ``path``:
    absolute dataset folder or table; ``split_part``: the split of that dataset to read;
    ``subflavors``: labels set on every sample; ``weight`` (weighted blends) or
    ``repetitions`` (epochized blends); ``where``: file and entry, for messages; ``join``:
    the secondary datasets joined to this one by sample key (:class:`JoinPart`); ``joiner``:
    the registered sample type the parts are joined into (``function:module.name``: a
    registered joiner function); ``join_name``: the primary's key when ``join:`` is a mapping;
    ``shuffle_over_epochs_multiplier``: this dataset's factor of Energon's multiplier (the
    product down the levels; None: slices in index order); ``dataset_config`` /
    ``split_config``: the dataset's config / split file to read instead of ``dataset.yaml`` /
    ``split.yaml`` (file names in its index folder); ``aux``: auxiliary file stores passed to the
    cookers of a crude dataset (:class:`AuxRef`); ``subset``: the range of the split's samples
    kept (a metadataset's ``subset:``, composed down the levels; None: all); ``open_kwargs``:
    the entry's own open arguments, over the loader's (a Megatron corpus's GPT sequences:
    ``sequence_length``, ``eod_token``...).
    """

    name: str
    path: str
    split_part: str
    subflavors: dict[str, Any] = msgspec.field(default_factory=dict)
    weight: float = 1.0
    repetitions: float = 1.0
    where: str = ""
    join: tuple[JoinPart, ...] = ()
    joiner: str | None = None
    join_name: str = ""
    shuffle_over_epochs_multiplier: int | None = 1
    dataset_config: str | None = None
    split_config: str | None = None
    aux: tuple[AuxRef, ...] = ()
    subset: SampleRange | None = None
    open_kwargs: dict[str, Any] = msgspec.field(default_factory=dict)


class MixSchedule(msgspec.Struct, frozen=True, kw_only=True):
    """A weighted blend's weights over the run, one per leaf, as the file gives them.

    ``weights[p]`` is in force from global sample position ``points[p]`` (the first is 0);
    ``linear``: the weights move linearly between points (``schedule_mode: linear``). Plain
    data: the plan tier builds its own schedule from it (:class:`fpipe.plan.WeightSchedule`).
    """

    points: tuple[int, ...]
    weights: tuple[tuple[float, ...], ...]
    linear: bool = False


class NestedRef(msgspec.Struct, frozen=True, kw_only=True):
    """A reference to another metadataset file, checked: its split ``split_part`` is walked
    next, its leaves named ``<name>/<leaf>``, with ``subflavors`` merged in, the multiplier
    composed with ``multiplier`` and ``subset`` applied."""

    path: Path | str  # a str: the URL of a metadataset file on object storage
    split_part: str
    name: str
    subflavors: dict[str, Any]
    multiplier: int | None
    subset: SampleRange | None
