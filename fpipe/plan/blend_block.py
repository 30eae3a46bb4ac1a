"""The blocks of a blend: the refs and dataset choices of many positions at once, computed from
a state (:mod:`fpipe.plan.blend` memoizes them and hands them out as callers ask).

A block of ``m`` positions is one pass: each position's dataset (the blend's ``choose``), then
per dataset the contiguous run of its stream those positions take, read from its view
(``leaf_refs``; ``stream_refs`` reads ahead and memoizes a dataset's run, so the next blocks
slice the same read), put back in position order. A blend by units takes its positions from
per-dataset unit counters instead (``compute_units``, see :mod:`fpipe.plan._blend_units`), and
``units_after`` gives those counters part-way through a block. ``reuse`` finds a memoized block
computed under other online weights that still holds for a state, cut where the two choose
differently. The memos only save work: every output is a function of the state.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from fpipe.core.graph import input_root
from fpipe.core.records import Refs
from fpipe.core.rng import Key
from fpipe.plan._blend_units import pack_counters, take_by_units, unpack_counters
from fpipe.plan.blend_choice import WeightSchedule
from fpipe.plan.online_mix import agree_until, online_segment

__all__ = ["BlendBlocks", "blend_blocks"]


class BlendBlocks(NamedTuple):
    """A blend's block functions (see the module's docstring): ``leaf_roots(key)`` (the root key
    of each dataset), ``leaf_refs(state, d, start, stop)`` (refs of ``d``'s stream, one list
    item per epoch touched), ``compute(state, m)`` (refs and dataset ids of ``m`` positions),
    ``compute_units(state, m)`` (the same by units, with the units of each),
    ``units_after(state, ids, units, start, take)`` (packed unit counters part-way through a
    block) and ``reuse(state)`` (a memoized block that holds for ``state``, or None)."""

    leaf_roots: Callable[[Key], tuple[Key, ...]]
    leaf_refs: Callable[[Any, int, int, int], list[Refs]]
    compute: Callable[[Any, int], tuple[Refs, np.ndarray]]
    compute_units: Callable[[Any, int], tuple[Refs, np.ndarray, np.ndarray]]
    units_after: Callable[[Any, np.ndarray, Any, int, int], bytes]
    reuse: Callable[[Any], Any]


def blend_blocks(
    *,
    name: str,
    n: int,
    names: tuple[str, ...],
    sizes: tuple[int, ...],
    ranges: Sequence[Callable[[Key, int, int, int], Refs]],
    schedule: WeightSchedule | None,
    unit: str | None,
    digests: bytes,
    choose: Callable[[Any, np.ndarray], np.ndarray],
    entries: Callable[[Any], tuple],
    counters: Callable[[Any], np.ndarray],
    cache: OrderedDict,
    restarts: bool = False,
) -> BlendBlocks:
    """The block functions of the blend ``name`` of ``n`` datasets (``names``, ``sizes`` refs
    per epoch, read with ``ranges``), weighted by ``schedule`` (None: epochized) in ``unit``
    (None: samples), whose states carry the weight digests ``digests``; ``choose`` and
    ``entries`` are the blend's own, ``counters(state)`` each dataset's refs given before the
    state's position (its ``taken``, or a quota blend's formula), and ``cache`` its memo of
    blocks (state -> (refs, ids, units, offset of the state in the block)), which ``reuse``
    searches. ``restarts``: each online entry starts its choices afresh where it starts (a
    quota blend), even with the weights already in force."""
    sort_dtype = np.uint8 if n <= 256 else np.uint16 if n <= 65536 else np.int64

    @functools.lru_cache(maxsize=4)
    def leaf_roots(root: Key) -> tuple[Key, ...]:
        # A memo of a pure function (the root key of each input), computed once per root.
        return tuple(input_root(root, name, d) for d in range(n))

    def leaf_refs(state, d, start, stop) -> list[Refs]:
        size, out, lk = sizes[d], [], leaf_roots(state.key)[d]
        while start < stop:
            e, pos = divmod(start, size)
            take = min(stop - start, size - pos)
            out.append(ranges[d](lk, e, pos, pos + take))
            start += take
        return out

    streams: dict = {}  # (root key, d) -> (start, refs): a memo of dataset d's stream

    def stream_refs(state, d, start, stop) -> Refs:
        """Refs ``start..stop-1`` of dataset ``d``'s stream, read ahead three times as far: the
        next blocks (and a block chosen again after an online change) slice the same read."""
        k = (state.key, d)
        hit = streams.get(k)
        if hit is not None and hit[0] <= start and stop <= hit[0] + len(hit[1]):
            return hit[1][start - hit[0] : stop - hit[0]]
        refs = Refs.concat(leaf_refs(state, d, start, start + 3 * (stop - start)))
        streams[k] = (start, refs)
        return refs[: stop - start]

    def compute(state, m):
        positions = np.arange(state.position, state.position + m, dtype=np.int64)
        ids = choose(state, positions)
        counts_ = np.bincount(ids, minlength=n)
        # Stable sort by dataset; small integer types take numpy's radix sort.
        order = np.argsort(ids.astype(sort_dtype, copy=False), kind="stable")
        chunks = []
        taken = counters(state)
        for d in np.flatnonzero(counts_).tolist():
            t0 = int(taken[d])
            chunks.append(stream_refs(state, d, t0, t0 + int(counts_[d])))
        inv = np.empty(m, dtype=np.int64)
        inv[order] = np.arange(m, dtype=np.int64)
        return Refs.concat(chunks)[inv], ids

    def compute_units(state, m):
        """``m`` choices by units from ``state``: refs, dataset ids, units of each."""
        assert schedule is not None and unit is not None  # a weighted blend by units
        pos, taken, used = state.position, np.asarray(state.taken), unpack_counters(state.tokens, n)
        parts, ids_parts, unit_parts = [], [], []
        online = entries(state)

        def fetch(d, start, stop):
            return Refs.concat(leaf_refs(state, d, start, stop))

        while m:
            _, stop, w = online_segment(schedule, online, pos)
            k = m if stop is None else min(m, stop - pos)
            refs, ids, units = take_by_units(fetch, unit, names, w, taken, used, k)
            taken = taken + np.bincount(ids, minlength=n)
            used = used + np.bincount(ids, weights=units, minlength=n).astype(np.int64)
            parts.append(refs)
            ids_parts.append(ids)
            unit_parts.append(units)
            pos, m = pos + k, m - k
            if pos == stop:  # the weights change: the counters start again
                used = np.zeros(n, dtype=np.int64)
        return Refs.concat(parts), np.concatenate(ids_parts), np.concatenate(unit_parts)

    def units_after(state, ids, units, start, take) -> bytes:
        """``tokens`` of the state ``take`` positions after ``state``, which is at offset
        ``start`` of a block whose choices are ``ids`` (units ``units``)."""
        end = state.position + take
        lo = online_segment(schedule, entries(state), end)[0] if schedule is not None else 0
        if lo <= state.position:  # still in the segment of state.position
            first, acc = start, unpack_counters(state.tokens, n)
        else:  # a new segment began inside: count from its start
            first, acc = start + (lo - state.position), np.zeros(n, dtype=np.int64)
        stop = start + take
        got = np.bincount(ids[first:stop], weights=units[first:stop], minlength=n)
        return pack_counters(acc + got.astype(np.int64))

    def reuse(state):
        """A block memoized for the same position under other online weights, cut where the
        two choose differently (a change applied at the loader leaves the positions before
        its frontier as they were)."""
        for k, (refs, ids, units, off) in cache.items():
            if (
                k.position != state.position
                or k.key != state.key
                or getattr(k, "tokens", None) != getattr(state, "tokens", None)
                or k.weights[: len(digests)] != digests
            ):
                continue
            same = agree_until(entries(k), entries(state), state.position, restarts)
            same -= state.position
            if same <= 0 or not np.array_equal(counters(k), counters(state)):
                continue
            end = min(len(refs), off + same)
            return refs[:end], ids[:end], None if units is None else units[:end], off
        return None

    return BlendBlocks(leaf_roots, leaf_refs, compute, compute_units, units_after, reuse)
