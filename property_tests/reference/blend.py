"""Blends of several datasets, one position at a time (docs/design/blend.md, docs/metadataset.md).

Position ``i`` of the blend chooses a dataset; the k-th position that chose dataset ``d`` takes
the k-th ref of ``d``'s stream (its epochs one after the other, read with the root
``input_root(root, name, d)``). The choice:

* weighted by samples: ``u = uniform(ck, i)`` against the running sums of the weights in force
  (a schedule's row, a linear mixture of two rows, or an online change's float32 row);
* epochized: a keyed permutation of each blend epoch's positions into the datasets' slots;
* weighted by units (tokens): the smallest tag ``(2 S_d + l) / (2 w_d)`` within a segment of
  constant weights, ties to the lower dataset.

A blend is an iterator with a ``position`` (the positions it has given) and ``set_weights``:
an online change recorded from that position, which is the frontier since every stage after
the blend pulls lazily (see :mod:`property_tests.reference.stages`).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence

from property_tests.reference.rng import fold_in, input_root, permute, step_key, uniform
from property_tests.reference.views import EpochView, Ref, dataset_stream

CHOICE_TAG = 0xB1E2D
LINEAR_STEP = 1024  # positions per constant-weight segment of a linear schedule, by units


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Weights from global position ``points[j]`` on: ``rows[j]`` (steps), or moving linearly
    to the next row (``linear``) and keeping the last row after the last point."""

    points: tuple[int, ...]
    rows: tuple[tuple[float, ...], ...]
    linear: bool = False

    @classmethod
    def constant(cls, row: Sequence[float]) -> Schedule:
        return cls((0,), (tuple(float(w) for w in row),))

    def segment(self, i: int) -> int:
        """The index of the last point at or before ``i``."""
        j = 0
        while j + 1 < len(self.points) and self.points[j + 1] <= i:
            j += 1
        return j


def running_sums(row: Sequence[float]) -> list[float]:
    out, total = [], 0.0
    for w in row:
        total += w
        out.append(total)
    return out


def pick(row: Sequence[float], u: float) -> int:
    """The first dataset whose running sum exceeds ``u * total``; the last dataset of weight
    > 0 when rounding leaves none."""
    cdf = running_sums(row)
    x = u * cdf[-1]
    for d, c in enumerate(cdf):
        if c > x:
            return d
    return max(d for d, w in enumerate(row) if w > 0)


def float32(row: Sequence[float]) -> tuple[float, ...]:
    """The weights as the float32 values an online change stores."""
    return tuple(struct.unpack("<f", struct.pack("<f", float(w)))[0] for w in row)


def normalized(row: Sequence[float]) -> list[float]:
    total = 0.0
    for w in row:
        total += w
    return [w / total for w in row]


def linear_row(a: Sequence[float], b: Sequence[float], t: float) -> list[float]:
    return [(1 - t) * x + t * y for x, y in zip(a, b)]


