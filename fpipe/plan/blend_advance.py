"""A blend's advance on counts: where its counters stand after many positions, without
gathering a ref (what a seek, or a restore that skips ahead, runs).

A blend's state is its position and one counter per dataset (see :mod:`fpipe.plan.blend`), so
passing ``m`` positions only needs how many of them chose each dataset:

* a weighted blend draws each position's dataset on its own: the draws are counted, a block of
  :data:`_COUNT_BLOCK` positions per numpy pass (never gathered), a run of constant weights
  from the buckets of the draws' hashes (:mod:`fpipe.plan.blend_count`);
* an epochized blend gives each dataset exactly its count per blend epoch: only the epochs cut
  at either end of the range are drawn;
* a quota blend (``draw="quota"``) counts nothing: its counters are a formula of the
  position (:mod:`fpipe.plan.blend_quota`);
* a blend by units counts each segment from its datasets' cumulative units
  (:mod:`fpipe.plan._unit_count`), and raises :class:`~fpipe.plan._unit_count.Uncountable`
  where a dataset's epochs hold other units (the caller builds those positions instead).

The counters are those of building the positions with the blend's ``next``: an advance is a
shortcut, never another stream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from fpipe.core.advance import check_one_by_one, check_state_int
from fpipe.core.records import Refs
from fpipe.core.rng import Key
from fpipe.core.stage import View
from fpipe.plan._blend_units import pack_counters, units_of, unpack_counters
from fpipe.plan._unit_count import pass_by_units
from fpipe.plan.blend_choice import WeightSchedule
from fpipe.plan.online_mix import online_segment
from fpipe.plan.slice_order import highest_epoch

__all__ = ["BlendCounting", "Counted"]

_COUNT_BLOCK = 1 << 20  # positions whose choices advance counts at once (bounded memory)


class Counted(NamedTuple):
    """A blend's counters after an advance: ``stop`` (the new position), ``taken`` (refs per
    dataset), ``tokens`` (a blend by units' packed unit counters; b"" otherwise) and ``epoch``
    (the highest dataset epoch the passed refs reach)."""

    stop: int
    taken: tuple[int, ...]
    tokens: bytes
    epoch: int


@dataclass(frozen=True)
class BlendCounting:
    """What counting a blend's positions reads: its datasets (``names``, ``sizes``, ``views``
    and their ``ranges``), how it chooses (``mode``; ``counts`` per blend epoch of an epochized
    blend; ``schedule`` and ``unit`` of a weighted one), its ``limit`` (positions before the
    end, None: forever), and the blend's own functions: ``choose(state, positions)`` (each
    position's dataset), ``entries(state)`` (the online changes a state holds),
    ``leaf_roots(key)`` and ``leaf_refs(state, d, start, stop)`` (refs of ``d``'s stream);
    ``derived(state, position)``: a quota blend's counters at any position (None: counted);
    ``draws(state, lo, hi)``: a weighted blend's count of the draws of positions ``lo..hi-1``
    in bulk (:mod:`fpipe.plan.blend_count`; None: each position drawn and counted)."""

    name: str
    names: tuple[str, ...]
    sizes: tuple[int, ...]
    views: tuple[View, ...]
    ranges: tuple[Callable[..., Refs], ...]
    mode: str
    counts: tuple[int, ...]
    schedule: WeightSchedule | None
    unit: str | None
    limit: int | None
    choose: Callable[[Any, np.ndarray], np.ndarray]
    entries: Callable[[Any], tuple]
    leaf_roots: Callable[[Key], tuple[Key, ...]]
    leaf_refs: Callable[[Any, int, int, int], list[Refs]]
    derived: Callable[[Any, int], np.ndarray] | None = None
    draws: Callable[[Any, int, int], np.ndarray] | None = None

    def count(self, state: Any, want: int) -> Counted:
        """The counters ``want`` positions after ``state`` (fewer at the blend's end): each
        position's draw of a weighted blend; the cut epochs of an epochized one; a blend by
        units from its datasets' cumulative units (an ``Uncountable`` where it cannot)."""
        start = state.position
        limit = self.limit
        stop = start + (want if limit is None else max(0, min(want, limit - start)))
        check_state_int(stop, f"blend {self.name!r}: the positions")
        tokens = b""
        if self.derived is not None:  # a formula of the position: nothing to count
            before, taken = self.derived(state, start), self.derived(state, stop)
        else:
            before = np.asarray(state.taken, dtype=np.int64)
            taken, tokens = self.counted(state, before, start, stop)
        roots = self.leaf_roots(state.key)
        epoch = max(
            (
                highest_epoch(self.views[d], roots[d], int(before[d]), int(taken[d]))
                for d in np.flatnonzero(taken - before).tolist()
            ),
            default=0,
        )
        return Counted(stop, tuple(taken.tolist()), tokens, epoch)

    def counted(
        self, state: Any, before: np.ndarray, start: int, stop: int
    ) -> tuple[np.ndarray, bytes]:
        """The counters (and packed unit counters) after positions ``start..stop-1`` of a blend
        that keeps them in its state (``before``: those at ``start``)."""
        if self.unit is not None:
            return self.units_advance(state, start, stop)
        if self.mode == "epochized":
            return before + self.epochized_counts(state, start, stop), b""
        what = f"positions of blend {self.name!r} (each one's dataset is drawn on its own)"
        check_one_by_one(stop - start, what)
        return before + self.count_choices(state, start, stop), b""

    def count_choices(self, state: Any, lo: int, hi: int) -> np.ndarray:
        """How many of positions ``lo..hi-1`` choose each dataset, one position at a time (a
        block of :data:`_COUNT_BLOCK` per numpy pass), or in bulk where the blend can."""
        if self.draws is not None:
            return self.draws(state, lo, hi)
        n = len(self.names)
        counts_ = np.zeros(n, dtype=np.int64)
        for a in range(lo, hi, _COUNT_BLOCK):
            positions = np.arange(a, min(a + _COUNT_BLOCK, hi), dtype=np.int64)
            counts_ += np.bincount(self.choose(state, positions), minlength=n)
        return counts_

    def epochized_counts(self, state: Any, start: int, stop: int) -> np.ndarray:
        """count_choices over ``start..stop-1`` of an epochized blend: every whole blend
        epoch gives each dataset its count; only the epochs cut at either end are counted."""
        total = sum(self.counts)
        first, last = -(-start // total), stop // total  # whole epochs first..last-1
        if first >= last:
            check_one_by_one(stop - start, f"positions of blend {self.name!r} within an epoch")
            return self.count_choices(state, start, stop)
        cut = (first * total - start) + (stop - last * total)
        what = f"positions of blend {self.name!r} in the epochs cut at either end"
        check_one_by_one(cut, what)
        whole = (last - first) * np.asarray(self.counts, dtype=np.int64)
        head = self.count_choices(state, start, first * total)
        return whole + head + self.count_choices(state, last * total, stop)

    def epoch_units(self, state: Any, d: int, epoch: int) -> np.ndarray:
        """The units of each ref of dataset ``d``'s epoch ``epoch``, in stream order."""
        assert self.unit is not None  # a blend by units
        refs = self.ranges[d](self.leaf_roots(state.key)[d], epoch, 0, self.sizes[d])
        return units_of(refs, self.unit, self.names[d])

    def units_advance(self, state: Any, start: int, stop: int) -> tuple[np.ndarray, bytes]:
        """A blend by units' ``(taken, units)`` after positions ``start..stop-1``: long
        segments counted from their datasets' cumulative units (see
        :mod:`fpipe.plan._unit_count`), short ones built."""
        schedule, unit = self.schedule, self.unit
        assert schedule is not None and unit is not None  # a weighted blend by units
        online = self.entries(state)
        taken, used = pass_by_units(
            lambda p: online_segment(schedule, online, p),
            lambda d, e: self.epoch_units(state, d, e),
            lambda d, a, b: Refs.concat(self.leaf_refs(state, d, a, b)),
            unit,
            self.names,
            self.sizes,
            start,
            state.taken,
            unpack_counters(getattr(state, "tokens", b""), len(self.names)),
            stop - start,
        )
        return taken, pack_counters(used)
