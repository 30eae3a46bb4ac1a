"""Counting a blend by units over many positions, without building them (what a seek runs).

Within a segment of constant weights, a blend by units (see :mod:`fpipe.plan._blend_units`)
takes its refs in the order of their tags, ``(S + l / 2) / w`` for a ref of ``l`` units after
``S`` units of its dataset in the segment, ties to the lower dataset and then to stream order:
the first ``m`` choices are the ``m`` smallest ``(tag, dataset, index)``. A dataset's tags
increase along its stream, so how many of its refs have a tag up to ``t`` follows from its
cumulative units. An epoch holds every sample of the dataset once (in another order), so every
epoch holds the same units: only the epochs where the count crosses ``t`` are read, never the
epochs in between. A bisection over the float64 values of ``t`` finds the ``m``-th smallest tag
(64 halvings at most), and with it each dataset's count and units. The tags are the float64
values :func:`fpipe.plan._blend_units.take_by_units` computes, so the counts are those of
building the choices, whatever ``m``.

Example (equal shares of units: dataset 0's epochs hold 1 and 3, dataset 1's one ref of 2):
    >>> units = {0: np.array([1, 3]), 1: np.array([2])}
    >>> count_segment(lambda d, e: units[d], (2, 1), np.array([0.5, 0.5]), (0, 0), (0, 0), 7)
    ([4, 3], [8, 6])
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Sequence

import numpy as np

from fpipe.core.records import Refs
from fpipe.plan._blend_units import check_counter, take_by_units

__all__ = ["Uncountable", "count_segment", "pass_by_units"]

_FLOAT_BITS_INF = 0x7FF0000000000000  # the bits of float64 +inf (above every tag)
#: A segment's choices are counted (not built) past this many times the refs of an epoch of
#: its datasets: counting reads a few epochs of each, building reads every ref chosen.
_COUNT_PAST = 4
_BUILD_CHUNK = 1 << 16  # choices built at once where a segment is short


class Uncountable(Exception):
    """An epoch of a dataset holds other units than the epoch the count started in (a view
    whose epochs differ): the caller builds the choices instead."""


def _float(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<q", bits))[0]


class _Stream:
    """One dataset's stream from ref ``taken`` on, ``used`` units into the segment, weight
    ``w``: its tags epoch by epoch (read and kept only where a count needs them)."""

    def __init__(
        self, units: Callable[[int], np.ndarray], size: int, taken: int, used: int, w: float
    ):
        self.units, self.size, self.used, self.w2 = units, size, used, 2.0 * w
        self.first, self.skip = divmod(taken, size)  # the epoch and position of ref ``taken``
        self.prefixes: dict[int, np.ndarray] = {}
        self.tag_cache: dict[int, np.ndarray] = {}
        prefix = self.prefix(self.first)
        self.total, self.base = int(prefix[-1]), int(prefix[self.skip])
        self.top_unit = int(np.diff(prefix).max())  # every epoch holds the same refs

    def prefix(self, epoch: int) -> np.ndarray:
        """Units before each position of ``epoch`` (and the epoch's total last)."""
        got = self.prefixes.get(epoch)
        if got is None:
            u = np.asarray(self.units(epoch), dtype=np.int64)
            got = np.zeros(len(u) + 1, dtype=np.int64)
            np.cumsum(u, out=got[1:])
            if self.prefixes and int(got[-1]) != self.total:
                raise Uncountable(f"epoch {epoch} holds {int(got[-1])} units, not {self.total}")
            self.prefixes[epoch] = got
        return got

    def offset(self, epoch: int) -> int:
        """Units of the segment before the first ref of ``epoch`` (``epoch >= first``)."""
        return self.used + (epoch - self.first) * self.total - self.base

    def tags(self, epoch: int) -> np.ndarray:
        """The tags of the stream's refs in ``epoch`` (from ref ``taken`` on in the first)."""
        got = self.tag_cache.get(epoch)
        if got is None:
            p = self.prefix(epoch)
            a = self.skip if epoch == self.first else 0
            offset = self.offset(epoch)
            # past 2**62 units (far past the 2**48 a counter holds: any ref taken there is
            # refused), in float64, so that a bisection may look there
            before = (float(offset) if offset + self.total >= 1 << 62 else offset) + p[a:-1]
            got = (2 * before + (p[a + 1 :] - p[a:-1])) / self.w2
            self.tag_cache[epoch] = got
        return got

    def before(self, epoch: int) -> int:
        """Refs of the stream before ``epoch`` (none before its first)."""
        return (epoch - self.first) * self.size - self.skip if epoch > self.first else 0

    def middle(self, t: float) -> int:
        """The epoch whose refs' tags are near ``t``: the refs of every epoch at least two
        before it have tags below ``t``, those of every epoch two after it above (a tag of a
        ref in epoch ``e`` lies within the units of the segment up to ``e``'s end, over w)."""
        x = t * self.w2 / 2 - self.used + self.base
        return self.first + max(0, int(x // self.total))

    def bounds(self, t: float) -> tuple[int, int]:
        """(at least, at most) the refs with a tag up to ``t``, from the epochs alone."""
        mid = self.middle(t)
        return self.before(mid - 1), self.before(mid + 2)

    def count(self, t: float, strict: bool = False) -> int:
        """The refs with a tag up to ``t`` (below ``t`` when ``strict``)."""
        mid = self.middle(t)
        for epoch in range(max(self.first, mid - 1), mid + 2):
            tags = self.tags(epoch)
            k = int(np.searchsorted(tags, t, side="left" if strict else "right"))
            if k < len(tags):
                return self.before(epoch) + k
        return self.before(mid + 2)

    def units_past(self, t: float) -> int:
        """Units the stream has given in the segment, at least, once the refs with a tag up to
        ``t`` are taken: its next ref's tag is above ``t``."""
        return int(t * self.w2 / 2 - self.top_unit / 2) - 1

    def units_of_first(self, k: int) -> int:
        """Units of the stream's first ``k`` refs."""
        epoch, pos = divmod(self.first * self.size + self.skip + k, self.size)
        extra = int(self.prefix(epoch)[pos]) if pos else 0
        return self.offset(epoch) - self.used + extra


def count_segment(
    epoch_units: Callable[[int, int], np.ndarray],
    sizes: Sequence[int],
    weights: np.ndarray,
    taken: Sequence[int] | np.ndarray,
    used: Sequence[int] | np.ndarray,
    m: int,
) -> tuple[list[int], list[int]]:
    """``(refs, units)`` each dataset gives over the next ``m`` choices of one constant-weight
    segment (``m >= 1``), and its units in the segment after them.

    ``epoch_units(d, e)``: the units of each position of epoch ``e`` of dataset ``d``, in
    stream order; ``taken[d]``: refs dataset ``d`` gave so far; ``used[d]``: units it gave in
    this segment. Raises :class:`Uncountable` where an epoch holds other units than another.
    """
    n = len(weights)
    streams = {
        d: _Stream(
            functools.partial(epoch_units, d),
            sizes[d],
            int(taken[d]),
            int(used[d]),
            float(weights[d]),
        )
        for d in range(n)
        if weights[d] > 0
    }
    # the m-th smallest tag t: C(t) >= m > C(below t), C(t) the refs with a tag up to t
    lo, hi = 0, _FLOAT_BITS_INF  # C(0) = 0: every tag is positive
    read = False
    while hi - lo > 1:
        mid = (lo + hi) // 2
        t = _float(mid)
        at_least = at_most = 0
        for s in streams.values():
            a, b = s.bounds(t)
            at_least, at_most = at_least + a, at_most + b
        if at_least < m <= at_most:  # the epochs cannot tell: read where the counts cross
            if not read:  # a count past what a counter holds is refused before any read
                check_counter(max(s.units_past(_float(lo)) for s in streams.values()))
                read = True
            at_least = sum(s.count(t) for s in streams.values())
        if at_least >= m:
            hi = mid
        else:
            lo = mid
    t = _float(hi)
    below = {d: s.count(t, strict=True) for d, s in streams.items()}
    left = m - sum(below.values())  # refs at exactly t: the lower datasets first
    counts, units = [0] * n, [int(u) for u in used]
    for d, s in streams.items():
        k = below[d] + min(left, s.count(t) - below[d])
        left -= k - below[d]
        counts[d] = k
        units[d] += s.units_of_first(k)
    return counts, units


def pass_by_units(
    segment_at: Callable[[int], tuple[int, int | None, np.ndarray]],
    epoch_units: Callable[[int, int], np.ndarray],
    fetch: Callable[[int, int, int], Refs],
    unit: str,
    names: Sequence[str],
    sizes: Sequence[int],
    position: int,
    taken: Sequence[int] | np.ndarray,
    used: Sequence[int] | np.ndarray,
    m: int,
) -> tuple[np.ndarray, np.ndarray]:
    """``(taken, used)`` of a blend by units after its next ``m`` choices from ``position``
    (``used``: the units of the segment that holds it), segment by segment
    (``segment_at(p)``: ``(start, stop, weights)`` of the segment that holds ``p``; the units
    start again at each ``stop``): counted where a segment is long (:func:`count_segment`),
    else built as the blend builds them (``fetch(d, start, stop)``: refs of dataset ``d``'s
    stream)."""
    n = len(sizes)
    taken_ = np.asarray(taken, dtype=np.int64)
    used_ = np.asarray(used, dtype=np.int64)
    while m:
        _, stop, w = segment_at(position)
        k = m if stop is None else min(m, stop - position)
        epoch = sum(size for size, weight in zip(sizes, w) if weight > 0)
        if k > _COUNT_PAST * epoch:
            counts, units = count_segment(epoch_units, sizes, w, taken_, used_, k)
            check_counter(max(units))
            taken_, used_ = taken_ + np.asarray(counts), np.asarray(units, dtype=np.int64)
        else:
            for a in range(0, k, _BUILD_CHUNK):
                c = min(_BUILD_CHUNK, k - a)
                _, ids, units_ = take_by_units(fetch, unit, names, w, taken_, used_, c)
                taken_ = taken_ + np.bincount(ids, minlength=n)
                used_ = used_ + np.bincount(ids, weights=units_, minlength=n).astype(np.int64)
        position, m = position + k, m - k
        if position == stop:  # the weights change: the units start again
            used_ = np.zeros(n, dtype=np.int64)
    return taken_, used_
