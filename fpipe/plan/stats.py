"""Counters kept in plan state: what the plan dropped, found anywhere in a pipeline state.

Example:
    >>> import numpy as np
    >>> from fpipe.core import Pipeline, chain
    >>> from fpipe.core.testing import run
    >>> from fpipe.plan import batch, filter_refs, repeat, samples
    >>> p = Pipeline(chain(repeat(samples(10, columns={"t": np.arange(10)}), 1),
    ...                    filter_refs("t", "<", 7), batch(3)), seed=0)
    >>> state, batches = run(p)  # the state after the end of the stream
    >>> drop_counters(state)
    {'filtered': 3, 'batch_remainder': 1, 'global_remainder': 0}
"""

from __future__ import annotations

from typing import Any

from fpipe.plan.batch import BatchState
from fpipe.plan.distribute import DistributeState
from fpipe.plan.filter import FilterState

__all__ = ["drop_counters"]


def drop_counters(state: Any) -> dict[str, int]:
    """Refs dropped so far, by cause: ``filtered`` (filter stages), ``batch_remainder`` (a short
    last batch on this rank) and ``global_remainder`` (a short last global batch, dropped on
    every rank alike)."""
    out = {"filtered": 0, "batch_remainder": 0, "global_remainder": 0}
    stack = [state]
    while stack:
        s = stack.pop()
        if isinstance(s, FilterState):
            out["filtered"] += s.dropped
        elif isinstance(s, BatchState):
            out["batch_remainder"] += s.dropped
        elif isinstance(s, DistributeState):
            out["global_remainder"] += s.dropped
        elif hasattr(s, "__struct_fields__"):
            stack.extend(getattr(s, f) for f in s.__struct_fields__)
        elif isinstance(s, tuple):
            stack.extend(s)
    return out
