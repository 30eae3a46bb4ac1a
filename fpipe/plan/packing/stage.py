"""Pack selection in the plan tier: groups of refs under several budgets, from index metadata.

The step reads its input in packing buffers of ``packing_buffer_size`` refs (one block each:
a restore recomputes one buffer) and emits the buffer's packs, each a :class:`Refs` chunk, as
units. Costs come from metadata columns (``tokens``, ``images``, byte sizes, or any column
added at prepare time); the budgets are ``{column: limit}``. A ref over a budget on its own is
dropped and counted, truncated by a hook, or raises (:class:`OverBudget`). The batch step
downstream takes ``batch_size`` packs per recipe, so leftovers of a buffer go into the next
batch, deterministically.

Example:
    >>> import numpy as np
    >>> from fpipe.core.records import Refs
    >>> s = pack({"tokens": 100}, strategy="ffd", packing_buffer_size=24, shuffle_packs=False)
    >>> st, packs = s.step(s.init(0), Refs.of(index=np.arange(24), tokens=np.arange(1, 25)))
    >>> [int(p.column("tokens").sum()) for p in packs]
    [100, 100, 100]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.core.records import Config, Refs, State
from fpipe.core.rng import Key, fold_in, permutation
from fpipe.core.stage import Stage
from fpipe.plan.packing.algorithms import (
    ALGORITHMS,
    OverBudget,
    Packing,
    apply_over_budget,
    packing_from_groups,
)

__all__ = ["PackConfig", "PackState", "pack"]


class PackConfig(Config, frozen=True):
    """Pack refs of each buffer of ``packing_buffer_size`` under ``budgets``.

    ``budgets``: ``(column, limit)`` pairs; the first one orders the decreasing strategies.
    ``strategy``: ``greedy``, ``ffd``, ``bfd``, ``balanced``, or ``fn:<module:qualname>`` for
    a user function ``(refs of the buffer) -> groups of positions``.
    ``over_budget``: :class:`OverBudget`; ``truncate``: the hook's name under ``truncate``.
    ``shuffle_packs``: emit the packs of a buffer in a keyed random order (decreasing strategies
    otherwise put the packs holding the largest samples first).
    """

    budgets: tuple[tuple[str, int], ...]
    strategy: str = "ffd"
    packing_buffer_size: int = 1000
    over_budget: OverBudget = OverBudget.DROP
    truncate: str | None = None
    shuffle_packs: bool = True


class PackState(State, frozen=True, array_like=True):
    """``key``: the step's key; ``buffers``: buffers packed so far; ``dropped``: refs dropped
    as over budget; ``truncated``: refs whose costs the truncate hook cut."""

    key: Key
    buffers: int = 0
    dropped: int = 0
    truncated: int = 0


def _name(fn: Callable, name: str) -> str:
    qual = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"
    if "<lambda>" in qual or "<locals>" in qual:
        return f"local:{name}"
    return qual


def _select_packs(
    config: PackConfig,
    buffer: Refs,
    key: Key,
    strategy: Callable | None = None,
    truncate: Callable | None = None,
) -> tuple[tuple[Refs, ...], int, int]:
    """The packs of one buffer: ``(packs, dropped, truncated)``; a pure function.

    ``strategy`` is the user function when ``config.strategy`` names one; ``key`` orders the
    packs when ``config.shuffle_packs``. Truncated costs are written back to their columns.
    """
    names = [c for c, _ in config.budgets]
    limits = np.asarray([lim for _, lim in config.budgets], dtype=np.int64)
    costs = np.stack([np.asarray(buffer.column(c), dtype=np.int64) for c in names], axis=1)

    def describe(i: int) -> str:
        return f"ref (dataset {int(buffer.dataset[i])}, index {int(buffer.index[i])})"

    keep, kept_costs = apply_over_budget(costs, limits, config.over_budget, truncate, describe)
    dropped = len(buffer) - len(keep)
    truncated = 0  # only the truncate policy changes costs (drop and raise keep rows as they are)
    if config.over_budget is OverBudget.TRUNCATE:
        truncated = int((kept_costs != costs[keep]).any(axis=1).sum())
    refs = buffer[keep] if dropped else buffer
    if truncated:
        refs = refs.with_columns(**{c: kept_costs[:, j] for j, c in enumerate(names)})
    if strategy is not None:
        packing = packing_from_groups(strategy(refs), len(refs))
        loads = packing.loads(kept_costs)
        if len(loads) and (loads > limits).any():
            raise ConfigError(f"the packing strategy {config.strategy!r} made a pack over budget")
    else:
        packing = ALGORITHMS[config.strategy](kept_costs, limits)
    if config.shuffle_packs and len(packing) > 1:
        packing = packing.permute(permutation(key, len(packing), np.arange(len(packing))))
    return _split(refs, packing), dropped, truncated


def _split(refs: Refs, packing: Packing) -> tuple[Refs, ...]:
    """The packs as chunks: one gather of the buffer's columns, then a view per pack."""
    names = list(refs.columns)
    bounds = packing.offsets.tolist()
    spans = list(zip(bounds[:-1], bounds[1:]))
    # column by column, then one dict per pack (fewer Python-level steps per pack)
    parts = [[c[a:b] for a, b in spans] for c in (refs.columns[n][packing.order] for n in names)]
    wrap = Refs.wrap
    return tuple([wrap(dict(zip(names, views))) for views in zip(*parts)])


