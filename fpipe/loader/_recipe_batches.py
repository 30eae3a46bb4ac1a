"""The batches of one recipe whose ``encode_batch`` is a generator, with a state inside it.

Energon delivers each batch a generator ``encode_batch`` yields as a batch of its own. In fpipe
the worker runs the generator to its end (:mod:`fpipe.materialize._assemble`), so a recipe's
batches are a pure function of the recipe. The loader state after the j-th of a recipe's k
batches is ``(plan state before the recipe, j)`` (``packs_taken``, the same field a packing
buffer uses to point inside its buffer); after the last it is the plan state after the recipe,
as for any recipe. A restore therefore materializes that one recipe again and skips the j
batches already delivered: exact resume for any number of workers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

from fpipe.loader.state import LoaderState

__all__ = ["recipe_batches"]


def recipe_batches(
    result: Any, after: Any, epoch: int, state: LoaderState, taken: int
) -> Iterator[tuple[Any, LoaderState]]:
    """``(batch, loader state)`` for each of ``result.batches`` from the ``taken``-th on,
    then ``(None, state)`` once if the recipe gave none past ``taken`` (the state moves past
    it). ``after``: the plan state after the recipe, ``epoch`` the state's epoch there;
    ``state``: the loader state before it."""
    batches = result.batches
    for j in range(taken, len(batches)):
        last = j + 1 == len(batches)
        if last:  # the recipe is done: its samples and skips count now, once
            state = msgspec.structs.replace(
                state,
                plan=after,
                batches=state.batches + 1,
                samples=state.samples + result.num_samples,
                skipped=state.skipped + result.skipped,
                epoch=epoch,
                packs_taken=0,
            )
        else:
            state = msgspec.structs.replace(state, batches=state.batches + 1, packs_taken=j + 1)
        yield batches[j], state
    if taken >= len(batches):
        yield (
            None,
            msgspec.structs.replace(
                state,
                plan=after,
                samples=state.samples + result.num_samples,
                skipped=state.skipped + result.skipped,
                epoch=epoch,
                packs_taken=0,
            ),
        )
