"""A small multi-input step: round-robin interleave of sub-plans (proves the model; the blend
step is the real one). One item from input 0, one from input 1, ...; an input that ends is
skipped; the stream ends when all have ended."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from fpipe.core import Config, Source, State, input_root
from fpipe.core.compose import concat_chunks
from fpipe.core.errors import ConfigError

T = TypeVar("T")


class InterleaveConfig(Config, frozen=True):
    """Round-robin over ``num_inputs`` sub-plans (their own steps are fingerprinted as
    ``interleave/<i>/<step>``)."""

    num_inputs: int


class InterleaveState(State, Generic[T], frozen=True, array_like=True):
    """``inputs``: each sub-plan's state; ``turn``: input to read next; ``done``: bit i set when
    input i has ended."""

    inputs: T
    turn: int = 0
    done: int = 0


def interleave(*inputs: Source, name: str = "interleave") -> Source:
    """Round-robin interleave of the sub-plans ``inputs``; input i runs under the root key
    ``input_root(root, name, i)``, so the same sub-plan given twice yields two streams."""
    if len(inputs) < 2 or not all(isinstance(s, Source) for s in inputs):
        raise ConfigError("interleave needs at least two sub-plans (Sources)")
    k = len(inputs)
    all_done = (1 << k) - 1

    def init(root):
        subs = tuple(s.init(input_root(root, name, i)) for i, s in enumerate(inputs))
        return InterleaveState(subs, 0, 0)

    def next_(state: InterleaveState, n: int):
        subs, turn, done, got = list(state.inputs), state.turn, state.done, []
        while len(got) < n and done != all_done:
            if not done >> turn & 1:
                subs[turn], chunk = inputs[turn].next(subs[turn], 1)
                if len(chunk):
                    got.append(chunk)
                else:
                    done |= 1 << turn
            turn = (turn + 1) % k
        return InterleaveState(tuple(subs), turn, done), concat_chunks(got)

    return Source(
        name=name,
        config=InterleaveConfig(num_inputs=k),
        init=init,
        next=next_,
        state_type=InterleaveState[tuple[tuple(s.state_type for s in inputs)]],
        inputs=inputs,
        split=_split,
    )


def _split(state: InterleaveState) -> tuple[Any, tuple]:
    return state, tuple(state.inputs)
