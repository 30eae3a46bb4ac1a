"""Walks over a plan's steps: keys, the flat list of steps, state and stats by name.

Every step record (:class:`~fpipe.core.stage.View`, :class:`~fpipe.core.stage.Stage` lifted into
a :class:`~fpipe.core.stage.Source`) names what it reads in ``inputs``. A step with one input
continues its input's list; a step with several inputs (a blend, an interleave) starts one
sub-list per input, whose steps have paths ``"<name>/<i>/<step>"``.

Example:
    >>> from fpipe.core import Pipeline, chain
    >>> from fpipe.plan import batch, filter_refs, repeat, samples
    >>> import numpy as np
    >>> p = Pipeline(chain(repeat(samples(10, columns={"t": np.arange(10)}), 1),
    ...                    filter_refs("t", "<", 7), batch(3)), seed=0)
    >>> [path for path, _ in step_parts(p.source)]
    ['samples', 'repeat', 'filter', 'batch']
    >>> state = p.init()
    >>> for _ in range(2):
    ...     state, _ = p.next(state)
    >>> get_state(p.source, state, "filter").dropped, collect_stats(p.source, state)
    (0, {'filter': {'filtered': 0}, 'batch': {'batch_remainder': 0}})
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from fpipe.core.errors import ConfigError
from fpipe.core.fingerprint import record_fields
from fpipe.core.records import Config
from fpipe.core.rng import Key, fold_in, name_id

__all__ = [
    "check_restored",
    "collect_stats",
    "describe_steps",
    "get_state",
    "global_position",
    "input_root",
    "next_step",
    "step_key",
    "step_parts",
]


def step_key(root: Key, *path: str | int) -> Key:
    """The key of the step at ``path`` under ``root``: names are folded in as ``name_id``,
    input numbers as they are. ``step_key(root, "shuffle")`` is a top-level step's key."""
    return fold_in(root, *(name_id(p) if isinstance(p, str) else p for p in path))


_INPUTS = name_id("inputs")


def input_root(root: Key, name: str, i: int) -> Key:
    """The root key of input ``i`` (a sub-plan) of the multi-input step ``name``.

    Folded under a tag, so it never equals a key the step derives for its own decisions from
    ``step_key(root, name)`` and a position: ``fold_in(step_key(root, name), position)``.
    """
    return fold_in(step_key(root, name), _INPUTS, i)


def _walk(node: Any, prefix: str, state: Any, with_state: bool) -> Iterator[tuple]:
    """(path, node, own state) for every step, in data-flow order (inputs first)."""
    inputs = node.inputs
    if with_state and hasattr(node, "next"):
        own, subs = node.split(state)
    else:
        own, subs = None, (None,) * len(inputs)
    if len(inputs) == 1:
        yield from _walk(inputs[0], prefix, subs[0], with_state)
    else:
        for i, (inp, sub) in enumerate(zip(inputs, subs)):
            yield from _walk(inp, f"{prefix}{node.name}/{i}/", sub, with_state)
    yield prefix + node.name, node, own


def step_parts(node: Any) -> tuple[tuple[str, Config], ...]:
    """``(path, config)`` of every step, in data-flow order: what is fingerprinted.

    Raises ConfigError when two steps share a path (keys and state addresses come from it).
    """
    parts = tuple((path, n.config) for path, n, _ in _walk(node, "", None, False))
    check_unique_names(path for path, _ in parts)
    return parts


def check_unique_names(names: Iterable[str]) -> None:
    """Raise ConfigError naming the first step path that occurs twice: keys and state
    addresses come from step paths (checked by :func:`step_parts` and when a chain is built)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ConfigError(
                f"two steps are named {name!r} in one pipeline; step keys and state addresses "
                f"come from names, so give one of them another name (name=...)"
            )
        seen.add(name)


def describe_steps(node: Any) -> list[dict]:
    """One ``{"name", "type", field: value...}`` dict per step, in data-flow order; a step with
    several inputs carries ``"inputs": [[steps of input 0], ...]`` instead of following them."""
    inputs = node.inputs
    own = {
        "name": node.name,
        "type": type(node.config).__name__,
        **record_fields(node.config),
    }
    if len(inputs) == 1:
        return describe_steps(inputs[0]) + [own]
    if inputs:
        own["inputs"] = [describe_steps(i) for i in inputs]
    return [own]


def get_state(node: Any, state: Any, path: str) -> Any:
    """The state of the step at ``path`` (its name, or ``"mix/0/shuffle"`` inside the input 0
    of a multi-input step named ``mix``). Views keep no state: asking for one is an error."""
    names = []
    for p, n, own in _walk(node, "", state, True):
        if p == path:
            if not hasattr(n, "next"):
                raise KeyError(
                    f"step {path!r} is a random-access view and keeps no state (its position "
                    "is the state of the step that reads it, e.g. repeat)"
                )
            return own
        names.append(p)
    raise KeyError(f"no step {path!r} in this pipeline; steps: {names}")


def collect_stats(node: Any, state: Any) -> dict[str, dict[str, int]]:
    """``{path: {counter: value}}`` for every step that declares ``stats``."""
    return {
        p: n.stats(own)
        for p, n, own in _walk(node, "", state, True)
        if getattr(n, "stats", None) is not None
    }


def global_position(node: Any, state: Any) -> tuple[int, int] | None:
    """``(epoch, refs taken)`` in the global order, from the last step that declares
    ``position`` (global-mode distribution); None when no step does (per-rank mode)."""
    found = None
    for _, n, own in _walk(node, "", state, True):
        if getattr(n, "position", None) is not None:
            found = n.position(own)
    return found


def next_step(node: Any, state: Any) -> int | None:
    """The global step of the next recipe from ``state``, from the last step that declares
    ``step_count`` (the one that makes the recipes), without planning it; None when no step
    does (a plan of refs)."""
    found = None
    for _, n, own in _walk(node, "", state, True):
        if getattr(n, "step_count", None) is not None:
            found = n.step_count(own)
    return found


def check_restored(node: Any, state: Any) -> None:
    """Run every step's ``check`` (see :class:`~fpipe.core.stage.Source`) on a restored state."""
    for _, n, own in _walk(node, "", state, True):
        check = getattr(n, "check", None)
        if check is not None:
            check(own)
