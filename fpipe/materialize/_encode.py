"""Phase one of a recipe: read, cook and encode each of its samples, under the error policy.

Each sample runs under its own rng (``fpipe.sample_rng()``) and position; a hook's failure is
named (as :func:`fpipe.materialize._hook_errors.naming_failures` does); a ``SkipSample`` or
a bad sample the error policy skips is counted by the key that names it. A bad sample or a
hook's failure caused by a process or system limit (no file descriptor left) is raised as a
``ResourceLimitError``: the error policy does not apply, no sample is at fault.
"""

from __future__ import annotations

from collections.abc import Callable
from types import GeneratorType
from typing import TYPE_CHECKING

from fpipe.core.errors import BadSampleError, ErrorPolicy, MaterializeError
from fpipe.core.records import Recipe
from fpipe.core.resource_limits import resource_limit_error
from fpipe.core.rng import LazyGenerator
from fpipe.encode.hooks import SkipSample, enter_sample, leave_sample
from fpipe.encode.packing import pre_pack_encoder
from fpipe.encode.task_encoder import DefaultTaskEncoder, TaskEncoder
from fpipe.materialize._cook import ENCODE
from fpipe.materialize._cook_many import Cooked
from fpipe.materialize._error_handler import call_error_handler
from fpipe.materialize._hook_errors import PASSING, wrap_error
from fpipe.materialize._source_info import failed_sources
from fpipe.storage.config.dataset_yaml import is_crude

if TYPE_CHECKING:  # the materializer calls this with itself
    from fpipe.materialize.materializer import Materializer

__all__ = ["encode_samples"]


def _read_hook(src) -> str:
    """What names the reading and cooking of a sample of ``src`` in a MaterializeError."""
    return "cook_crude_sample" if is_crude(src.sample_type) else "read/cook"


def _encodes_as_is(enc) -> bool:
    """Whether ``enc.encode_sample(sample, rng)`` returns ``sample`` itself: the default
    ``encode_sample`` with the default pre/postencode hooks, none replaced on the instance,
    and (:class:`DefaultTaskEncoder`) no ``encoded_sample_type``."""
    cls = type(enc)
    if cls.encode_sample is DefaultTaskEncoder.encode_sample:
        if getattr(enc, "_encoded_sample_type", None) is not None:
            return False
    elif cls.encode_sample is not TaskEncoder.encode_sample:
        return False
    if (
        cls.preencode_sample is not TaskEncoder.preencode_sample
        or cls.postencode_sample is not TaskEncoder.postencode_sample
    ):
        return False
    own = getattr(enc, "__dict__", {})
    return not any(h in own for h in ("encode_sample", "preencode_sample", "postencode_sample"))


def encode_samples(
    mat: Materializer,
    enc,
    recipe: Recipe,
    skeys: list[int],
    exclude: frozenset[int] = frozenset(),
    mark: Callable[[int], None] | None = None,
    positions: list[int] | None = None,
) -> tuple[list, list[int], list[str]]:
    """Phase one: read, cook and encode each sample of ``recipe`` (``encode_sample``, or
    the hooks before selection with a packing buffer). Returns the encoded samples, the
    position in the recipe of the sample each one comes from (a generator hook may yield
    several, or none), and what names each sample that a SkipSample or the error policy
    skipped. ``positions``: the position in the recipe of step ``recipe.step`` each ref is
    encoded as (its sample index and the position it is reported at; default: its own)."""
    if mat.packing:
        encode = pre_pack_encoder(enc)
        encode_hook = getattr(encode, "__name__", "preencode_sample")
    else:
        encode, encode_hook = enc.encode_sample, "encode_sample"
    # encoding leaves a sample as it is: not called; and for a sample cooked with the others
    # (Materializer.reads) no hook of the task encoder runs, so it needs no context either
    as_is = not mat.packing and _encodes_as_is(enc)
    refs, step = recipe.refs, recipe.step
    parts_found = mat._prefetch(refs)
    ids = zip(
        refs.dataset.tolist(),
        refs.index.tolist(),
        refs.epoch.tolist(),
        skeys,
        mat.reads(refs, parts_found),
    )
    samples: list = []
    kept: list[int] = []  # per encoded sample: the recipe position it was encoded from
    skipped_keys: list[str] = []
    first = step * (mat.recipe_size or len(refs))  # current_sample_index of position 0
    sources = mat.sources
    # This is the loader's hottest loop: a sample's context set and restored by two calls,
    # a hook's failure named by one try (what naming_failures does), and what names a sample
    # (its key, its read hook) looked up only when it fails.
    for pos, (d, i, e, skey, read) in enumerate(ids):
        if positions is not None:
            pos = positions[pos]  # noqa: PLW2901 - encoded as that sample of its recipe
        if pos in exclude:
            skipped_keys.append(f"{sources[d].path}:{mat.key(d, i)}: killed its worker")
            continue
        if mark is not None:
            mark(pos)
        if as_is and type(read) is Cooked:
            samples.append(read.sample)
            kept.append(pos)
            if mark is not None:
                mark(-1)
            continue
        sample = None  # what the error handler gets when reading or cooking fails
        try:
            encoding = False  # which hook a failure names: reading/cooking, then encoding
            try:
                # fpipe.sample_rng(), current_batch_index / current_sample_index: what
                # `with using_sample(...)` sets, without its object
                entered = enter_sample(LazyGenerator(skey, ENCODE), step, first + pos)
                try:
                    sample, rng = mat.sample(d, i, e, skey, read)
                    encoding = True
                    # Lazy fields (video frames) are decoded inside the encoder: their
                    # failures are bad input too, and go through the same policy.
                    encoded = sample if as_is else encode(sample, rng)
                    several = isinstance(encoded, GeneratorType)
                    if several:  # all it yields (what outputs() gives)
                        encoded = list(encoded)
                finally:
                    leave_sample(entered)
            except PASSING:
                raise
            except Exception as err:  # a hook's own failure: wrapped with where it happened
                hook = encode_hook if encoding else _read_hook(sources[d])
                raise wrap_error(err, hook, (mat.key(d, i),), step, pos) from err
            if several:
                samples.extend(encoded)
                kept.extend([pos] * len(encoded))
            else:
                samples.append(encoded)
                kept.append(pos)
        except SkipSample as err:  # the task encoder's (or a join's): skipped, counted
            where = getattr(err, "where", "")
            skipped_keys.append(where or f"{sources[d].path}:#{i}: SkipSample")
        except BadSampleError as err:
            limit = resource_limit_error(err, f"while reading a sample at step {step}")
            if limit is not None:  # a file that could not be opened for want of a descriptor
                raise limit from err
            if mat.error_policy is ErrorPolicy.RAISE:
                raise
            if mat.error_handler is not None:
                call_error_handler(
                    mat.error_handler, err, mat.key(d, i), failed_sources(mat, d, i), sample
                )
            skipped_keys.append(f"{err.path}:{err.key}")
        except MaterializeError as err:  # a hook's own failure: Energon's handler skips it
            if mat.error_handler is None:
                raise
            call_error_handler(
                mat.error_handler,
                err.__cause__ or err,
                mat.key(d, i),
                failed_sources(mat, d, i),
                sample,
            )
            skipped_keys.append(f"{sources[d].path}:{mat.key(d, i)}: {err.hook} failed")
        if mark is not None:
            mark(-1)
    return samples, kept, skipped_keys
