"""Whether a worker's result can cross to the main process, checked in the worker.

A DataLoader worker hands its result to a queue whose feeder thread pickles it. A result that
cannot be pickled (an instance of a class defined inside a function, a lambda in a field) makes
that thread print ``Can't pickle local object`` and drop it, and the main process waits for it
forever. :func:`check_sendable` pickles the result first, in the worker, as the queue would
but without the data of its tensors and arrays (their own reductions pickle those; they are
replaced by an empty tuple here), so the check costs a small fraction of the send; a failure
becomes an error the worker returns in place of the batch.
"""

from __future__ import annotations

import io
import pickle  # dumps to a throwaway buffer only: nothing is ever unpickled here
import traceback
from typing import Any

import numpy as np
import torch

from fpipe.core.errors import MaterializeError

__all__ = ["check_sendable"]


class _Probe(pickle.Pickler):
    """Pickles a structure as the worker's result queue would, minus tensor and array data."""

    def reducer_override(self, obj):
        if isinstance(obj, torch.Tensor) or (isinstance(obj, np.ndarray) and obj.dtype != object):
            return tuple, ()  # their data pickles (torch's reductions, numpy's); skip it here
        return NotImplemented


def check_sendable(result: Any) -> MaterializeError | None:
    """None if ``result`` can be pickled back to the main process, else the error to raise
    there, naming the type and the fix. The result is pickled without its tensors' and
    arrays' data (so the check costs a small fraction of the real send)."""
    try:
        _Probe(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL).dump(result)
        return None
    except Exception as err:  # noqa: BLE001 - whatever pickle raises, the same advice
        batch = getattr(result, "batch", None)
        batch = result.packs if batch is None and getattr(result, "packs", None) else batch
        kind = type(batch)
        step = getattr(result, "step", None)
        return MaterializeError(
            f"the batch of step {step} (a {kind.__module__}.{kind.__qualname__}) cannot be sent "
            f"from its DataLoader worker process to the main process: pickling it raised "
            f"{type(err).__name__}: {err}. Define the batch's class, and anything it holds "
            "(no lambdas or functions defined inside a function), at module level so pickle can "
            'find them, or use get_loader(..., worker_mode="thread"), which does not pickle '
            "batches.",
            hook="send batch",
            step=step,
            original=type(err).__name__,
            traceback="".join(traceback.format_exception(err)),
        )
