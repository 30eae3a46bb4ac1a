"""Datasets and their epochs, one sample at a time (docs/plan.md, docs/design/rng.md).

A :class:`Dataset` is a split's samples in index order with their metadata. Its epoch ``e`` is
an order of its positions: the slices of the slice shuffle (``max_samples_per_sequence``, or
Energon's ragged slices along shards), permuted per epoch by the keyed permutation, each slice
read in order. A dataset's *stream* is its epochs one after the other.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from property_tests.reference.rng import fold_in, permute, step_key


class Ref(NamedTuple):
    """A sample reference: dataset id, sample index, epoch, and the sample's metadata."""

    dataset: int
    index: int
    epoch: int
    meta: Mapping[str, Any]

    @property
    def triple(self) -> tuple[int, int, int]:
        return (self.dataset, self.index, self.epoch)


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Samples ``indices`` (index order; position p is sample ``indices[p]``) of dataset
    ``dataset``; ``columns[name][index]`` is a sample's metadata value."""

    indices: tuple[int, ...]
    dataset: int = 0
    columns: Mapping[str, Sequence[Any]] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, n: int, dataset: int = 0, **columns: Sequence[Any]) -> Dataset:
        return cls(tuple(range(n)), dataset, {k: list(v) for k, v in columns.items()})

    @property
    def size(self) -> int:
        return len(self.indices)

    def ref(self, position: int, epoch: int) -> Ref:
        i = self.indices[position]
        meta = {name: col[i] for name, col in self.columns.items()}
        return Ref(self.dataset, i, epoch, meta)


def fixed_slices(n: int, k: int) -> list[int]:
    """Starts of the slices of ``k`` consecutive positions (the last one short)."""
    return list(range(0, n, k))


def shard_slices(shard_ids: Sequence[int] | None, n: int, k: int | None) -> list[int]:
    """Energon's slices (docs/energon_migration.md): a slice never crosses a shard; with a
    limit ``k`` a shard longer than ``1.5 * k`` is cut into ``count = round(len / k)`` slices,
    slice ``i`` starting ``int(i * (len / count))`` into the shard."""
    if n == 0:
        return []
    edges = [0]
    if shard_ids is not None:
        edges += [p for p in range(1, n) if shard_ids[p] != shard_ids[p - 1]]
    edges.append(n)
    starts = []
    for a, b in zip(edges, edges[1:]):
        length = b - a
        if k is None or length <= k * 1.5:
            starts.append(a)
            continue
        count = max(round(length / k), 1)
        starts += [a + int(i * (length / count)) for i in range(count)]
    return starts


@dataclasses.dataclass(frozen=True)
class EpochView:
    """A dataset whose epochs visit the slices starting at ``starts`` in a keyed order (None:
    index order, no slice shuffle). The view's key is ``step_key(root, name)``."""

    data: Dataset
    starts: tuple[int, ...] | None = None
    name: str = "slice_shuffle"

    @property
    def size(self) -> int:
        return self.data.size

    def order(self, root: int, epoch: int) -> list[int]:
        """The positions of epoch ``epoch`` in the order they are read: slot ``s`` reads slice
        ``pi(s)`` of the permutation keyed ``fold_in(step_key(root, name), epoch)``."""
        n = self.size
        if self.starts is None or len(self.starts) <= 1:
            return list(range(n))
        starts = list(self.starts)
        ends = starts[1:] + [n]
        ek = fold_in(step_key(root, self.name), epoch)
        out: list[int] = []
        for slot in range(len(starts)):
            j = permute(ek, len(starts), slot)
            out.extend(range(starts[j], ends[j]))
        return out

    def epoch(self, root: int, epoch: int) -> Iterator[Ref]:
        for p in self.order(root, epoch):
            yield self.data.ref(p, epoch)


def slice_shuffled(data: Dataset, k: int) -> EpochView:
    """``slice_shuffle(view, k)``: slices of ``k`` consecutive positions."""
    return EpochView(data, tuple(fixed_slices(data.size, k)))


def dataset_stream(view: EpochView, root: int) -> Iterator[Ref]:
    """The dataset's epochs one after the other, forever."""
    for e in itertools.count():
        yield from view.epoch(root, e)


def repeat(view: EpochView, root: int, num_epochs: int | None = None) -> Iterator[Ref]:
    """``repeat(view, num_epochs)``: the epochs of one dataset as the plan's stream."""
    epochs = itertools.count() if num_epochs is None else range(num_epochs)
    for e in epochs:
        yield from view.epoch(root, e)
