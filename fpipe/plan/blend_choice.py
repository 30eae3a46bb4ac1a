"""The decisions of a blend, as pure vectorized functions of (key, position).

Which dataset feeds global position ``i`` is decided by hashing ``(key, i)``: no generator is
advanced, so any block of positions is computed on its own, in one numpy pass.

* :func:`choose_weighted`: dataset drawn with probability ``w_d(i) / sum(w(i))``, where ``w(i)``
  is a :class:`WeightSchedule` (constant, steps or linear between points);
* :func:`choose_epochized`: within a blend epoch of ``T = sum(n_d)`` positions, position ``t``
  belongs to dataset ``d`` when a keyed permutation of ``[0, T)`` maps ``t`` into ``d``'s range,
  so every dataset gets exactly ``n_d`` positions per epoch, interleaved at random.

Example:
    >>> s = WeightSchedule.constant([1.0, 3.0])
    >>> ids = choose_weighted(7, s, np.arange(100_000))
    >>> round(float((ids == 1).mean()), 2)
    0.75
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec
import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.core.rng import Key, fold_in, permutation, uniform_array

__all__ = ["WeightSchedule", "choose_epochized", "choose_weighted", "pick"]


class WeightSchedule(msgspec.Struct, frozen=True, kw_only=True):
    """Blend weights as a function of the global sample position.

    ``points``: increasing positions, the first 0; ``weights[p]``: one weight per dataset, in
    force from ``points[p]``. ``linear``: the weights move linearly from each point to the next
    and stay at the last row after the last point; otherwise they change in steps.
    """

    points: tuple[int, ...]
    weights: tuple[tuple[float, ...], ...]
    linear: bool = False

    def __post_init__(self):
        if not self.points or self.points[0] != 0:
            raise ConfigError(f"a weight schedule starts at position 0, got {self.points}")
        if len(self.points) != len(self.weights):
            raise ConfigError("a weight schedule needs one row of weights per point")
        if any(b <= a for a, b in zip(self.points, self.points[1:])):
            raise ConfigError(f"schedule positions must increase: {self.points}")
        width = len(self.weights[0])
        for p, row in zip(self.points, self.weights):
            if len(row) != width:
                raise ConfigError(f"schedule row at {p} has {len(row)} weights, not {width}")
            if any(not (w >= 0 and w < float("inf")) for w in row) or sum(row) <= 0:
                raise ConfigError(
                    f"schedule row at {p}: weights must be finite, >= 0 and not all 0: {row}"
                )

    @classmethod
    def constant(cls, weights: Sequence[float]) -> WeightSchedule:
        """The same weights at every position."""
        return cls(points=(0,), weights=(tuple(float(w) for w in weights),))

    @classmethod
    def of(
        cls,
        points: Sequence[tuple[int, Mapping[str, float]]],
        names: Sequence[str],
        *,
        linear: bool = False,
    ) -> WeightSchedule:
        """Build from ``[(position, {name: weight}), ...]`` (names left out weigh 0).

        Example:
            >>> WeightSchedule.of([(0, {"coco": 1, "coyo": 1}), (1000, {"coyo": 3})],
            ...                   ["coco", "coyo"]).weights
            ((1.0, 1.0), (0.0, 3.0))
        """
        index = {n: i for i, n in enumerate(names)}
        rows, pts = [], []
        for pos, mapping in points:
            unknown = sorted(set(mapping) - set(index))
            if unknown:
                raise ConfigError(f"schedule at {pos} names unknown datasets {unknown}: {names}")
            row = [0.0] * len(names)
            for n, w in mapping.items():
                row[index[n]] = float(w)
            pts.append(int(pos))
            rows.append(tuple(row))
        return cls(points=tuple(pts), weights=tuple(rows), linear=linear)

    def at(self, position: int) -> np.ndarray:
        """The normalized weights at one position (probabilities; for tests and tools)."""
        j = int(np.searchsorted(self.points, position, side="right")) - 1
        row = np.asarray(self.weights[j], dtype=np.float64)
        if self.linear and j + 1 < len(self.points):
            t = (position - self.points[j]) / (self.points[j + 1] - self.points[j])
            row = (1 - t) * row + t * np.asarray(self.weights[j + 1], dtype=np.float64)
        return row / row.sum()


def pick(row: tuple[float, ...], u: np.ndarray) -> np.ndarray:
    """Index ``d`` with probability ``row[d] / sum(row)`` for each uniform ``u``."""
    w = np.asarray(row, dtype=np.float64)
    cdf = np.cumsum(w)
    ids = np.searchsorted(cdf[:-1], u * cdf[-1], side="right")
    # u * total can round up to total: never land on a trailing zero-weight dataset.
    return np.minimum(ids, int(np.flatnonzero(w)[-1])).astype(np.int32)


def choose_weighted(key: Key, schedule: WeightSchedule, positions: np.ndarray) -> np.ndarray:
    """The dataset (int32) that feeds each global position, drawn by the schedule's weights.

    In a linear segment from weights ``A`` to ``B`` the distribution at fraction ``t`` is the
    mixture ``(1 - lam) * A/|A| + lam * B/|B|`` with ``lam = t|B| / ((1 - t)|A| + t|B|)``,
    which equals the normalized ``(1 - t) A + t B``: one uniform picks the side, then the
    dataset within it (exact, O(log datasets) per position).
    """
    positions = np.asarray(positions, dtype=np.int64)
    u = uniform_array(key, positions)
    pts = schedule.points
    if len(pts) == 1:
        return pick(schedule.weights[0], u)
    seg = np.searchsorted(np.asarray(pts, dtype=np.int64), positions, side="right") - 1
    out = np.empty(len(positions), dtype=np.int32)
    for j in np.unique(seg).tolist():
        m = seg == j
        a = schedule.weights[j]
        if not schedule.linear or j + 1 == len(pts):
            out[m] = pick(a, u[m])
            continue
        b = schedule.weights[j + 1]
        t = (positions[m] - pts[j]) / (pts[j + 1] - pts[j])
        sa, sb = sum(a), sum(b)
        lam = t * sb / ((1 - t) * sa + t * sb)
        um = u[m]
        to_b = um < lam
        ids = np.empty(len(um), dtype=np.int32)
        with np.errstate(divide="ignore", invalid="ignore"):
            ids[to_b] = pick(b, um[to_b] / lam[to_b])
            ids[~to_b] = pick(a, (um[~to_b] - lam[~to_b]) / (1 - lam[~to_b]))
        out[m] = ids
    return out


def choose_epochized(key: Key, counts: Sequence[int], positions: np.ndarray) -> np.ndarray:
    """The dataset of each position when blend epoch ``e`` gives dataset ``d`` exactly
    ``counts[d]`` positions: position ``p`` is ``t = p mod T`` of epoch ``p // T``, and a keyed
    permutation of epoch ``e`` sends ``t`` into one dataset's range of ``[0, T)``."""
    positions = np.asarray(positions, dtype=np.int64)
    total = int(sum(counts))
    bounds = np.cumsum(np.asarray(counts, dtype=np.int64))
    epochs = positions // total
    t = positions - epochs * total
    out = np.empty(len(positions), dtype=np.int32)
    for e in np.unique(epochs).tolist():
        m = epochs == e
        slot = permutation(fold_in(key, e), total, t[m])
        out[m] = np.searchsorted(bounds, slot, side="right")
    return out
