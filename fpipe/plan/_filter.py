"""Filter refs by their metadata; every dropped ref is counted in the state.

A predicate is either data (``column``, ``op``, ``value``: fingerprinted exactly) or a named
function ``fn(refs) -> bool mask`` (fingerprinted by its qualified name).
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.core.records import Config, Refs, State
from fpipe.core.stage import Stage

__all__ = ["FilterConfig", "FilterState", "filter_refs"]

_OPS: dict[str, Callable] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
    "in": lambda col, values: np.isin(col, np.asarray(values)),
    "not in": lambda col, values: ~np.isin(col, np.asarray(values)),
}


class FilterConfig(Config, frozen=True):
    """Keep refs where ``column op value`` holds, or where ``fn`` (by name) returns True."""

    column: str | None = None
    op: str | None = None
    value: int | float | str | tuple | None = None
    fn: str | None = None


class FilterState(State, frozen=True, array_like=True):
    """``dropped``: refs removed so far (counted, never silent)."""

    dropped: int = 0


def filter_refs(
    column: str | Callable[[Refs], np.ndarray],
    op: str | None = None,
    value=None,
    *,
    name: str = "filter",
) -> Stage:
    """Keep refs whose metadata passes a predicate.

    Example:
        >>> s = filter_refs("tokens", "<=", 5)
        >>> st, out = s.step(s.init(0), Refs.of(index=[0, 1, 2], tokens=[3, 9, 5]))
        >>> out.index.tolist(), st.dropped
        ([0, 2], 1)
    """
    if callable(column):
        fn = column
        qual = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"
        if "<lambda>" in qual or "<locals>" in qual:
            # Lambdas have no stable name to fingerprint; demand an explicit one.
            if name == "filter":
                raise ConfigError(
                    "filter_refs(fn) with a lambda or local function needs name=... so that "
                    "snapshots can tell pipelines apart"
                )
            qual = f"local:{name}"
        config = FilterConfig(fn=qual)
        predicate = fn
    else:
        if op not in _OPS:
            raise ConfigError(f"filter op must be one of {sorted(_OPS)}, got {op!r}")
        if isinstance(value, list):
            value = tuple(value)
        config = FilterConfig(column=column, op=op, value=value)
        compare = _OPS[op]

        def predicate(refs: Refs) -> np.ndarray:
            return compare(refs.column(column), value)

    def step(state: FilterState, chunk: Refs):
        keep = np.asarray(predicate(chunk), dtype=bool)
        if keep.shape != (len(chunk),):
            raise ConfigError(f"filter {name!r} returned a mask of shape {keep.shape}")
        kept = int(np.count_nonzero(keep))
        if kept == len(chunk):
            return state, chunk
        return FilterState(state.dropped + len(chunk) - kept), chunk[keep]

    return Stage(
        name=name,
        config=config,
        init=lambda key: FilterState(0),
        step=step,
        state_type=FilterState,
        stats=_filter_stats,
    )


def _filter_stats(state: FilterState) -> dict[str, int]:
    return {"filtered": state.dropped}
