"""The forms a task-encoder hook may take beyond "one value in, one value out".

- **Generator hooks** (Energon's ``yield`` form). ``encode_sample``, ``preencode_sample`` and
  ``postencode_sample`` may yield any number of samples (splitting a long document, leaving a
  sample out by yielding nothing). The materializer runs the generator to its end inside the
  sample's context (so :func:`fpipe.sample_rng` and ``@stateless(restore_seeds=True)`` see the
  sample's generator), and every yielded sample goes into the batch of the recipe its source
  sample belongs to: a batch holds what its recipe's samples yield, so it may hold more (or
  fewer) than ``batch_size`` samples. With a packing buffer, the yielded samples all enter that
  buffer. The batch a step delivers is therefore still a pure function of its recipe: exact
  resume and the same stream for any number of workers.
- **A generator ``encode_batch``** (Energon's): each batch it yields is delivered as a batch of
  its own (none: the planned batch gives none). The materializer runs it to its end, so the
  batches of a recipe are a pure function of it; the loader state after the j-th of them is the
  plan state before the recipe and ``j`` (:mod:`fpipe.loader._recipe_batches`): a restore
  materializes the recipe again and skips the j taken (exact resume, any number of workers).
- **``batch_group_criterion``** (Energon's grouped batching): workers encode the samples of
  the plan's recipes and the loader groups them, in plan order, in the main process
  (:mod:`fpipe.loader._group_batches`, docs/design/grouping.md).
- **Refused at construction** (:func:`check_hook_forms`, a :class:`~fpipe.core.errors.ConfigError`
  before the first batch, naming the hook and the fpipe way): ``batch`` written as a generator
  (it collates one value), a generator ``encode_batch`` with a packing buffer or with grouped
  batching, grouped batching with a packing buffer, and a generator ``encode_sample`` with
  ``batch_size=None`` (one recipe is one sample). See docs/energon_migration.md.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from types import GeneratorType
from typing import Any

from fpipe.core.errors import ConfigError

__all__ = [
    "check_hook_forms",
    "drain",
    "groups_batches",
    "is_generator_hook",
    "outputs",
    "then",
]

#: Hooks that may be generators; they run once per sample.
_SAMPLE_HOOKS = ("encode_sample", "preencode_sample", "postencode_sample")

# What a hook returned is tested with isinstance(out, GeneratorType), which is all that
# inspect.isgenerator does, without its call: these run several times for every sample.


def is_generator_hook(fn: Any) -> bool:
    """Whether ``fn`` (a hook, possibly wrapped by fpipe or ``@stateless``) is written with
    ``yield``."""
    try:
        return inspect.isgeneratorfunction(inspect.unwrap(fn))
    except ValueError:  # a wrapper cycle: not ours to judge
        return False


def _replay(items: list) -> Iterator[Any]:
    yield from items


def drain(out: Any) -> Any:
    """``out`` unchanged, or, if it is a generator, a generator over its values, all computed
    now (so the hook's body runs inside the caller's context: the sample's rng, seeded global
    generators)."""
    if isinstance(out, GeneratorType):
        return _replay(list(out))
    return out


def outputs(out: Any) -> list:
    """The samples a sample hook returned: its values if it is a generator, else ``[out]``."""
    if isinstance(out, GeneratorType):
        return list(out)
    return [out]


def then(out: Any, fn: Callable[[Any], Any]) -> Any:
    """``fn`` applied to what a hook returned: to each yielded value if it is a generator (the
    result is a generator over every value ``fn`` returns or yields), else to ``out``."""
    if not isinstance(out, GeneratorType):
        return fn(out)
    return _replay([v for item in out for v in outputs(fn(item))])


def groups_batches(enc: Any) -> bool:
    """Whether the task encoder ``enc`` defines ``batch_group_criterion`` (Energon's grouped
    batching: the loader groups its encoded samples, see :mod:`fpipe.loader._group_batches`)."""
    return callable(getattr(type(enc), "batch_group_criterion", None))


def check_hook_forms(enc: Any, *, unbatched: bool = False, packing: bool = False) -> None:
    """Refuse, before the first batch, the hooks and hook forms fpipe would otherwise ignore or
    deliver wrongly (see the module docstring). ``unbatched``: ``batch_size=None``;
    ``packing``: a packing buffer (Energon's packing hooks)."""
    cls = type(enc)
    name = cls.__name__
    grouping = groups_batches(enc)
    if grouping and packing:
        raise ConfigError(
            f"{name} defines batch_group_criterion and packing_buffer_size is set: fpipe groups "
            "encoded samples, not packs. Leave out packing_buffer_size, or pack in the plan "
            "tier (plan_stages=[fpipe.plan.pack(...)]) and batch without grouping"
        )
    if is_generator_hook(getattr(cls, "batch", None)):
        raise ConfigError(
            f"{name}.batch is a generator (yield): fpipe's batch hook collates one planned "
            "batch into one value. Return one batch from batch, and write encode_batch as the "
            "generator: each batch it yields is delivered as a batch of its own"
        )
    if grouping and is_generator_hook(getattr(cls, "encode_batch", None)):
        raise ConfigError(
            f"{name}.encode_batch is a generator (yield) and {name} defines "
            "batch_group_criterion: each group's batch is delivered as one batch. Return one "
            "batch from encode_batch"
        )
    if packing and is_generator_hook(getattr(cls, "encode_batch", None)):
        raise ConfigError(
            f"{name}.encode_batch is a generator (yield), which fpipe delivers batch by batch "
            "from one planned batch; with packing_buffer_size the loader makes batches of "
            "packs across buffers, where that is not supported. Return one batch from "
            "encode_batch, or pack in the plan tier (plan_stages=[fpipe.plan.pack(...)])"
        )
    if unbatched:
        for hook in _SAMPLE_HOOKS:
            if is_generator_hook(getattr(cls, hook, None)):
                raise ConfigError(
                    f"{name}.{hook} is a generator (yield), but batch_size=None delivers one "
                    "sample per planned step, and the samples it yields would not fit. Set "
                    "batch_size=N: the samples a step's samples yield are batched together"
                )
