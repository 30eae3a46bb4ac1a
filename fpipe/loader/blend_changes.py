"""Online weight changes applied to a plan's blend state.

A change ``(step, weights)`` is applied to the plan state *before* global step ``step`` (the
state after step ``step - 1``): :func:`apply_change` finds the blend's frontier there (see
:mod:`fpipe.plan.online_mix`) and records the change in the blend's state. The live loader,
a replay of the history and :func:`fpipe.loader.seek.seek_state` all apply a change at the
same state, so they reach the same states, byte for byte.
"""

from __future__ import annotations

from typing import Any

from fpipe.core.errors import ConfigError
from fpipe.core.pipeline import Pipeline
from fpipe.loader.mix_history import MixChange
from fpipe.plan.blend import BlendConfig, online_mix, with_online_change
from fpipe.plan.online_mix import drawn_state, replace_step_state

__all__ = ["apply_change", "blend_of", "next_step", "state_mix"]


def _chain_blend(plan: Pipeline) -> Any:
    """The blend source at the head of the plan's main chain (None if there is none)."""
    source = plan.source
    while not isinstance(source.config, BlendConfig):
        if len(source.inputs) != 1 or not hasattr(source.inputs[0], "next"):
            return None
        source = source.inputs[0]
    return source


def _blend_state(plan: Pipeline, state: Any) -> Any:
    """The state of the blend at the head of the main chain, within ``state``."""
    source = plan.source
    while not isinstance(source.config, BlendConfig):
        source, state = source.inputs[0], state.up
    return state


def blend_of(plan: Pipeline) -> tuple[str, BlendConfig]:
    """``(path, config)`` of the plan's weighted blend; a ConfigError when it has none."""
    head = _chain_blend(plan)
    found = [(head.name, head.config)] if head is not None else plan.parts
    for path, config in found:
        if isinstance(config, BlendConfig):
            if config.mode != "weighted":
                raise ConfigError(
                    "set_weights needs a weighted blend ('blend:' in the metadataset); an "
                    "epochized blend ('blend_epochized:') takes fixed passes of each dataset"
                )
            return path, config
    raise ConfigError(
        "set_weights needs a blend of several datasets (a metadataset with 'blend:'); this "
        "plan reads one dataset"
    )


def state_mix(plan: Pipeline, state: Any):
    """The :class:`~fpipe.plan.online_mix.OnlineMix` in a plan state (None: no change yet)."""
    _, config = blend_of(plan)
    return online_mix(_blend_state(plan, state), len(config.datasets))


def apply_change(plan: Pipeline, state: Any, change: MixChange) -> Any:
    """The plan state before step ``change.step`` (``state``) with the change applied from the
    blend's frontier there."""
    path, config = blend_of(plan)
    if _chain_blend(plan) is None:
        raise ConfigError("online blend weights need the blend at the head of the plan")
    frontier = _blend_state(plan, drawn_state(plan.source, state)).position
    own = _blend_state(plan, state)
    new = with_online_change(
        own, len(config.datasets), position=frontier, step=change.step, weights=change.raw
    )
    return replace_step_state(plan.source, state, path, new)


def next_step(plan: Pipeline, state: Any) -> int:
    """The global step of the next recipe from ``state``, from the state's step count
    (:meth:`fpipe.core.Pipeline.next_step`), not from planning that recipe: a change due at
    that step must come before it is planned, since under the weights before the change a
    finite stream may have no such step while under the change's it has one."""
    step = plan.next_step(state)
    if step is None:
        raise ConfigError("online blend weights need a plan that makes batch recipes")
    return step


def _apply_due(plan, state, step, changes, i):
    while i < len(changes) and changes[i].step <= step:
        state = apply_change(plan, state, changes[i])
        i += 1
    return state, i
