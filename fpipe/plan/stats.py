"""What the plan dropped, by cause, summed over the per-step stats of a pipeline state.

Each step that drops refs declares ``stats`` (filter: ``filtered``, batch: ``batch_remainder``,
distribute: ``global_remainder``); :meth:`fpipe.core.Pipeline.stats` collects them by step name
and :func:`drop_counters` sums them by counter.

Example:
    >>> import numpy as np
    >>> from fpipe.core import Pipeline, chain
    >>> from fpipe.core.testing import run
    >>> from fpipe.plan import batch, filter_refs, repeat, samples
    >>> p = Pipeline(chain(repeat(samples(10, columns={"t": np.arange(10)}), 1),
    ...                    filter_refs("t", "<", 7), batch(3)), seed=0)
    >>> state, batches = run(p)  # the state after the end of the stream
    >>> p.stats(state)
    {'filter': {'filtered': 3}, 'batch': {'batch_remainder': 1}}
    >>> drop_counters(p.stats(state))
    {'filtered': 3, 'batch_remainder': 1, 'global_remainder': 0}
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["drop_counters"]

#: The drop causes always reported (zero when no step of that kind is in the plan).
DROP_CAUSES = ("filtered", "batch_remainder", "global_remainder")


def drop_counters(stats: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    """Refs dropped so far, by cause, from ``pipeline.stats(state)``: ``filtered`` (filter
    steps), ``batch_remainder`` (a short last batch on this rank), ``global_remainder`` (a short
    last global batch, dropped on every rank alike) and any other counter a step declares."""
    out = dict.fromkeys(DROP_CAUSES, 0)
    for counters in stats.values():
        for cause, n in counters.items():
            out[cause] = out.get(cause, 0) + n
    return out
