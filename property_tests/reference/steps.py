"""Global steps of the reference: batch sizes, distribution to ranks, skips, online changes and
world-size changes (docs/distributed.md, docs/steering.md).

Step ``s`` takes the next ``size(s)`` refs of the global order (everything upstream of the
distribution: the blend or repeat, window shuffle, filters) and rank ``r`` of ``W`` takes refs
``[r * b, (r + 1) * b)`` of them, ``b = size / W``. A short final global batch is dropped and
counted (``drop_last``), or split over the ranks by the rounding rule of docs/distributed.md.
Online weight changes are applied to the blend before their step; skipped steps are planned
and not delivered; a :class:`Phase` changes the world size or the batch sizes from a step on
(an elastic restore).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence

from property_tests.reference.stages import Counters
from property_tests.reference.views import Ref

#: size(step, consumed) -> global batch size: refs consumed by the steps before.
Sizes = Callable[[int, int], int]


def fixed(size: int) -> Sizes:
    return lambda step, consumed: size


def by_step(table: Mapping[int, int]) -> Sizes:
    """``{step: size}``: the size of the last step at or before ``step``."""
    rows = sorted(table.items())
    return lambda step, consumed: [size for s, size in rows if s <= step][-1]


def rampup(start: int, increment: int, samples: int, final: int) -> Sizes:
    """Megatron's ramp-up (docs/steering.md): with ``c`` refs consumed, ``final`` once
    ``c > samples``, else ``start + int(c / (samples / n)) * increment`` over ``n``
    increments."""
    n = (final - start) // increment

    def size(step: int, consumed: int) -> int:
        if n == 0 or samples == 0 or consumed > samples:
            return final
        return start + int(consumed / (samples / n)) * increment

    return size


@dataclasses.dataclass(frozen=True)
class Phase:
    """From global step ``step`` on: ``world`` ranks and global batch sizes ``sizes``."""

    step: int
    world: int
    sizes: Sizes


@dataclasses.dataclass(frozen=True)
class Step:
    """Global step ``step``: each rank's refs (None: the rank's stream has ended), and
    whether the step is skipped (planned, not delivered)."""

    step: int
    ranks: tuple[tuple[Ref, ...] | None, ...]
    skipped: bool


def split_bounds(n: int, world: int) -> list[int]:
    """A short final global batch of ``n`` refs over ``world`` ranks: rank ``r`` takes
    ``[b(r), b(r + 1))``, ``b(r) = round(r * (n / world))`` (float64, halves to even),
    ``b(world) = n``."""
    return [round(r * (n / world)) for r in range(world)] + [n]


def steps(
    refs: Iterable[Ref],
    phases: Sequence[Phase],
    *,
    drop_last: bool = True,
    skip: Sequence[tuple[int, int]] = (),
    changes: Sequence[tuple[int, Sequence[float]]] = (),
    blend=None,
    counters: Counters | None = None,
):
    """The global steps of the stream ``refs`` (see the module doc). ``changes``: ``(step,
    weights)`` applied to ``blend`` before that step, in order."""
    it = iter(refs)
    counters = Counters() if counters is None else counters
    pending = sorted(changes, key=lambda c: c[0])
    consumed = 0
    for s in itertools.count():
        while pending and pending[0][0] <= s:
            blend.set_weights(pending.pop(0)[1])
        phase = [p for p in phases if p.step <= s][-1]
        size = phase.sizes(s, consumed)
        world = phase.world
        assert size % world == 0, f"step {s}: global batch {size} on {world} ranks"
        got = list(itertools.islice(it, size))
        skipped = any(a <= s < b for a, b in skip)
        if len(got) == size:
            consumed += size
            per = size // world
            ranks = tuple(tuple(got[r * per : (r + 1) * per]) for r in range(world))
            yield Step(s, ranks, skipped)
            continue
        if got and not drop_last:
            bounds = split_bounds(len(got), world)
            parts = tuple(tuple(got[bounds[r] : bounds[r + 1]]) or None for r in range(world))
            yield Step(s, parts, skipped)
        elif got:
            counters.add("global_remainder", len(got))
        return
