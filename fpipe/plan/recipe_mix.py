"""Mixed batches: ``size`` consecutive recipes of a stream grouped into one step.

Energon's ``MixBatchDataset`` draws single-sample batches from several datasets by weight
(a ``BlendDataset``) and combines every ``batch_size`` draws into one batch with a
``batch_mix_fn``. Here the draws are the recipes of :func:`fpipe.plan.recipe_blend.blend_recipes`
(each tagged with the dataset, ``part``, that planned it), and :func:`mix_recipes` groups them:
output ``t`` is one :class:`~fpipe.core.records.Recipe` whose ``mix`` holds input recipes
``t * size`` to ``t * size + size - 1`` and whose ``refs`` are theirs in order (so counting,
naming and restoring samples see the batch's samples). The materialize tier builds each member
with its own dataset's materializer and mixes the results (:mod:`fpipe.materialize.mix`).

A group is a pure function of its input recipes, which are a pure function of the input's
state; the state is the number of groups given and the input's state after the last one, so a
restore is exact and the output does not depend on the number of workers. At the end of the
input the last group may be short (Energon's ``BatchDataset`` keeps it). Over a source with
``next_steps`` (a blend), a group is ``size`` of its steps, less those that hold nothing for
this rank (a global-mode dataset's last, short batch), so every rank groups the same steps.

Example:
    >>> from fpipe.core import chain
    >>> from fpipe.plan import batch, repeat, samples
    >>> a = chain(repeat(samples(5, dataset=0), 1), batch(1))
    >>> src = mix_recipes(a, 2)
    >>> state, out = src.next(src.init(0), 10)
    >>> [(r.step, len(r.mix), r.refs.index.tolist()) for r in out]
    [(0, 2, [0, 1]), (1, 2, [2, 3]), (2, 1, [4])]
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec

from fpipe.core.errors import ConfigError, SnapshotError
from fpipe.core.records import REQUIRED_COLUMNS, Config, Recipe, Refs, State
from fpipe.core.stage import Source, by_steps

__all__ = ["RecipeMixConfig", "RecipeMixState", "mix_recipes"]

T = TypeVar("T")


class RecipeMixConfig(Config, frozen=True):
    """``size``: how many input recipes make one output recipe."""

    size: int


class RecipeMixState(State, Generic[T], frozen=True, array_like=True):
    """``position``: groups given so far (the next output's step); ``input``: the input's
    state after the last recipe of the last group."""

    position: int
    input: T


def _parametrize(generic: Any, args: Any) -> Any:
    return generic[args]


def mix_recipes(source: Source, size: int, *, name: str = "mix_batches") -> Source:
    """A source whose every output groups the next ``size`` recipes of ``source`` (a
    :class:`~fpipe.core.records.Recipe` with ``mix`` set); see the module docstring."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ConfigError(f"{name}: the batch size must be an int >= 1, got {size!r}")
    config = RecipeMixConfig(size=size)
    state_type = _parametrize(RecipeMixState, source.state_type)

    def init(root):
        return state_type(0, source.init(root))

    def members_of(sub):
        """The input's state after the next group and the group's members, None for a group
        of steps that hold nothing for this rank; ``()`` at the end."""
        if source.next_steps is not None:  # steps may hold nothing: a group is ``size`` steps
            sub, got = source.next_steps(sub, size)
            members = tuple(r for r in got if r is not None)
            return sub, members if members or not got else None
        sub, got = source.next(sub, size)
        members = tuple(got)
        while members and len(members) < size:  # the input gives fewer than asked
            sub, more = source.next(sub, size - len(members))
            if not len(more):
                break
            members += tuple(more)
        return sub, members

    def steps(state, want: int):
        """The outputs of the next ``want`` steps, None where one holds nothing for this rank
        (fewer only at the end)."""
        out: list[Recipe | None] = []
        sub = state.input
        while len(out) < want:
            sub, members = members_of(sub)
            if members is None:
                out.append(None)
                continue
            if not members:
                break
            step = state.position + len(out)
            # the id columns only: the members' datasets may have different metadata columns
            refs = Refs.concat(
                Refs({c: m.refs.columns[c] for c in REQUIRED_COLUMNS}) for m in members
            )
            out.append(Recipe(step=step, refs=refs, key=members[0].key, mix=members))
            if len(members) < size and source.next_steps is None:
                break
        return state_type(state.position + len(out), sub), tuple(out)

    next_, skip = by_steps(steps)

    def check(state) -> None:
        if state.position < 0:
            raise SnapshotError(
                f"snapshot state of {name!r}: negative position {state.position}: the snapshot "
                "was edited or corrupted"
            )

    def drawn(state):
        if source.drawn is None:
            return state
        return msgspec.structs.replace(state, input=source.drawn(state.input))

    return Source(
        name=name,
        config=config,
        init=init,
        next=next_,
        state_type=state_type,
        inputs=(source,),
        split=lambda s: (s, (s.input,)),
        check=check,
        step_count=lambda s: s.position,
        drawn=drawn,
        skip=skip,
        next_steps=steps,
    )
