"""Blending or concatenating whole planned datasets: a stream of recipes from several plans.

Where :func:`fpipe.plan.blend` mixes *samples* of several datasets into one plan (a batch then
holds samples of every dataset), :func:`blend_recipes` mixes *batches*: each input is a finished
plan (a Source of recipes, with its own batch size, shuffle and seed), and each output is the
next recipe of one input. This is Energon's ``BlendDataset`` / ``ConcatDataset`` over datasets
that are already batched, each with its own task encoder.

* ``mode="weighted"``: output ``t`` comes from input ``d`` with probability
  ``w_d / sum(w)`` over the inputs that have not ended, drawn from ``fold_in(key, t)``: a pure
  function of the position, the same for any number of workers and on every rank. An input
  that ends leaves the draw (its weight becomes 0); the blend ends when every input has.
* ``mode="concat"``: every recipe of input 0, then of input 1, and so on.

An input advances only when it is chosen, so input ``d``'s recipes are the very recipes its plan
gives alone (its own seed's keys), in its order. Each output is restamped with the blend's
step (its position) and tagged with ``part``, the input it came from (offset by ``parts``: an
input that is itself a blend of ``k`` datasets takes ``k`` part numbers), so the materialize
tier hands it to that dataset's own materializer (:mod:`fpipe.materialize.parts`).

In global mode the draws are the same on every rank, and so are the inputs' steps but one: the
last, short global batch of an input with ``drop_last=False`` may leave a rank without a part.
That step still takes its position on such a rank, which gets no output there (the stream goes
on at the next step, with the other ranks); blends and mixes that read a blend see it through
``Source.next_steps`` (None for a step with nothing for this rank).

The state is the position, one ``ended`` flag and one step counter per input, and each
input's own state: it restores exactly, and elastically where every input does (nothing here
depends on the world size).

Example:
    >>> from fpipe.core import chain
    >>> from fpipe.plan import batch, repeat, samples
    >>> a = chain(repeat(samples(4, dataset=0), 1), batch(2))
    >>> b = chain(repeat(samples(6, dataset=0), 1), batch(3))
    >>> src = blend_recipes([a, b], seeds=[1, 2], mode="concat")
    >>> state, out = src.next(src.init(0), 10)
    >>> [(r.step, r.part, len(r)) for r in out]
    [(0, 0, 2), (1, 0, 2), (2, 1, 3), (3, 1, 3)]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, Literal, TypeVar

import msgspec
import numpy as np

from fpipe.core.errors import ConfigError, SnapshotError
from fpipe.core.graph import global_position, step_key
from fpipe.core.records import Config, State
from fpipe.core.rng import Key, fold_in, key, uniform
from fpipe.core.stage import Source, by_steps
from fpipe.plan.blend_choice import pick

__all__ = ["RecipeBlendConfig", "RecipeBlendState", "blend_recipes"]

_CHOICE = 0xB7E4D  # fold_in tag of the blend's choice key
_END = object()  # an input's end (None: a step of the input that holds nothing for this rank)

T = TypeVar("T")

RecipeBlendMode = Literal["weighted", "concat"]


class RecipeBlendConfig(Config, frozen=True):
    """A blend of the recipe streams of ``datasets`` (names, in order).

    ``mode``: ``"weighted"`` (``weights``, one per input) or ``"concat"`` (one input after the
    other). ``seeds``: the seed of each input's plan (its root key, so its recipes are those it
    gives alone). ``parts``: the part numbers each input's recipes take (1 for a plain dataset,
    ``k`` for an input that is itself a blend of ``k``)."""

    datasets: tuple[str, ...]
    seeds: tuple[int, ...]
    mode: RecipeBlendMode = "weighted"
    weights: tuple[float, ...] = ()
    parts: tuple[int, ...] = ()


class RecipeBlendState(State, Generic[T], frozen=True, array_like=True):
    """``key``: the root key of the blend's plan; ``position``: steps given so far (the next
    output's step); ``ended[d]``: input ``d`` reached its end; ``taken[d]``: steps input ``d``
    gave (its recipes, and a step that held nothing for this rank); ``inputs``: each input's own
    state: the same values on every rank."""

    key: Key
    position: int
    ended: tuple[bool, ...]
    taken: tuple[int, ...]
    inputs: T


def _parametrize(generic: Any, args: Any) -> Any:
    """``generic[args]`` for type arguments known only at run time (the state type snapshots
    are decoded with)."""
    return generic[args]


def blend_recipes(
    sources: Sequence[Source],
    *,
    seeds: Sequence[int],
    weights: Sequence[float] | None = None,
    mode: RecipeBlendMode = "weighted",
    names: Sequence[str] | None = None,
    parts: Sequence[int] | None = None,
    name: str = "blend_batches",
) -> Source:
    """A source of the recipes of ``sources`` (finished plans), blended by ``weights`` or
    concatenated (``mode="concat"``); see the module docstring.

    Args:
      sources: one plan's source per dataset, each giving recipes (batches).
      seeds: the seed each plan runs with alone (its pipeline's ``seed``).
      weights: with ``mode="weighted"``: one weight > 0 per input (relative).
      names: unique input names (default ``d0, d1, ...``), for messages and descriptions.
      parts: part numbers each input takes (default 1 each; see the module docstring).
    """
    n = len(sources)
    names = tuple(names) if names is not None else tuple(f"d{i}" for i in range(n))
    if n == 0 or len(names) != n or len(set(names)) != n:
        raise ConfigError(f"{name} needs one unique name per input, got {names} for {n} inputs")
    if len(seeds) != n:
        raise ConfigError(f"{name}: {len(seeds)} seeds for {n} inputs")
    parts = tuple(parts) if parts is not None else (1,) * n
    if len(parts) != n or any(p < 1 for p in parts):
        raise ConfigError(f"{name}: parts must be >= 1, one per input: {parts}")
    row: tuple[float, ...] = ()
    if mode == "weighted":
        if weights is None or len(weights) != n:
            raise ConfigError(f"{name}: one weight per input, got {weights} for {n} inputs")
        row = tuple(float(w) for w in weights)
        if any(not (0 < w < float("inf")) for w in row):
            raise ConfigError(f"{name}: every weight must be finite and > 0, got {list(row)}")
    elif mode != "concat":
        raise ConfigError(f"{name}: mode must be 'weighted' or 'concat', got {mode!r}")
    elif weights is not None:
        raise ConfigError(f"{name}: a concatenation takes no weights")
    config = RecipeBlendConfig(
        datasets=names, seeds=tuple(int(s) for s in seeds), mode=mode, weights=row, parts=parts
    )
    offsets = tuple(int(x) for x in np.concatenate([[0], np.cumsum(parts)[:-1]]))
    state_type = _parametrize(
        RecipeBlendState, _parametrize(tuple, tuple(s.state_type for s in sources))
    )

    def init(root: Key):
        inputs = tuple(s.init(key(seed)) for s, seed in zip(sources, config.seeds))
        return state_type(root, 0, (False,) * n, (0,) * n, inputs)

    def choose(state) -> int:
        """The input that gives output ``state.position``, among those not ended."""
        if mode == "concat":
            return state.ended.index(False)
        live = tuple(0.0 if e else w for e, w in zip(state.ended, row))
        u = uniform(fold_in(step_key(state.key, name), _CHOICE), state.position)
        return int(pick(live, np.array([u]))[0])

    def pull(d: int, sub):
        """Input ``d``'s next step from its state ``sub``: ``(state, recipe)``, ``(state, None)``
        where the step holds nothing for this rank, or ``(state, _END)`` at the input's end."""
        source = sources[d]
        if source.next_steps is not None:  # a blend or mix, whose steps may hold nothing
            after, got = source.next_steps(sub, 1)
            return after, got[0] if len(got) else _END
        after, got = source.next(sub, 1)
        if len(got):
            return after, got[0]
        # Global mode: an input that moved on in the global order without a recipe for this
        # rank gave its last, short global batch to the other ranks alone. The step is the
        # input's on every rank, as it is for the others; on this rank it holds nothing.
        if global_position(source, after) != global_position(source, sub):
            return after, None
        return after, _END

    def steps(state, want: int):
        """The outputs of the next ``want`` positions, None where one holds nothing for this
        rank (fewer only at the end)."""
        out: list[Any] = []
        while len(out) < want and not all(state.ended):
            d = choose(state)
            sub, got = pull(d, state.inputs[d])
            inputs = state.inputs[:d] + (sub,) + state.inputs[d + 1 :]
            if got is _END:  # input d has ended: it leaves the draw, the position stays
                ended = state.ended[:d] + (True,) + state.ended[d + 1 :]
                state = msgspec.structs.replace(state, ended=ended, inputs=inputs)
                continue
            if got is not None:
                got = msgspec.structs.replace(got, step=state.position, part=offsets[d] + got.part)
            out.append(got)
            taken = state.taken[:d] + (state.taken[d] + 1,) + state.taken[d + 1 :]
            state = msgspec.structs.replace(
                state, position=state.position + 1, taken=taken, inputs=inputs
            )
        return state, tuple(out)

    next_, skip = by_steps(steps)

    def check(state) -> None:
        if len(state.ended) != n or len(state.taken) != n or len(state.inputs) != n:
            raise SnapshotError(
                f"snapshot state of {name!r}: counters for {len(state.taken)} inputs, the blend "
                f"has {n}: the snapshot was edited or corrupted"
            )
        if sum(state.taken) != state.position:
            raise SnapshotError(
                f"snapshot state of {name!r}: position {state.position} is not the sum of its "
                f"inputs' recipes {list(state.taken)}: the snapshot was edited or corrupted"
            )

    # Inputs in global-mode distribution report where they are in their global order.
    global_inputs = [
        i
        for i, (s, seed) in enumerate(zip(sources, config.seeds))
        if global_position(s, s.init(key(seed))) is not None
    ]

    def position(state) -> tuple[int, int]:
        """Epoch (the highest) and refs taken (the sum) of the inputs in global mode."""
        found: list[tuple[int, int]] = []
        for i in global_inputs:
            at = global_position(sources[i], state.inputs[i])
            if at is not None:
                found.append(at)
        return max(e for e, _ in found), sum(r for _, r in found)

    def drawn(state):
        inputs = tuple(
            st if s.drawn is None else s.drawn(st) for s, st in zip(sources, state.inputs)
        )
        return msgspec.structs.replace(state, inputs=inputs)

    return Source(
        name=name,
        config=config,
        init=init,
        next=next_,
        state_type=state_type,
        inputs=tuple(sources),
        split=lambda s: (s, s.inputs),
        check=check,
        position=position if global_inputs else None,
        step_count=lambda s: s.position,  # each output is restamped with the blend's step
        drawn=drawn,
        skip=skip,
        next_steps=steps,
    )
