"""A worker's failure as a value: the exception (which pickles with its attributes) and its
traceback text, sent back instead of a batch and re-raised in the main process with the
worker's traceback as ``__cause__``.

:func:`run_in_worker` runs the materializing in a DataLoader worker; a result that cannot be
pickled back (:func:`fpipe.loader._send.check_sendable`) is returned as a failure too, since
torch's queue feeder thread would drop it and leave the main process waiting. Ray's actors
send their failures the same way (:func:`remote_failure`).
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable
from typing import Any

import torch.utils.data

from fpipe.core.errors import FpipeError, MaterializeError
from fpipe.core.resource_limits import resource_limit_error
from fpipe.loader._recovery import out_of_memory
from fpipe.loader._send import check_sendable

__all__ = ["RemoteFailure", "RemoteTraceback", "remote_failure", "run_in_worker"]


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker process (shown as its ``__cause__``).
    ``out_of_memory``: the worker's exception was a failed allocation (a MemoryError)."""

    out_of_memory = False

    def __str__(self) -> str:
        return "\n" + str(self.args[0]) if self.args else ""


@dataclasses.dataclass
class RemoteFailure:
    """What a worker returns instead of a batch when materializing raised."""

    error: FpipeError
    traceback: str
    out_of_memory: bool = False

    def reraise(self):
        """Raise the worker's exception here, its worker traceback as the cause."""
        cause = RemoteTraceback(self.traceback)
        cause.out_of_memory = self.out_of_memory
        raise self.error from cause


def remote_failure(err: Exception) -> RemoteFailure:
    """``err`` as a value to send back to the main process (a non-fpipe exception first
    wrapped in a :class:`MaterializeError`), with its traceback text."""
    text = "".join(traceback.format_exception(err))
    limit = resource_limit_error(err, "while materializing in a DataLoader worker")
    if limit is not None:  # the process's limit, not the data's fault: nothing to blame
        return RemoteFailure(limit, text)
    oom = out_of_memory(err)
    if getattr(err, "__fpipe_from_error_handler__", False) and check_sendable(err) is None:
        return RemoteFailure(err, text, oom)  # type: ignore[arg-type]  # the user's own
    if not isinstance(err, FpipeError):
        err = MaterializeError(
            f"materializing raised {type(err).__name__}: {err}",
            hook="materialize",
            original=type(err).__name__,
            traceback=text,
        )
    return RemoteFailure(err, text, oom)


def run_in_worker(fn: Callable[[], Any]) -> Any:
    """``fn()``; in a DataLoader worker, an exception is returned as a :class:`RemoteFailure`
    (a non-fpipe exception first wrapped in a :class:`MaterializeError`), and so is a result
    that cannot be pickled back (:func:`check_sendable`)."""
    if torch.utils.data.get_worker_info() is None:
        return fn()
    try:
        result = fn()
    except Exception as err:  # noqa: BLE001 - every failure travels back as a value
        return remote_failure(err)
    unsendable = check_sendable(result)
    if unsendable is not None:
        return RemoteFailure(unsendable, unsendable.traceback)
    return result
