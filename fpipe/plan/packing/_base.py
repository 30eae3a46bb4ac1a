"""Packing records and checks shared by the pack algorithms and the pack step.

:class:`Packing` (groups of item positions, flat), the cost checks every algorithm starts with,
the over-budget policy applied before packing (:class:`OverBudget`, :func:`apply_over_budget`)
and the check of a user strategy's groups (:func:`packing_from_groups`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from fpipe.core.errors import ConfigError

__all__ = ["OverBudget", "Packing", "apply_over_budget", "packing_from_groups"]


class Packing(NamedTuple):
    """Groups of item positions, flat: pack ``p`` is ``order[offsets[p]:offsets[p + 1]]``.

    ``order``: int64 positions into the buffer, pack by pack; ``offsets``: int64, one more than
    the number of packs, starting at 0.
    """

    order: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def groups(self) -> list[np.ndarray]:
        """The packs as a list of position arrays."""
        return np.split(self.order, self.offsets[1:-1])

    def sizes(self) -> np.ndarray:
        """Items per pack."""
        return np.diff(self.offsets)

    def loads(self, costs: np.ndarray) -> np.ndarray:
        """Per-pack sums of ``costs`` (shape ``(packs, k)``, or ``(packs,)`` for 1-D costs)."""
        c = np.asarray(costs)
        if len(self.order) == 0:
            return np.zeros((0, *c.shape[1:]), dtype=c.dtype)
        return np.add.reduceat(c[self.order], self.offsets[:-1], axis=0)

    def permute(self, packs: np.ndarray) -> Packing:
        """The same packs in another order: pack ``i`` of the result is pack ``packs[i]``.

        Example:
            >>> p = Packing(np.array([4, 2, 3]), np.array([0, 1, 3]))
            >>> [g.tolist() for g in p.permute(np.array([1, 0])).groups()]
            [[2, 3], [4]]
        """
        sizes = np.diff(self.offsets)[packs]
        offsets = np.concatenate(([0], np.cumsum(sizes)))
        shift = np.repeat(self.offsets[packs] - offsets[:-1], sizes)
        return Packing(self.order[np.arange(offsets[-1]) + shift], offsets)

    def take(self, positions: np.ndarray) -> Packing:
        """The same packs over a subset: positions are mapped through ``positions``."""
        return Packing(np.asarray(positions, dtype=np.int64)[self.order], self.offsets)


def _as_costs(costs, limits) -> tuple[np.ndarray, np.ndarray]:
    c = np.asarray(costs, dtype=np.int64)
    if c.ndim == 1:
        c = c[:, None]
    lim = np.atleast_1d(np.asarray(limits, dtype=np.int64))
    if c.ndim != 2 or c.shape[1] != len(lim):
        raise ConfigError(f"costs of shape {c.shape} do not match {len(lim)} budget(s)")
    if (lim < 1).any():
        raise ConfigError(f"budgets must be >= 1, got {lim.tolist()}")
    if (c < 0).any():
        raise ConfigError("pack costs must be >= 0")
    over = (c > lim).any(axis=1)
    if over.any():
        i = int(np.flatnonzero(over)[0])
        raise ConfigError(
            f"item {i} costs {c[i].tolist()}, over the budgets {lim.tolist()}; apply an "
            "over-budget policy (apply_over_budget) before packing"
        )
    return c, lim


def _from_assignment(pack_of: np.ndarray, placed: np.ndarray, npacks: int) -> Packing:
    """Packs from ``pack_of[item]`` where items were placed in the order ``placed``."""
    # A stable sort by pack of the placement order keeps each pack's items in placement order.
    order = placed[np.argsort(pack_of[placed], kind="stable")]
    counts = np.bincount(pack_of, minlength=npacks)
    return Packing(order.astype(np.int64), np.concatenate(([0], np.cumsum(counts))))


def _decreasing(c: np.ndarray) -> np.ndarray:
    """Positions by decreasing first cost (ties: buffer order), then by the other costs."""
    keys = tuple(-c[:, j] for j in reversed(range(c.shape[1])))
    return np.lexsort(keys).astype(np.int64)


def packing_from_groups(groups: Sequence[Sequence[int]], n: int) -> Packing:
    """Check and flatten a user strategy's groups of buffer positions (each at most once)."""
    parts = [np.asarray(g, dtype=np.int64).reshape(-1) for g in groups]
    parts = [p for p in parts if len(p)]
    order = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    if len(order) and (order.min() < 0 or order.max() >= n):
        raise ConfigError(f"a packing strategy returned positions outside 0..{n - 1}")
    if len(np.unique(order)) != len(order):
        raise ConfigError("a packing strategy placed an item in more than one pack")
    sizes = [len(p) for p in parts]
    return Packing(order, np.concatenate(([0], np.cumsum(sizes, dtype=np.int64))))


class OverBudget(str, enum.Enum):
    """What happens to an item that exceeds a budget on its own.

    DROP: leave it out and count it (the default; counted in the packing state).
    TRUNCATE: replace its costs by ``truncate(costs, limits)`` (default: clip to the budgets);
      the task encoder must cut the sample to match when it is materialized.
    RAISE: stop with a :class:`~fpipe.core.errors.ConfigError` naming the item.
    """

    DROP = "drop"
    TRUNCATE = "truncate"
    RAISE = "raise"


def _clip(costs: np.ndarray, limits: np.ndarray) -> np.ndarray:
    return np.minimum(costs, limits)


def apply_over_budget(
    costs,
    limits,
    policy: OverBudget | str = OverBudget.DROP,
    truncate: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
    describe: Callable[[int], str] = str,
) -> tuple[np.ndarray, np.ndarray]:
    """Apply the over-budget policy: returns ``(kept positions, their costs)`` (costs 2-D).

    ``describe(position)`` names an item in the error raised under ``RAISE``.

    Example:
        >>> keep, c = apply_over_budget([5, 120, 7], 100)
        >>> keep.tolist(), c[:, 0].tolist()
        ([0, 2], [5, 7])
        >>> apply_over_budget([5, 120], 100, "truncate")[1][:, 0].tolist()
        [5, 100]
    """
    c = np.asarray(costs, dtype=np.int64)
    if c.ndim == 1:
        c = c[:, None]
    lim = np.atleast_1d(np.asarray(limits, dtype=np.int64))
    over = (c > lim).any(axis=1)
    everything = np.arange(len(c), dtype=np.int64)
    if not over.any():
        return everything, c
    policy = OverBudget(policy)
    if policy is OverBudget.DROP:
        return everything[~over], c[~over]
    if policy is OverBudget.RAISE:
        i = int(np.flatnonzero(over)[0])
        raise ConfigError(
            f"{describe(i)} costs {c[i].tolist()}, over the pack budgets {lim.tolist()} "
            "(over_budget='raise'; use 'drop' to skip and count such samples, or 'truncate')"
        )
    fixed = np.asarray((truncate or _clip)(c[over], lim), dtype=np.int64).reshape(-1, len(lim))
    if fixed.shape != c[over].shape or (fixed > lim).any() or (fixed < 0).any():
        raise ConfigError(
            f"the truncate hook returned costs {fixed.tolist()} that do not fit the budgets "
            f"{lim.tolist()}"
        )
    c = c.copy()
    c[over] = fixed
    return everything, c
