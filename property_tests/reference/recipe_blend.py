"""Blends of whole datasets, one batch at a time (docs/metadataset.md, "Blends of whole
datasets", and the exact rules of docs/design/blend.md).

Each input is one rank's stream of batches of a finished plan (any iterable), with None for a
step of the input that holds nothing for this rank (its last, short global batch went to the
other ranks). Output ``t`` of a weighted blend takes the next step of the input drawn from
``u = uniform(ck, t)`` among those that have not ended; an input found empty is marked ended and
``t`` drawn again. A step that holds nothing is output ``t`` all the same: ``(t, d, None)``. A
mix groups ``size`` consecutive outputs.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from property_tests.reference.blend import pick
from property_tests.reference.rng import fold_in, key, step_key, uniform

CHOICE_TAG = 0xB7E4D
_END = object()


def blend_batches(
    inputs: Sequence[Iterable[Any]],
    seed: int,
    weights: Sequence[float] | None = None,
    *,
    name: str | None = None,
    ended: list[bool] | None = None,
) -> Iterator[tuple[int, int, Any]]:
    """``(t, input, batch)`` per output; ``weights=None``: a concatenation. ``seed``: the
    first dataset's seed (the blend's root key). ``ended``: a list that holds the inputs'
    ended flags as the blend goes (for callers that look at them)."""
    its = [iter(x) for x in inputs]
    if ended is None:
        ended = []
    ended[:] = [False] * len(its)
    name = name or ("concat_batches" if weights is None else "blend_batches")
    ck = fold_in(step_key(key(seed), name), CHOICE_TAG)
    for t in itertools.count():
        while True:
            if all(ended):
                return
            if weights is None:
                d = ended.index(False)
            else:
                d = pick([0.0 if e else float(w) for e, w in zip(ended, weights)], uniform(ck, t))
            batch = next(its[d], _END)
            if batch is _END:
                ended[d] = True
                continue
            yield t, d, batch
            break


def mix_batches(outputs: Iterable[Any], size: int) -> Iterator[list | None]:
    """Groups of ``size`` consecutive outputs, less those that are None (nothing for this
    rank); a group of nothing but those is None. The last may be short."""
    it = iter(outputs)
    while group := list(itertools.islice(it, size)):
        yield [x for x in group if x is not None] or None
