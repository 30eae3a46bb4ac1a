"""Naming a failing task encoder hook: its sample keys, recipe step and position in the batch.

A hook's own exception leaves the materializer as a :class:`MaterializeError` that says where it
happened, with the original traceback (a process or system limit reached, as a
:class:`ResourceLimitError`); fpipe's errors and ``SkipSample`` pass unchanged.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable, Iterator, Sequence

from fpipe.core.errors import FpipeError, MaterializeError, ResourceLimitError
from fpipe.core.resource_limits import resource_limit_error
from fpipe.encode.hooks import SkipSample

__all__ = ["PASSING", "naming_failures", "show_keys", "wrap_error"]

#: What a hook may raise that is not named: fpipe's errors (BadSampleError...) and SkipSample,
#: which the error policy and the skip counting decide about.
PASSING = (FpipeError, SkipSample)

_MAX_KEYS = 8  # sample keys named in a MaterializeError of a batch hook


def show_keys(keys) -> str:
    """The first few sample keys, quoted, for a message."""
    more = ", ..." if len(keys) > _MAX_KEYS else ""
    return ", ".join(repr(k) for k in keys[:_MAX_KEYS]) + more


def wrap_error(
    err: Exception, hook: str, keys, step: int, position: int | None = None
) -> MaterializeError | ResourceLimitError:
    """``err`` as a :class:`MaterializeError` naming the hook, sample key(s), recipe step and
    position, with the original traceback; a limit of the process or system (out of file
    descriptors, say) as a :class:`ResourceLimitError`, naming no sample."""
    limit = resource_limit_error(err, f"while running {hook} at step {step}")
    if limit is not None:
        return limit
    keys = tuple(str(k) for k in keys)
    shown = show_keys(keys)
    where = f"step {step}" + (f", position {position} in the batch" if position is not None else "")
    return MaterializeError(
        f"{hook} raised {type(err).__name__}: {err} (sample {shown}; {where})",
        hook=hook,
        keys=keys,
        step=step,
        position=position,
        original=type(err).__name__,
        traceback="".join(traceback.format_exception(err)),
    )


@contextlib.contextmanager
def naming_failures(
    hook: str, keys: Callable[[], Sequence], step: int, position: int | None = None
) -> Iterator[None]:
    """A task encoder hook's own failure inside the block leaves as a :class:`MaterializeError`
    naming ``hook``, the sample keys (``keys()``, looked up only on failure), the recipe step
    and the position in the batch. fpipe's errors (BadSampleError...) and SkipSample pass
    unchanged: the error policy and the skip counting decide about them."""
    try:
        yield
    except PASSING:
        raise
    except Exception as err:  # a hook's own failure: wrapped with where it happened
        raise wrap_error(err, hook, keys(), step, position) from err
