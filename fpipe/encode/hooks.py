"""Helpers for task-encoder hooks, under Megatron-Energon's names.

- :func:`sample_rng`: the ``numpy.random.Generator`` of the sample being encoded, for hooks
  written with Energon's one-argument signature ``encode_sample(self, sample)``. It is keyed by
  the sample (dataset, index, epoch), so re-materializing the sample after a restore, in any
  worker, draws the same numbers. Hooks written as ``encode_sample(self, sample, rng)`` get the
  same generator as ``rng``.
- :func:`stateless`: Energon's decorator. Every fpipe hook already is stateless (the loader's
  state is the plan's), so it only marks the function; ``restore_seeds=True`` also seeds the
  global ``random``, ``numpy.random`` and ``torch`` generators from :func:`sample_rng` around the
  call (for augmentations that draw from them, e.g. torchvision transforms) and restores them
  afterwards; such calls hold a process-wide lock, so thread workers run them one at a time.
- :class:`SkipSample` (and Energon's older name :data:`IgnoreSample`): raise it in a hook to
  leave the sample (or, from ``batch`` / ``encode_batch``, the batch) out. It is counted in
  ``loader.stats().skipped``; the same samples are skipped on every run and after a restore.
- :func:`batch_list`, :func:`batch_stack`, :func:`batch_pad_stack`, :func:`generic_batch`:
  Energon's batching helpers.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from fpipe.core.errors import ConfigError
from fpipe.core.fork_locks import fork_safe_lock
from fpipe.encode._hook_wrapper import HookWrapper
from fpipe.encode.hook_forms import drain

__all__ = [
    "IgnoreSample",
    "SkipSample",
    "batch_list",
    "batch_pad_stack",
    "batch_stack",
    "current_position",
    "generic_batch",
    "sample_rng",
    "stateless",
    "using_position",
    "using_sample",
    "using_sample_rng",
]

_RNG: contextvars.ContextVar[Any] = contextvars.ContextVar("fpipe_sample_rng", default=None)
#: (batch index, sample index) of what a hook is working on (see :func:`current_position`).
_POSITION: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "fpipe_position", default=None
)
#: Held while a ``restore_seeds`` hook runs: the global generators are one per process.
_GLOBAL_SEEDS = fork_safe_lock(globals(), "_GLOBAL_SEEDS", reentrant=True)


class SkipSample(Exception):  # noqa: N818 - Energon's name
    """Raise in any task-encoder hook to skip the current sample (or batch); it is counted."""


#: Energon's older name for :class:`SkipSample`.
IgnoreSample = SkipSample


def sample_rng() -> Any:
    """The random generator of the sample being encoded (inside a task-encoder hook).

    Example:
      >>> class Flip(DefaultTaskEncoder):                        # doctest: +SKIP
      ...     def encode_sample(self, sample):
      ...         if sample_rng().random() < 0.5:
      ...             sample.image = sample.image.flip(-1)
      ...         return sample

    Raises:
      ConfigError: called outside a hook run by the loader.
    """
    rng = _RNG.get()
    if rng is None:
        raise ConfigError(
            "fpipe.sample_rng() is only available inside a task encoder hook run by the loader "
            "(encode_sample, preencode_sample, postencode_sample, cook_crude_sample)"
        )
    return rng


class _Using:
    """``with``: one or two context variables set to their values inside the block, restored
    after it. A class rather than ``@contextlib.contextmanager``, and two variables without a
    loop: the loader enters one around every sample, where a generator-based context manager
    costs several times more."""

    __slots__ = ("_tokens", "_value", "_value2", "_var", "_var2")

    def __init__(self, var: contextvars.ContextVar, value: Any, var2=None, value2: Any = None):
        self._var, self._value, self._var2, self._value2 = var, value, var2, value2

    def __enter__(self) -> None:
        var2 = self._var2
        second = None if var2 is None else var2.set(self._value2)
        self._tokens = (self._var.set(self._value), second)

    def __exit__(self, *exc: object) -> None:
        first, second = self._tokens
        self._var.reset(first)
        if second is not None:
            self._var2.reset(second)


def using_sample_rng(rng: Any) -> contextlib.AbstractContextManager[None]:
    """Make ``rng`` what :func:`sample_rng` returns inside the block (used by the loader)."""
    return _Using(_RNG, rng)


def current_position() -> tuple[int, int]:
    """``(batch index, sample index)`` of what a task-encoder hook run by the loader works on:
    the batch's step on this rank (counted from the start of the run), and the sample's place
    in this rank's stream (``step * samples per batch + position in the batch``; in ``batch``
    and ``encode_batch``, the batch's first sample). Both are pure functions of the plan, so
    they are the same for any ``num_workers`` and after a restore.

    Raises:
      ConfigError: called outside a hook run by the loader.
    """
    pos = _POSITION.get()
    if pos is None:
        raise ConfigError(
            "current_batch_index / current_sample_index are only available inside a task "
            "encoder hook run by the loader (encode_sample, batch, encode_batch, ...)"
        )
    return pos


def using_position(batch_index: int, sample_index: int) -> contextlib.AbstractContextManager[None]:
    """Make ``(batch_index, sample_index)`` what :func:`current_position` returns inside the
    block (used by the loader)."""
    return _Using(_POSITION, (batch_index, sample_index))


def using_sample(
    rng: Any, batch_index: int, sample_index: int
) -> contextlib.AbstractContextManager[None]:
    """``using_sample_rng(rng)`` and ``using_position(batch_index, sample_index)`` in one
    context: the sample whose hooks run inside the block (used by the loader, for every
    sample)."""
    return _Using(_RNG, rng, _POSITION, (batch_index, sample_index))


def enter_sample(rng: Any, batch_index: int, sample_index: int) -> tuple[Any, Any]:
    """What entering ``using_sample(rng, batch_index, sample_index)`` does, without a context
    manager object: the loader's loop sets a sample's context this way for every sample (and
    leaves it in a ``finally``). Returns what :func:`leave_sample` restores."""
    return _RNG.set(rng), _POSITION.set((batch_index, sample_index))


def leave_sample(tokens: tuple[Any, Any]) -> None:
    """Restore what :func:`enter_sample` (which returned ``tokens``) changed."""
    _RNG.reset(tokens[0])
    _POSITION.reset(tokens[1])


@contextlib.contextmanager
def _seeded_globals(rng: Any) -> Iterator[None]:
    key = getattr(rng, "key", None)  # the sample's key: no draw from its generator
    with _seeded(int(key) % (2**31 - 1) if key is not None else 0):
        yield


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    import random

    import numpy as np

    py_state, np_state = random.getstate(), np.random.get_state()  # noqa: NPY002 - restored
    torch_state = None
    try:
        import torch

        torch_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
    except ImportError:  # pragma: no cover - torch is a dependency
        torch = None
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - Energon's restore_seeds: user code reads them
    try:
        yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)  # noqa: NPY002
        if torch is not None and torch_state is not None:
            torch.random.set_rng_state(torch_state)


class _Seeded(HookWrapper):
    """A ``@stateless(restore_seeds=True)`` hook: runs with the global generators seeded from
    the sample's rng. An object rather than a closure, so that a task encoder class of the
    training script reaches Ray actors (see :mod:`fpipe.encode._hook_wrapper`)."""

    __fpipe_stateless__ = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with _GLOBAL_SEEDS, _seeded_globals(_RNG.get()):
            return drain(self.fn(*args, **kwargs))  # a generator's body runs seeded, too


def stateless(
    fn: Callable | None = None, *, restore_seeds: bool = False, failure_tolerance: Any = None
) -> Any:
    """Energon's decorator for task-encoder hooks: ``@stateless`` or
    ``@stateless(restore_seeds=True)`` (see the module docstring); ``failure_tolerance`` is
    accepted and ignored (the loader's ``error_policy`` decides)."""
    del failure_tolerance

    def wrap(f: Callable) -> Callable:
        if not restore_seeds:
            f.__fpipe_stateless__ = True
            return f

        return _Seeded(f)

    return wrap if fn is None else wrap(fn)


def batch_list(batch: list[Any]) -> list[Any]:
    """The values as a list (Energon's ``batch_list``)."""
    return list(batch)


def batch_stack(batch: list[Any]) -> Any:
    """Stack tensors of one shape along a new first dimension (``torch.stack``)."""
    import torch

    return torch.stack(list(batch), dim=0)


def batch_pad_stack(batch: list[Any]) -> Any:
    """Stack tensors of one rank, each dimension zero-padded at the end to the largest size."""
    from fpipe.encode._collate import pad_stack

    return pad_stack(list(batch))


def generic_batch(batch: list[Any]) -> Any:
    """Energon's default batching of one field: pad-stack tensors, recurse into dicts and
    dataclasses (``from_samples`` when the class has it), lists for the rest."""
    import torch

    first = batch[0]
    if isinstance(first, torch.Tensor):
        return batch_pad_stack(batch)
    if isinstance(first, dict):
        return {k: generic_batch([b[k] for b in batch]) for k in first}
    if dataclasses.is_dataclass(first) and not isinstance(first, type):
        if hasattr(first, "from_samples"):
            return type(first).from_samples(batch)
        names = [f.name for f in dataclasses.fields(first) if f.init]
        return type(first)(**{n: generic_batch([getattr(b, n) for b in batch]) for n in names})
    return batch_list(batch)


@contextlib.contextmanager
def seeded_global_rngs(seed: int) -> Iterator[None]:
    """Inside the block, ``random``, ``numpy.random`` and torch's global generators are seeded
    with ``seed`` (one thread of the process at a time: they are one per process); their
    states are restored after it. For code that draws from the global generators (torchvision
    transforms), seeded from the sample's generator so that the draws are exact."""
    with _GLOBAL_SEEDS, _seeded(seed):
        yield
