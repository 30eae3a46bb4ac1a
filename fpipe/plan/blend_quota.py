"""A weighted blend's quota draw (``draw="quota"``): each dataset's count is a formula of the
position, so the state holds no counter.

The hash draw (:func:`fpipe.plan.blend_choice.choose_weighted`) draws each position's dataset
on its own, so how many positions chose a dataset is a multinomial draw that only counting
gives back, and the state keeps one counter per dataset. The quota draw lays the stream out
in blocks of :data:`QUOTA_BLOCK` positions whose contents are fixed by the weights:

* a segment of constant weights ``w`` (the blend starts one at every schedule point and at
  every online change) uses integer shares ``q = quantize(w)``, ``W = sum(q)``, and one keyed
  phase per dataset ``phi_d = hash(fold_in(ck, PHASE, start), d) mod W``;
* the count of dataset ``d`` after ``k`` blocks of the segment is
  ``c_d(k) = floor((k * QUOTA_BLOCK * q_d + phi_d) / W)``, exactly (integers only), so block
  ``k`` holds ``c_d(k+1) - c_d(k)`` positions of ``d`` (the quota ``QUOTA_BLOCK * q_d / W``
  rounded down or up) and starts at offset ``b_k = sum_d c_d(k)`` of the segment;
* block ``k`` lays out its positions by dataset (dataset ``d`` owns slots ``m_0 + ... +
  m_{d-1}`` to ``m_0 + ... + m_d``, ``m_d`` its count in the block) and sends its ``t``-th
  position to slot ``permutation(fold_in(ck, ORDER, start, k), L_k, t)``.

The counts at any position are then ``c_d(k)`` of its block plus the block's earlier positions
of ``d``: one block computed (O(datasets + block)), after finding the block by bisection on the
monotone ``b_k``; a segment's counts start from those at its start, which the earlier segments
give the same way. A restore or seek does O(one block) work per segment, and the state is the
key, the position and the changes.
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from fpipe.core.errors import ConfigError, SnapshotError
from fpipe.core.rng import Key, fold_in, fold_in_array, permutation

__all__ = [
    "QUOTA_BLOCK",
    "QuotaPlan",
    "QuotaSegment",
    "SHARE_BITS",
    "decode_shares",
    "encode_shares",
    "quantize",
    "quota_choose",
    "quota_counts",
    "quota_segment",
]

#: Positions per block of the quota draw.
QUOTA_BLOCK = 4096
#: Resolution of weights that are not whole numbers: shares of ``2**SHARE_BITS``.
SHARE_BITS = 24
_MAX_TOTAL = 1 << 31  # sum of shares; keeps every product of the formula within int64
_PHASE = 0x9A5E  # fold_in tags of the phases and the block orders
_ORDER = 0x0BDE


def quantize(weights: Sequence[float] | np.ndarray) -> np.ndarray:
    """The integer shares (int64) of weights: the weights themselves when all are whole numbers
    summing below 2**31, else ``round(w_d / sum(w) * 2**SHARE_BITS)`` (float64, ``sum`` the
    correctly rounded ``math.fsum``, ties to even), at least 1 for a weight above 0 (a weight
    of 0 stays 0: never drawn)."""
    w = np.asarray(weights, dtype=np.float64)
    total = math.fsum(w.tolist())
    if bool(np.all(w == np.floor(w))) and total < _MAX_TOTAL:
        return w.astype(np.int64)
    q = np.rint(w / total * float(1 << SHARE_BITS)).astype(np.int64)
    q[(q == 0) & (w > 0)] = 1
    return q


def encode_shares(q: np.ndarray) -> bytes:
    """Integer shares as LEB128 varints, zlib-compressed (small whole weights: a few bits
    each)."""
    out = bytearray()
    for v in np.asarray(q, dtype=np.int64).tolist():
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
    return zlib.compress(bytes(out), 9)


def decode_shares(data: bytes, n: int) -> np.ndarray:
    """The ``n`` shares of :func:`encode_shares`; a SnapshotError when they are not ``n``
    shares >= 0 with a sum in (0, 2**31)."""
    try:
        raw = zlib.decompress(data)
    except zlib.error as e:
        raise SnapshotError(f"a quota blend's weights in the snapshot are malformed: {e}") from e
    q, v, shift = [], 0, 0
    for b in raw:
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            q.append(v)
            v, shift = 0, 0
    total = sum(q)
    if shift or len(q) != n or not 0 < total < _MAX_TOTAL:
        raise SnapshotError(
            f"a quota blend's weights in the snapshot are not {n} shares summing below 2**31: "
            "the snapshot was edited or corrupted"
        )
    return np.asarray(q, dtype=np.int64)


class QuotaSegment(NamedTuple):
    """A segment of constant weights from position ``start``: integer ``shares``, their
    ``total``, the per-dataset ``phase`` in ``[0, total)`` and the key of its block orders."""

    start: int
    shares: np.ndarray
    total: int
    phase: np.ndarray
    order_key: Key

    def counts(self, k: int) -> np.ndarray:
        """``c_d(k)``, each dataset's positions in blocks ``0..k-1`` (int64, exact)."""
        a, r = divmod(k * QUOTA_BLOCK, self.total)  # k*B*q = (a*W + r)*q: no int64 overflow
        return a * self.shares + (r * self.shares + self.phase) // self.total

    def block_start(self, k: int) -> int:
        return int(self.counts(k).sum())

    def block_of(self, t: int) -> int:
        """The block holding offset ``t`` of the segment: the last ``k`` with ``b_k <= t``."""
        n = len(self.shares)  # b_k lies within n of k * QUOTA_BLOCK
        lo = max(0, (t - n) // QUOTA_BLOCK - 1)
        if self.block_start(lo) > t:
            lo = 0
        hi = (t + n) // QUOTA_BLOCK + 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.block_start(mid) <= t:
                lo = mid
            else:
                hi = mid
        return lo

    def block(self, k: int) -> np.ndarray:
        """The datasets (int32) of block ``k``'s positions, in order."""
        m = self.counts(k + 1) - self.counts(k)
        size = int(m.sum())
        slots = permutation(fold_in(self.order_key, k), size)
        return np.searchsorted(np.cumsum(m), slots, side="right").astype(np.int32)

    def counts_at(self, t: int) -> np.ndarray:
        """Each dataset's positions among offsets ``0..t-1`` of the segment."""
        k = self.block_of(t)
        before = self.counts(k)
        r = t - int(before.sum())
        if r == 0:
            return before
        return before + np.bincount(self.block(k)[:r], minlength=len(self.shares))

    def choose(self, offsets: np.ndarray) -> np.ndarray:
        """The dataset of each offset (sorted, ascending) of the segment."""
        out = np.empty(len(offsets), dtype=np.int32)
        i = 0
        while i < len(offsets):
            k = self.block_of(int(offsets[i]))
            b0, ids = self.block_start(k), self.block(k)
            j = int(np.searchsorted(offsets, b0 + len(ids), side="left"))
            out[i:j] = ids[offsets[i:j] - b0]
            i = j
        return out


@functools.lru_cache(maxsize=256)
def quota_segment(ck: Key, start: int, shares: bytes) -> QuotaSegment:
    """The segment of the choice key ``ck`` from ``start`` with shares ``shares`` (int64
    bytes); memoized (a pure function)."""
    q = np.frombuffer(shares, dtype=np.int64)
    total = int(q.sum())
    if not 0 < total < _MAX_TOTAL:
        raise ConfigError(f"quota blend: shares summing to {total}, not in (0, 2**31)")
    hashes = fold_in_array(fold_in(ck, _PHASE, start), np.arange(len(q), dtype=np.int64))
    phase = (hashes % np.uint64(total)).astype(np.int64)
    return QuotaSegment(start, q, total, phase, fold_in(ck, _ORDER, start))


def _segments(ck: Key, starts: Sequence[int], shares: Sequence[bytes]) -> list[QuotaSegment]:
    return [quota_segment(ck, s, q) for s, q in zip(starts, shares)]


@functools.lru_cache(maxsize=64)
def _bases(ck: Key, starts: tuple[int, ...], shares: tuple[bytes, ...]) -> tuple[np.ndarray, ...]:
    """Each dataset's count at each segment start (the first: zeros)."""
    segs = _segments(ck, starts, shares)
    out = [np.zeros(len(segs[0].shares), dtype=np.int64)]
    for seg, nxt in zip(segs, starts[1:]):
        out.append(out[-1] + seg.counts_at(nxt - seg.start))
    return tuple(out)


def quota_counts(
    ck: Key, starts: tuple[int, ...], shares: tuple[bytes, ...], position: int
) -> np.ndarray:
    """Each dataset's positions before ``position`` when segment ``j`` starts at ``starts[j]``
    (the first at 0) with the shares ``shares[j]`` (int64 bytes)."""
    j = int(np.searchsorted(starts, position, side="right")) - 1
    seg = quota_segment(ck, starts[j], shares[j])
    return _bases(ck, starts, shares)[j] + seg.counts_at(position - starts[j])


def quota_choose(
    ck: Key, starts: tuple[int, ...], shares: tuple[bytes, ...], positions: np.ndarray
) -> np.ndarray:
    """The dataset (int32) of each position (any order)."""
    positions = np.asarray(positions, dtype=np.int64)
    order = np.argsort(positions, kind="stable")
    sorted_pos = positions[order]
    cuts = np.searchsorted(sorted_pos, np.asarray(starts, dtype=np.int64), side="left").tolist()
    out = np.empty(len(positions), dtype=np.int32)
    for j, (lo, hi) in enumerate(zip(cuts, [*cuts[1:], len(positions)])):
        if hi > lo:
            seg = quota_segment(ck, starts[j], shares[j])
            out[order[lo:hi]] = seg.choose(sorted_pos[lo:hi] - starts[j])
    return out


class QuotaPlan:
    """A quota blend's segments from its step ``schedule`` (points and rows of weights) and the
    online entries a state holds (``position``, ``weights``: :func:`encode_shares` bytes), which
    replace the schedule from the first one on; and its counts and choices under them."""

    def __init__(self, points: Sequence[int], rows: Sequence[Sequence[float]], n: int):
        self.points = tuple(points)
        self.rows = tuple(quantize(r).tobytes() for r in rows)
        self.n = n
        self.segments = functools.lru_cache(maxsize=16)(self._segments)

    def _segments(self, entries: tuple) -> tuple[tuple[int, ...], tuple[bytes, ...]]:
        first = entries[0].position if entries else None
        starts = [p for p in self.points if first is None or p < first]
        shares = list(self.rows[: len(starts)])
        for e in entries:
            starts.append(e.position)
            shares.append(decode_shares(e.weights, self.n).tobytes())
        return tuple(starts), tuple(shares)

    def counts(self, ck: Key, entries: tuple, position: int) -> np.ndarray:
        """Each dataset's positions before ``position``."""
        return quota_counts(ck, *self.segments(entries), position)

    def choose(self, ck: Key, entries: tuple, positions: np.ndarray) -> np.ndarray:
        """The dataset of each position."""
        return quota_choose(ck, *self.segments(entries), positions)
