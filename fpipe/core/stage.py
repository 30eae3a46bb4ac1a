"""The stage protocol: a stage is a record of pure functions, never a subclass.

Types (``S`` the stage's state, ``X`` an input chunk, ``Y`` an output chunk)::

    init  :: Key -> S
    step  :: (S, X) -> (S, Y)        # Y may be empty; it never holds more than X allows
    flush :: S -> (S, Y)             # at the end of input; flushing twice yields nothing

    Source.init :: Key -> S
    Source.next :: (S, n) -> (S, Y)  # at most n outputs; empty only at the end of the stream

Chunks are :class:`~fpipe.core.records.Refs` between plan stages and tuples of recipes after
the batch stage; both support ``len``, slicing and concatenation.

A stage with ``block_size=None`` is *streaming*: it maps each chunk on its own and emits at most
as many outputs as it got inputs (map, filter). A stage with ``block_size=k`` needs lookahead:
it sees its input in fixed blocks of ``k`` items (the last block may be shorter), and its output
for block b is a pure function of (config, key, b, input block b). :func:`fpipe.core.chain`
turns such a stage into a pull source whose state is the input's state at the block start plus
a cursor into the block's output, so a restore recomputes one block and nothing more.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from fpipe.core.records import Config, Unit

__all__ = ["Source", "Stage", "stateless"]


def _no_flush(state):
    return state, ()


class Stage(msgspec.Struct, frozen=True, kw_only=True):
    """A pipeline stage: its name, its config (plain data) and its pure functions.

    Attributes:
      name: short name, unique within a named chain (``"shuffle"``).
      config: the stage's description; fingerprinted, printed by ``fpipe state show``.
      init: ``Key -> S``.
      step: ``(S, X) -> (S, Y)``.
      flush: ``S -> (S, Y)``.
      state_type: the type of ``S`` (used to decode snapshots safely).
      block_size: None for streaming stages, else the input block length.
    """

    name: str
    config: Config
    init: Callable[[int], Any]
    step: Callable[[Any, Any], tuple[Any, Any]]
    flush: Callable[[Any], tuple[Any, Any]] = _no_flush
    state_type: Any = Unit
    block_size: int | None = None


class Source(msgspec.Struct, frozen=True, kw_only=True):
    """A pull stream: ``next(state, n) -> (state, chunk of at most n)``; empty at the end.

    Attributes:
      name, config: as for :class:`Stage`; ``parts`` lists the (name, config) of everything the
        source is built from, outermost last, for fingerprints and printing.
      init: ``Key -> S``.
      next: ``(S, int) -> (S, Y)``.
      state_type: the type of ``S``.
      upstream: for a stage lifted over a source (see :func:`fpipe.core.chain`), that source.
    """

    name: str
    config: Config
    init: Callable[[int], Any]
    next: Callable[[Any, int], tuple[Any, Any]]
    state_type: Any
    parts: tuple = ()
    upstream: Any = None


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
