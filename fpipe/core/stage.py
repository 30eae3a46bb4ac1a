"""The plan-step model: two layers, three records, one way to compose (read this first).

**Layer 1, random access (:class:`View`).** One epoch of sample references with random access:
``gather(root, epoch, positions) -> Refs``. Views compose by wrapping one inner view
(``slice_shuffle(samples(...))``); they keep no state, because a stream position is just
``(epoch, position)``.

**Layer 2, streams.** A :class:`Stage` is a stream step, pushed chunk by chunk::

    init  :: Key -> S
    step  :: (S, X) -> (S, Y)        # Y may be empty; it never holds more than X allows
    flush :: S -> (S, Y)             # at the end of input; flushing twice yields nothing

A :class:`Source` is a pulled stream, ``next :: (S, n) -> (S, Y of at most n)``, empty only at
the end. Users declare a Source only where a stream *starts*: :func:`fpipe.plan.repeat` turns a
view into a stream, and a multi-input step (a blend, an interleave) turns several sub-plans
(Sources) into one. Everything else is a Stage, and :func:`fpipe.core.chain` lifts each Stage
over the Source before it, so a pipeline is always one Source.

Every record has ``name``, ``config`` (plain data: the step's *whole* configuration, which is
fingerprinted and printed) and ``inputs`` (the records it reads from). :mod:`fpipe.core.graph`
walks ``inputs`` to list the steps, derive keys, find a step's state by name and collect stats,
so no factory lists its parts by hand and nobody walks states with ``isinstance``.

A pipeline prints as one flat list of steps in data-flow order (a chain nested in a chain is
spliced); only a step with several inputs nests, one list per input. One key rule: a step's key
is the root key of its plan folded with its name, ``step_key(root, name)``; input ``i`` of a
multi-input step ``mix`` is a sub-plan whose root key is ``input_root(root, "mix", i)``, so the
step at path ``mix/i/child`` has key ``step_key(input_root(root, "mix", i), "child")`` (see
:mod:`fpipe.core.graph`).

Chunks are :class:`~fpipe.core.records.Refs` between plan steps, and tuples of items (recipes,
groups of refs) after a step that emits items; both support ``len``, slicing and concatenation.

A Stage with ``block_size=None`` is *streaming*: it maps each chunk on its own and emits at most
as many outputs as it got inputs (map, filter). A Stage with ``block_size=k`` needs lookahead:
it sees its input in fixed blocks of ``k`` items (the last block may be shorter), and its output
for block b is a pure function of (config, key, b, input block b); it may emit any number of
items (a shuffle emits k refs, a packer emits groups, a batcher one recipe). ``chain`` keeps its
state as the input's state at the block start plus a cursor into the block's output, so a
restore recomputes one block and nothing more. ``block_size`` may also be a function of the
stage's state at the block start (``S -> k``): a batch whose size follows a schedule over steps
(:class:`fpipe.plan.BatchSchedule`) reads its block size from its own step count.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from fpipe.core.advance import BlockAdvance, Passed
from fpipe.core.records import Config, Refs, Unit
from fpipe.core.rng import Key

__all__ = ["Source", "Stage", "View", "by_steps", "stateless"]


def _no_flush(state):
    return state, ()


def _own_state(state):
    return state, ()


class View(msgspec.Struct, frozen=True, kw_only=True):
    """One epoch of refs with random access (layer 1; see the module docstring).

    Attributes:
      name, config: the step's name (unique in its plan) and whole config (fingerprinted).
      size: refs per epoch.
      gather: ``(root, epoch, positions: int64 array) -> Refs``; pure. ``root`` is the key of
        the plan the view belongs to; a view that shuffles folds its own name into it
        (``step_key(root, name)``) and passes ``root`` unchanged to its input.
      gather_range: optional fast form of ``gather(root, epoch, arange(start, stop))``.
      inputs: the view it wraps (at most one), for descriptions and fingerprints.
    """

    name: str
    config: Config
    size: int
    gather: Callable[[Key, int, np.ndarray], Refs]
    gather_range: Callable[[Key, int, int, int], Refs] | None = None
    inputs: tuple = ()

    def take_range(self, root: Key, epoch: int, start: int, stop: int) -> Refs:
        """Refs at positions ``start..stop-1`` of ``epoch`` (uses ``gather_range`` if set)."""
        if self.gather_range is not None:
            return self.gather_range(root, epoch, start, stop)
        return self.gather(root, epoch, np.arange(start, stop, dtype=np.int64))


class Stage(msgspec.Struct, frozen=True, kw_only=True):
    """A stream step: its name, its whole config (plain data) and its pure functions.

    Attributes:
      name: short name, unique within a plan (``"window_shuffle"``).
      config: the step's whole description; fingerprinted, printed by ``fpipe state show``.
      init: ``Key -> S`` (the key is the step's own, see :func:`fpipe.core.graph.step_key`).
      step: ``(S, X) -> (S, Y)``.
      flush: ``S -> (S, Y)``.
      state_type: the type of ``S`` (used to decode snapshots safely).
      block_size: None for streaming stages, else the input block length: an int, or
        ``S -> int``, the length of the block that starts at state ``S``.
      stats: optional ``S -> {counter: int}`` (e.g. ``{"filtered": 3}``), collected by name.
      members: for ``chain(a, b, ...)`` of stages, the stages it is made of (spliced into any
        chain it is put in, so it never appears as one step of its own).
      position: optional ``S -> (epoch, refs taken)``: where the consumer is in the *global*
        order, for a step that sees the global order and hands each rank its part (global-mode
        distribution). Read with :meth:`fpipe.core.Pipeline.position`.
      step_count: optional ``S -> int``, for a step that makes the recipes: the recipes it
        has emitted, which is the global step of its next recipe, known without planning it
        (a step emitting one recipe per block is at a block start between recipes). Read
        with :meth:`fpipe.core.Pipeline.next_step`.
      skip: optional ``(S, X) -> (S, int)``, for a block stage: the state ``step`` would
        return and the number of outputs it would emit, without building them (a batch step
        counts its recipe instead of joining its refs). :meth:`fpipe.core.Pipeline.skip` uses
        it to pass over outputs (skipped training steps) on the state alone.
      advance: optional :class:`~fpipe.core.advance.BlockAdvance`, for a stage with a fixed
        int ``block_size``: its state after many whole blocks and what they emit, from counts
        of their inputs (see :mod:`fpipe.core.advance`); ``chain`` then passes over many blocks
        at once without reading them (a seek).
    """

    name: str
    config: Config
    init: Callable[[Key], Any]
    step: Callable[[Any, Any], tuple[Any, Any]]
    flush: Callable[[Any], tuple[Any, Any]] = _no_flush
    state_type: Any = Unit
    block_size: int | Callable[[Any], int] | None = None
    stats: Callable[[Any], dict[str, int]] | None = None
    members: tuple = ()
    position: Callable[[Any], tuple[int, int]] | None = None
    step_count: Callable[[Any], int] | None = None
    skip: Callable[[Any, Any], tuple[Any, int]] | None = None
    advance: BlockAdvance | None = None


class Source(msgspec.Struct, frozen=True, kw_only=True):
    """A pulled stream: ``next(state, n) -> (state, chunk of at most n)``; empty at the end.

    Attributes:
      name, config: as for :class:`Stage`.
      init: ``root Key -> S``: the key of the plan (or sub-plan) the source is the end of;
        every step inside derives its own key from it with ``step_key``.
      next: ``(S, int) -> (S, Y)``.
      state_type: the type of ``S``.
      inputs: what the source reads: one View (``repeat``), one Source (a lifted stage) or
        several Sources (a multi-input step, whose input i is the sub-plan at path
        ``(name, i)``).
      split: ``S -> (own state, (state of input 0, ...))``; an input without state (a View)
        gets None. Used to find a step's state by name.
      stats: optional ``own state -> {counter: int}``.
      check: optional ``own state -> None``, run on every restore; raises
        SnapshotMismatchError when restored state does not fit the source's settings in a way
        the fingerprint leaves out on purpose (a blend's weights, named by dataset), or
        SnapshotError for a state the step can never be in (see :mod:`fpipe.core.state_check`).
      position: optional ``own state -> (epoch, refs taken)`` in the global order (see Stage).
      step_count: optional ``own state -> int``: the global step of the next recipe (see
        Stage).
      skip: optional ``(S, n) -> (S, passed)``: the state after the next ``n`` outputs (fewer,
        ``passed``, at the end of the stream), the very state ``next`` would reach, computed
        without building the outputs (a block stage with a ``skip`` of its own, lifted by
        ``chain``); for a source with ``next_steps``, after its next ``n`` steps, the state
        ``next_steps`` reaches. None: :meth:`fpipe.core.Pipeline.skip` pulls the outputs with
        ``next``.
      drawn: optional ``S -> S``: the state with every lookahead that the outputs so far were
        computed from drawn (a block stage part way through a block: its input read to the
        block's end). What an input has given up to there is all that the outputs so far
        depend on (online blend weights change from there). None: a source without inputs,
        whose state is already its position.
      advance: optional ``(S, n) -> (S, Passed)``: the state ``next`` reaches after the next
        ``n`` outputs and a :class:`~fpipe.core.advance.Passed` of them (outputs, refs, highest
        epoch), computed on counts where possible (see :mod:`fpipe.core.advance`). None:
        :meth:`fpipe.core.Pipeline.advance` pulls the outputs with ``next``.
      next_steps: optional ``(S, n) -> (S, chunk)``: the outputs of the next ``n`` steps, with
        None for a step that holds nothing for this rank (fewer than ``n`` only at the end),
        for a stream of recipes whose steps may go on after such a step: a blend of whole
        datasets, where an input's last, short global batch leaves a rank without a part
        (:mod:`fpipe.plan.recipe_blend`). ``next`` passes over such steps; a blend or mix that
        reads this stream uses ``next_steps`` to stay at the same steps as the other ranks.
        None: every step of ``next`` holds an output, but the last global one may hold none.
    """

    name: str
    config: Config
    init: Callable[[Key], Any]
    next: Callable[[Any, int], tuple[Any, Any]]
    state_type: Any
    inputs: tuple = ()
    split: Callable[[Any], tuple[Any, tuple]] = _own_state
    stats: Callable[[Any], dict[str, int]] | None = None
    check: Callable[[Any], None] | None = None
    position: Callable[[Any], tuple[int, int]] | None = None
    step_count: Callable[[Any], int] | None = None
    skip: Callable[[Any, int], tuple[Any, int]] | None = None
    drawn: Callable[[Any], Any] | None = None
    advance: Callable[[Any, int], tuple[Any, Passed]] | None = None
    next_steps: Callable[[Any, int], tuple[Any, Any]] | None = None


def by_steps(
    steps: Callable[[Any, int], tuple[Any, Any]],
) -> tuple[Callable[[Any, int], tuple[Any, tuple]], Callable[[Any, int], tuple[Any, int]]]:
    """``(next, skip)`` of a source whose ``steps(state, n)`` is its ``next_steps``: ``next``
    gives the next ``want`` outputs, passing over steps that hold nothing for this rank;
    ``skip`` passes ``n`` steps, not outputs, so that it lands at the same step on every
    rank."""

    def next_(state: Any, want: int) -> tuple[Any, tuple]:
        out: list[Any] = []
        while len(out) < want:
            state, got = steps(state, want - len(out))
            if not got:
                break
            out.extend(r for r in got if r is not None)  # a step with nothing: passed over
        return state, tuple(out)

    def skip(state: Any, n: int) -> tuple[Any, int]:
        state, got = steps(state, n)
        return state, len(got)

    return next_, skip


def stateless(name: str, config: Config, fn: Callable[[Any], Any]) -> Stage:
    """A streaming stage with :class:`Unit` state that maps each chunk with ``fn``.

    Example:
        >>> from fpipe.core.records import Refs
        >>> class Double(Config, frozen=True): pass
        >>> s = stateless("double", Double(), lambda r: r.with_columns(index=r.index * 2))
        >>> s.step(s.init(0), Refs.of(index=[1, 2]))[1].index.tolist()
        [2, 4]
    """
    unit = Unit()
    return Stage(
        name=name,
        config=config,
        init=lambda key: unit,
        step=lambda state, chunk: (state, fn(chunk)),
    )
