"""Calling Energon's error handler (``handler=`` / ``WorkerConfig.global_error_handler``).

Energon calls ``handler(exception, sample, sources)``; older handlers, such as Megatron-LM's
``print_error_handler(exc, key)``, take two arguments and get the sample's key. The handler
runs in the worker that materialized the sample; what it raises stops the loader (as an error
of that sample).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["call_error_handler"]


def _takes_three(handler: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(handler).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: Energon's form
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return any(p.kind == p.VAR_POSITIONAL for p in params) or len(positional) >= 3


def call_error_handler(
    handler: Callable[..., Any],
    error: BaseException,
    key: str,
    sources: list | None = None,
    sample: Any = None,
) -> None:
    """``handler(error, sample, sources)`` as Energon calls it, or ``handler(error, key)`` for a
    two-argument handler.

    ``sample``: what the failing hook got (the cooked sample when ``encode_sample`` failed);
    None when reading or cooking failed, and then the handler gets ``{"__key__": key}`` (Energon
    hands over the raw sample dict there). ``sources``: its
    :class:`fpipe.samples.SourceInfo` records, or None."""
    try:
        if _takes_three(handler):
            handler(error, {"__key__": key} if sample is None else sample, sources)
        else:
            handler(error, key)
    except Exception as raised:
        # the handler's own exception reaches the user as it is, also from a worker process
        # (as in Energon): see fpipe.loader._workers.run_in_worker
        raised.__fpipe_from_error_handler__ = True  # type: ignore[attr-defined]
        raise
