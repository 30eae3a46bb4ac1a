"""Assign samples to buckets from index metadata (width, height, frames), vectorized.

For each sample (fpipe's own rule, modelled on OpenSora's ``Bucket.get_bucket_id``; docs/buckets.md
lists where the two assign differently):

1. the nearest aspect ratio of the config (distance of ``log(width / height)``);
2. within it, resolutions from the largest down: the first whose pixel area is not above the
   sample's, then the largest frame count not above the sample's (images, one frame, only go
   to 1-frame buckets; videos only to buckets of more than one frame, as in OpenSora);
3. the sample is kept in that bucket with the bucket's probability, a keyed decision
   ``fold_in(key, dataset, index, epoch, level)``; if it is not kept it tries the next smaller
   resolution that fits.

A sample that fits no bucket is ``UNFIT``; one that fits but is kept nowhere is ``REJECTED``
(for this epoch: the draws are new every epoch, as OpenSora draws again every epoch). Both are
counted by the bucket step. The decision depends only on the key and the sample's identity, so
it is the same on every rank, in any window and after a resume.

Example:
    >>> from fpipe.plan.buckets._config import parse_bucket_config
    >>> t = parse_bucket_config({"1:1": {256: {1: (1.0, 8), 17: (1.0, 2)}}})
    >>> assign_buckets(t, 7, width=[300, 300, 100], height=[300, 280, 100],
    ...                frames=[1, 40, 1], index=[0, 1, 2]).tolist()
    [0, 1, -1]
"""

from __future__ import annotations

import functools

import numpy as np

from fpipe.core.rng import Key, fold_in_array, uniform_array
from fpipe.plan.buckets._config import BucketTable, aspect_ratio

__all__ = ["REJECTED", "UNFIT", "assign_buckets"]

UNFIT = -1  #: the sample fits no bucket (too small, too short, or no bucket of its kind)
REJECTED = -2  #: the sample fits, but every probability draw of this epoch said no


class _Lookup:
    """Dense arrays over (aspect ratio a, resolution level l, frame option j)."""

    def __init__(self, table: BucketTable):
        ratio_of = [aspect_ratio(b.aspect) for b in table.buckets]
        ratios = sorted(set(ratio_of))
        self.log_ratio = np.log(np.array(ratios))
        self.mid = (self.log_ratio[1:] + self.log_ratio[:-1]) / 2
        levels: list[list[tuple[int, int]]] = [[] for _ in ratios]
        options: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
        for bid, b in enumerate(table.buckets):
            a = ratios.index(ratio_of[bid])
            if (b.height, b.width) not in levels[a]:
                levels[a].append((b.height, b.width))
            options.setdefault((a, b.height, b.width), []).append((b.frames, bid))
        for lv in levels:
            lv.sort(key=lambda hw: -hw[0] * hw[1])  # largest area first
        nl = max(len(lv) for lv in levels)
        nj = max(len(v) for v in options.values())
        self.area = np.full((len(ratios), nl), np.inf)
        self.frames = np.full((len(ratios), nl, nj), np.iinfo(np.int64).max, dtype=np.int64)
        self.bid = np.full((len(ratios), nl, nj), UNFIT, dtype=np.int64)
        for a, lv in enumerate(levels):
            for li, (h, w) in enumerate(lv):
                self.area[a, li] = h * w
                for j, (t, bid) in enumerate(sorted(options[(a, h, w)])):
                    self.frames[a, li, j] = t
                    self.bid[a, li, j] = bid
        # bucket id -> probability; index -1 (no option) -> 0
        self.prob = np.array([b.probability for b in table.buckets] + [0.0])


@functools.lru_cache(maxsize=16)
def _lookup(table: BucketTable) -> _Lookup:
    # A memo of a pure function of the (frozen, hashable) table.
    return _Lookup(table)


def _const_or(col: np.ndarray, p: np.ndarray):
    """``col[p]``, or its single value when every element is the same."""
    if len(col) and (col.strides == (0,) or col.min() == col.max()):
        return int(col[0])
    return col[p]


def assign_buckets(
    table: BucketTable,
    key: Key,
    *,
    width,
    height,
    frames=None,
    index,
    dataset=0,
    epoch=0,
) -> np.ndarray:
    """Bucket id per sample (``int64``; ``UNFIT`` or ``REJECTED`` where none).

    ``width``, ``height``, ``frames``: metadata arrays (``frames=None``: all images; a missing
    frame count, NaN or below 1, counts as an image). ``index``, ``dataset``, ``epoch``: the
    sample identity folded into each keep-or-not draw.
    """
    lk = _lookup(table)
    w = np.asarray(width, dtype=np.float64)
    h = np.asarray(height, dtype=np.float64)
    n = len(w)
    t = np.ones(n) if frames is None else np.asarray(frames, dtype=np.float64)
    t = np.where(np.isnan(t) | (t < 1), 1.0, np.floor(t))
    ok = (w > 0) & (h > 0) & np.isfinite(w) & np.isfinite(h)
    with np.errstate(divide="ignore", invalid="ignore"):
        logr = np.log(np.where(ok, w / np.where(ok, h, 1.0), 1.0))
    a = np.searchsorted(lk.mid, logr) if len(lk.mid) else np.zeros(n, dtype=np.int64)
    area = w * h
    out = np.full(n, UNFIT, dtype=np.int64)
    fits_any = np.zeros(n, dtype=bool)
    nl, nj = lk.frames.shape[1:]
    idx = np.asarray(index, dtype=np.int64)
    ds = np.broadcast_to(np.asarray(dataset, dtype=np.int64), (n,))
    ep = np.broadcast_to(np.asarray(epoch, dtype=np.int64), (n,))
    p = np.flatnonzero(ok)  # samples still without a bucket, as positions
    # per sample; a level is folded in below. A column with one value (the epoch of a window,
    # one dataset) is folded in as a scalar: the same keys, hashed once.
    base = fold_in_array(key, _const_or(ds, p), idx[p], _const_or(ep, p))
    slot = np.empty(n, dtype=np.int64)
    slot[p] = np.arange(len(p))
    for level in range(nl):
        if not len(p):
            break
        res_ok = lk.area[a[p], level] <= area[p]  # else the resolution is above the sample's
        later, p = p[~res_ok], p[res_ok]
        ap, tp = a[p], t[p]
        image = tp <= 1
        choice = np.full(len(p), -1, dtype=np.int64)
        for j in range(nj):  # frame options ascending: the last that fits wins
            ft = lk.frames[ap, level, j]
            fit = np.where(image, ft == 1, (ft > 1) & (ft <= tp))
            choice = np.where(fit, lk.bid[ap, level, j], choice)
        cand = choice >= 0
        c, choice = p[cand], choice[cand]
        fits_any[c] = True
        u = uniform_array(base[slot[c]], level)
        keep = u < lk.prob[choice]
        out[c[keep]] = choice[keep]
        # not kept here (or no frame option at this resolution): try the next smaller one
        p = np.concatenate([later, p[~cand], c[~keep]])  # any order: results go by position
    out[fits_any & (out < 0)] = REJECTED
    return out
