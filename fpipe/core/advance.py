"""Advancing a plan over many outputs at once, on counts (what a seek to step 1e6 runs).

:meth:`fpipe.core.Pipeline.advance` moves a state over ``n`` outputs and says what they held
(:class:`Passed`: how many outputs, how many refs in them, their highest epoch) without building
them where the steps can say it from counts alone:

* a source may give ``Source.advance`` (``(S, n) -> (S, Passed)``): ``repeat`` moves its
  ``(epoch, position)`` by arithmetic; a weighted blend counts the choices of a whole range of
  positions in one numpy pass per million (each position is its own draw), an epochized one
  counts whole blend epochs by arithmetic, a blend by units finds its datasets' counts from
  their cumulative units (a few epochs of each read, see :mod:`fpipe.plan._unit_count`);
  grouped batching passes whole windows from their groups' sizes (see
  :mod:`fpipe.plan.buckets._count`);
* a block stage may give ``Stage.advance`` (a :class:`BlockAdvance`): its state after ``k``
  whole blocks and what they emit, from the :class:`Passed` of their inputs (a window shuffle
  counts blocks, a batch counts recipes). ``chain`` then advances its input over the ``k``
  blocks at once and finishes a block part way through (at either end) the ordinary way.

Both reach the very state ``next`` reaches; a step that cannot say from counts (a packer, whose
output depends on the sizes of its inputs) has no advance or returns None, and ``next`` does
the work, so the fast path is never wrong, only slower where it does not apply. A stage over
an input that cannot count builds its blocks too (counting would save nothing). A rank's part
of global batches is counted, but its highest epoch is left unknown (``Passed.epoch`` None)
for the caller to find (:func:`fpipe.loader.steering.seek_state` plans the last steps).

Two limits keep an advance from running for years: a count past what a state's 64-bit integers
hold (:func:`check_state_int`), and more than :data:`MAX_ONE_BY_ONE` outputs or positions that
must be decided one at a time (a weighted blend draws each position's dataset; a step without
an advance builds its outputs), are refused at once with a ConfigError
(:func:`check_one_by_one`).

Example:
    >>> from fpipe.core import Pipeline, chain
    >>> from fpipe.plan import batch, repeat, samples, window_shuffle
    >>> p = Pipeline(chain(repeat(samples(10)), window_shuffle(5), batch(4)), seed=0)
    >>> state, passed = p.advance(p.init(), 5)
    >>> passed, state == p.skip(p.init(), 5)[0]
    (Passed(outputs=5, refs=20, epoch=1), True)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.core.records import Refs

__all__ = [
    "BlockAdvance",
    "MAX_ONE_BY_ONE",
    "Passed",
    "STATE_INT_LIMIT",
    "advance",
    "check_one_by_one",
    "check_state_int",
    "passed_of",
]

#: Integers of a plan state are signed 64-bit (snapshots and numpy columns hold them so).
STATE_INT_LIMIT = 1 << 63
#: The most outputs or positions an advance decides one at a time (2**36, 6.9e10: hours of
#: CPU at tens of millions a second); more are refused rather than run for days or years.
MAX_ONE_BY_ONE = 1 << 36


def check_state_int(value: int, what: str) -> None:
    """A ConfigError unless ``value`` (a count a plan state will hold) fits its 64 bits."""
    if value >= STATE_INT_LIMIT:
        raise ConfigError(
            f"{what} would reach {value:,}, past the 2**63 a plan state holds: no run of this "
            "plan gets there"
        )


def check_one_by_one(count: int, what: str) -> None:
    """A ConfigError when ``count`` things (``what``: which, and why one at a time) exceed
    :data:`MAX_ONE_BY_ONE`: passing them would take longer than any run."""
    if count > MAX_ONE_BY_ONE:
        raise ConfigError(
            f"passing {count:,} {what} one at a time is refused (at most 2**36, "
            f"{MAX_ONE_BY_ONE:,}: hours of CPU already); a run that far is resumed from its "
            "saved state (loader.load_state_dict), not recomputed from the start"
        )


class Passed(msgspec.Struct, frozen=True, repr_omit_defaults=True):
    """What a run of steps held: ``outputs``, ``refs`` in them (a recipe or a pack holds
    several), the highest ``epoch`` of those refs (0 when there are none; None when the counts
    cannot say: a rank's part of global batches, whose highest epoch depends on which refs it
    got) and ``empty``: the steps that held nothing for this rank (``Source.next_steps``: in a
    blend of whole datasets, a dataset's last, short global batch that went to the other ranks
    alone). ``steps`` is all of them: where a run of steps ends is counted in steps, not
    outputs, so that it is the same step on every rank."""

    outputs: int = 0
    refs: int = 0
    epoch: int | None = 0
    empty: int = 0

    @property
    def steps(self) -> int:
        """The steps passed: the outputs and the steps that held nothing for this rank."""
        return self.outputs + self.empty

    def __add__(self, other: Passed) -> Passed:
        a, b = self.epoch, other.epoch
        epoch = None if a is None or b is None else max(a, b)
        return Passed(
            self.outputs + other.outputs, self.refs + other.refs, epoch, self.empty + other.empty
        )


class BlockAdvance(msgspec.Struct, frozen=True):
    """A block stage's advance on counts: ``outputs``: what one whole block emits (an int, or
    ``S -> int`` from the stage's state at the block start); ``run(state, blocks, inputs) ->
    (state, Passed) | None``: the state after ``blocks`` whole blocks whose inputs held
    ``inputs``, and what the blocks emit (None: it cannot say from counts; the blocks are then
    built). ``span``: for a stage whose block size follows its state (a batch size schedule),
    ``S -> blocks`` from that state on with the same block size and outputs (None: all)."""

    outputs: int | Callable[[Any], int]
    run: Callable[[Any, int, Passed], tuple[Any, Passed] | None]
    span: Callable[[Any], int | None] | None = None


def _epoch_max(epochs: np.ndarray) -> int:
    return int(epochs.max()) if len(epochs) else 0


def passed_of(chunk: Any) -> Passed:
    """The :class:`Passed` of a chunk of outputs: refs, or items (recipes, packs) of refs."""
    if isinstance(chunk, Refs):
        return Passed(len(chunk), len(chunk), _epoch_max(chunk.epoch))
    refs = [getattr(item, "refs", item) for item in chunk]
    if not refs:
        return Passed()
    if all(isinstance(r, Refs) for r in refs):
        return Passed(
            len(refs),
            sum(len(r) for r in refs),
            max(_epoch_max(r.epoch) for r in refs),
        )
    total = Passed()
    for r in refs:
        total = total + passed_of(r)
    return Passed(len(refs), total.refs, total.epoch)


def advance(source: Any, state: Any, n: int) -> tuple[Any, Passed]:
    """The state after the next ``n`` steps of ``source`` (fewer at the end of the stream: one
    output each, or none for this rank, see :class:`Passed`) and what they held:
    ``source.advance`` where the source has one, else ``next_steps`` or ``next``."""
    if n <= 0:
        return state, Passed()
    if source.advance is not None:
        return source.advance(state, n)
    return advance_by_next(source, state, n)


def advance_by_next(
    source: Any, state: Any, n: int, *, bounded: bool = False
) -> tuple[Any, Passed]:
    """:func:`advance` by building the outputs, step by step: with ``source.next_steps``
    where the source has it (a step may hold nothing for this rank: it counts as a step, the
    one the other ranks take there), else ``source.next`` (one output a step). Refused past
    :data:`MAX_ONE_BY_ONE` of them unless ``bounded`` (the caller knows the stream ends
    sooner)."""
    if not bounded:
        what = f"outputs of plan step {source.name!r} (it cannot count them, nor its end)"
        check_one_by_one(n, what)
    by_step = getattr(source, "next_steps", None)
    total = Passed()
    while total.steps < n:
        want = min(1024, n - total.steps)
        if by_step is None:
            state, out = source.next(state, want)
            if not len(out):
                break
            total = total + passed_of(out)
            continue
        state, steps = by_step(state, want)
        if not len(steps):
            break
        held = [r for r in steps if r is not None]
        total = total + passed_of(held) + Passed(empty=len(steps) - len(held))
    return state, total