class Blend:
    """A blend of ``views`` as an iterator of refs (see the module doc).

    ``mode``: ``"weighted"`` (``schedule``) or ``"epochized"`` (``counts`` refs per blend epoch
    of each dataset); ``unit``: a column the weights are shares of (weighted only);
    ``num_epochs``: blend epochs before the end (a weighted blend's epoch is the sum of the
    datasets' sizes).
    """

    def __init__(
        self,
        views: Sequence[EpochView],
        root: int,
        *,
        schedule: Schedule | None = None,
        counts: Sequence[int] | None = None,
        unit: str | None = None,
        num_epochs: int | None = None,
        name: str = "blend",
    ):
        self.views = list(views)
        self.n = len(self.views)
        self.schedule, self.counts, self.unit = schedule, counts, unit
        self.streams = [dataset_stream(v, input_root(root, name, d)) for d, v in enumerate(views)]
        self.ck = fold_in(step_key(root, name), CHOICE_TAG)
        epoch = sum(counts) if counts is not None else sum(v.size for v in self.views)
        self.limit = None if num_epochs is None else num_epochs * epoch
        self.position = 0
        self.taken = [0] * self.n
        self.entries: list[tuple[int, tuple[float, ...]]] = []  # online changes
        self.ahead: list[Ref | None] = [None] * self.n  # each dataset's next ref, once read
        self.segment_start: int | None = None
        self.used = [0] * self.n  # units given in the current segment

    # -- online changes -------------------------------------------------------------------
    def set_weights(self, row: Sequence[float]) -> None:
        """New weights (stored as float32) from the frontier: the next position drawn."""
        assert self.schedule is not None, "online weights need a weighted blend"
        if self.entries and self.entries[-1][0] == self.position:
            self.entries.pop()  # a later change at the same frontier replaces it
        self.entries.append((self.position, float32(row)))

    def entry_at(self, i: int) -> tuple[int, tuple[float, ...]] | None:
        found = None
        for entry in self.entries:
            if entry[0] <= i:
                found = entry
        return found

    # -- the choice -----------------------------------------------------------------------
    def choose(self, i: int) -> int:
        if self.counts is not None:
            total = sum(self.counts)
            e, t = divmod(i, total)
            slot = permute(fold_in(self.ck, e), total, t)
            bound = 0
            for d, c in enumerate(self.counts):
                bound += c
                if slot < bound:
                    return d
            raise AssertionError("slot out of range")
        if self.unit is not None:
            return self.choose_by_units(i)
        u = uniform(self.ck, i)
        entry = self.entry_at(i)
        if entry is not None:
            return pick(entry[1], u)
        s = self.schedule
        assert s is not None
        j = s.segment(i)
        if not s.linear or j + 1 == len(s.points):
            return pick(s.rows[j], u)
        a, b = s.rows[j], s.rows[j + 1]
        t = (i - s.points[j]) / (s.points[j + 1] - s.points[j])
        sa, sb = sum(a), sum(b)
        lam = t * sb / ((1 - t) * sa + t * sb)
        if u < lam:
            return pick(b, u / lam)
        return pick(a, (u - lam) / (1 - lam))

    def unit_segment(self, i: int) -> tuple[int, list[float]]:
        """(start, normalized weights) of the constant-weight segment holding ``i``."""
        entry = self.entry_at(i)
        if entry is not None:
            return entry[0], normalized(entry[1])
        s = self.schedule
        assert s is not None
        j = s.segment(i)
        start = s.points[j]
        if not s.linear or j + 1 == len(s.points):
            return start, normalized(s.rows[j])
        lo = start + (i - start) // LINEAR_STEP * LINEAR_STEP
        hi = min(lo + LINEAR_STEP, s.points[j + 1])
        mid = (lo + hi - 1) // 2
        t = (mid - start) / (s.points[j + 1] - start)
        return lo, normalized(linear_row(s.rows[j], s.rows[j + 1], t))

    def peek(self, d: int) -> Ref:
        if self.ahead[d] is None:
            self.ahead[d] = next(self.streams[d])
        ref = self.ahead[d]
        assert ref is not None
        return ref

    def units(self, ref: Ref) -> int:
        assert self.unit is not None
        return max(1, round(ref.meta[self.unit]))

    def choose_by_units(self, i: int) -> int:
        start, w = self.unit_segment(i)
        if start != self.segment_start:
            self.segment_start, self.used = start, [0] * self.n
        best, best_tag = -1, 0.0
        for d in range(self.n):
            if not w[d] > 0:
                continue
            length = self.units(self.peek(d))
            tag = (2 * self.used[d] + length) / (2.0 * w[d])
            if best < 0 or tag < best_tag:
                best, best_tag = d, tag
        return best

    # -- the stream -----------------------------------------------------------------------
    def __iter__(self):
        return self

    def __next__(self) -> Ref:
        if self.limit is not None and self.position >= self.limit:
            raise StopIteration
        d = self.choose(self.position)
        ref = self.peek(d)
        self.ahead[d] = None
        if self.unit is not None:
            self.used[d] += self.units(ref)
        self.taken[d] += 1
        self.position += 1
        return ref


# -- the quota draw (draw="quota", docs/design/blend.md) ---------------------------------------
QUOTA_BLOCK = 4096
QUOTA_PHASE_TAG, QUOTA_ORDER_TAG = 0x9A5E, 0x0BDE


def quota_shares(row: Sequence[float]) -> list[int]:
    """Whole weights summing below 2**31 as they are; else ``round(w / fsum(w) * 2**24)``,
    at least 1 for a weight above 0."""
    import math

    total = math.fsum(row)
    if all(float(w).is_integer() for w in row) and total < 1 << 31:
        return [int(w) for w in row]
    return [max(1, round(w / total * float(1 << 24))) if w > 0 else 0 for w in row]


def quota_choice(ck: int, segments: Sequence[tuple[int, Sequence[int]]], i: int) -> int:
    """The dataset of position ``i`` when segment ``(start, shares)`` holds the positions from
    ``start`` to the next segment's start: one position at a time, blocks counted from 0."""
    start, q = [s for s in segments if s[0] <= i][-1]
    t, total = i - start, sum(q)
    phase = [fold_in(fold_in(ck, QUOTA_PHASE_TAG, start), d) % total for d in range(len(q))]

    def counts(k: int) -> list[int]:
        return [(k * QUOTA_BLOCK * q[d] + phase[d]) // total for d in range(len(q))]

    k = 0
    while sum(counts(k + 1)) <= t:
        k += 1
    lo, hi = counts(k), counts(k + 1)
    size = sum(hi) - sum(lo)
    slot = permute(fold_in(ck, QUOTA_ORDER_TAG, start, k), size, t - sum(lo))
    bound = 0
    for d in range(len(q)):
        bound += hi[d] - lo[d]
        if slot < bound:
            return d
    raise AssertionError("unreachable: the slots of a block are its datasets' counts")
