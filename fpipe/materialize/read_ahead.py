"""Read-ahead in a worker: the recipes it will materialize next, turned into byte ranges and
handed to this process's read-ahead window (:mod:`fpipe.storage.read.read_ahead`).

The loader sends each task with a :class:`ReadAheadHint`: the recipes that enter the horizon
of whoever runs it (a worker process's next recipes, or a thread pool's), each once. The worker
opens their datasets as it would to read them, asks each dataset for the byte ranges its reads
will make (:meth:`fpipe.storage.read.dataset.Dataset.read_ahead`) and starts them within the
hint's byte budget. The reads that follow take those bytes (object storage) or find them in the
page cache (``posix_fadvise``); either way they are the bytes a direct read gives. A hint is
only a hint: anything that goes wrong here is left for the read that needs the bytes to report,
at its own step. Joined datasets' parts are read when their samples are (not ahead).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import msgspec
import numpy as np

from fpipe.materialize.recipe_codec import decode_recipe
from fpipe.storage.read import read_ahead as windows

if TYPE_CHECKING:
    from fpipe.materialize.materializer import Materializer

__all__ = ["ReadAheadHint", "read_ahead"]

log = logging.getLogger("fpipe.loader")


class ReadAheadHint(msgspec.Struct, frozen=True):
    """What a task tells its worker about the steps ahead.

    ``token``: the loader pool (one read-ahead window per pool per process); ``budget``: bytes
    read ahead and not yet used, at most; ``keep``: steps before the task's own that a window
    keeps (a thread pool's tasks in flight run in any order; 0 for a worker process, which
    runs its own recipes in order); ``recipes``: encoded recipes entering the horizon.
    """

    token: tuple[int, int]
    budget: int
    keep: int
    recipes: tuple[bytes, ...] = ()


def read_ahead(materializer: Materializer, hint: ReadAheadHint, step: int) -> windows.Window:
    """Let go of what step ``step`` no longer needs and start reading ``hint.recipes`` ahead,
    in this worker process; returns the pool's window (for
    :func:`fpipe.storage.read.read_ahead.reading_with`). Never raises."""
    win = windows.window(hint.token, hint.budget)
    try:
        win.let_go(step - hint.keep)
        for data in hint.recipes:
            recipe = decode_recipe(data)
            for member in recipe.mix or (recipe,):  # a mixed batch: each member's own datasets
                refs, mat = member.refs, materializer.leaf(member)  # the datasets its refs name
                for d in np.unique(refs.dataset).tolist():
                    ranges_of = getattr(mat.dataset(d), "read_ahead", None)
                    src = mat.sources[d]
                    if ranges_of is None or src.join:
                        continue
                    got = ranges_of(refs.index[refs.dataset == d].tolist(), mat.wanted(src))
                    if got is not None:
                        win.add(recipe.step, *got)
    except Exception as e:  # noqa: BLE001 - the read that needs the bytes reports it
        windows.count(read_ahead_errors=1)
        log.debug("read-ahead at step %d: %s: %s", step, type(e).__name__, e)
    return win