def pack(
    budgets: Mapping[str, int],
    *,
    strategy: str | Callable = "ffd",
    packing_buffer_size: int = 1000,
    over_budget: OverBudget | str = OverBudget.DROP,
    truncate: Callable | None = None,
    shuffle_packs: bool = True,
    name: str = "pack",
) -> Stage:
    """A block step that packs each buffer of refs under ``budgets`` and emits the packs.

    Args:
      budgets: ``{column: limit}``, e.g. ``{"tokens": 4096, "images": 8}``.
      strategy: a name of :data:`~fpipe.plan.packing.algorithms.ALGORITHMS` or a function
        ``(refs) -> groups of positions`` (give ``name=`` for a lambda or local function).
      packing_buffer_size: refs per buffer (one block: a restore recomputes one buffer).
      over_budget: ``"drop"`` (count), ``"truncate"`` (``truncate(costs, limits)``, default
        clip) or ``"raise"``.
      shuffle_packs: emit each buffer's packs in a keyed random order.
    """
    if not budgets:
        raise ConfigError("pack() needs at least one budget, e.g. {'tokens': 4096}")
    if packing_buffer_size < 1:
        raise ConfigError(f"packing_buffer_size must be >= 1, got {packing_buffer_size}")
    user = None
    if callable(strategy):
        user, label = strategy, _name(strategy, name)
        if label.startswith("local:") and name == "pack":
            raise ConfigError(
                "pack(strategy=fn) with a lambda or local function needs name=... so that "
                "snapshots can tell pipelines apart"
            )
        strategy = f"fn:{label}"
    elif strategy not in ALGORITHMS:
        raise ConfigError(f"strategy must be one of {sorted(ALGORITHMS)} or a function")
    config = PackConfig(
        budgets=tuple((str(c), int(v)) for c, v in budgets.items()),
        strategy=strategy,
        packing_buffer_size=packing_buffer_size,
        over_budget=OverBudget(over_budget),
        truncate=None if truncate is None else _name(truncate, name),
        shuffle_packs=shuffle_packs,
    )

    def step(state: PackState, buffer: Refs):
        if not len(buffer):
            return state, ()
        packs, dropped, cut = _select_packs(
            config, buffer, fold_in(state.key, state.buffers), user, truncate
        )
        new = PackState(
            state.key, state.buffers + 1, state.dropped + dropped, state.truncated + cut
        )
        return new, packs

    return Stage(
        name=name,
        config=config,
        init=lambda key: PackState(key),
        step=step,
        state_type=PackState,
        block_size=packing_buffer_size,
        stats=_pack_stats,
    )


def _pack_stats(state: PackState) -> dict[str, int]:
    return {"over_budget": state.dropped}
