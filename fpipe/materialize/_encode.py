"""Phase one of a recipe: read, cook and encode each of its samples, under the error policy.

Each sample runs under its own rng (``fpipe.sample_rng()``) and position; a hook's failure is
named (:func:`fpipe.materialize._hook_errors.naming_failures`); a ``SkipSample`` or a bad sample
the error policy skips is counted by the key that names it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from fpipe.core.errors import BadSampleError, ErrorPolicy, MaterializeError
from fpipe.core.records import Recipe
from fpipe.core.rng import LazyGenerator
from fpipe.encode.hook_forms import outputs
from fpipe.encode.hooks import SkipSample, using_position, using_sample_rng
from fpipe.encode.packing import pre_pack_encoder
from fpipe.materialize._cook import ENCODE
from fpipe.materialize._error_handler import call_error_handler
from fpipe.materialize._hook_errors import naming_failures
from fpipe.materialize._source_info import failed_sources
from fpipe.storage.config.dataset_yaml import is_crude

if TYPE_CHECKING:  # the materializer calls this with itself
    from fpipe.materialize.materializer import Materializer

__all__ = ["encode_samples", "no_mark"]


def no_mark(position: int) -> None:
    pass


def encode_samples(
    mat: Materializer,
    enc,
    recipe: Recipe,
    skeys: list[int],
    exclude: frozenset[int] = frozenset(),
    mark: Callable[[int], None] = no_mark,
) -> tuple[list, list[int], list[str]]:
    """Phase one: read, cook and encode each sample of ``recipe`` (``encode_sample``, or
    the hooks before selection with a packing buffer). Returns the encoded samples, the
    position in the recipe of the sample each one comes from (a generator hook may yield
    several, or none), and what names each sample that a SkipSample or the error policy
    skipped."""
    if mat.packing:
        encode = pre_pack_encoder(enc)
        encode_hook = getattr(encode, "__name__", "preencode_sample")
    else:
        encode, encode_hook = enc.encode_sample, "encode_sample"
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
    for pos, (d, i, e, skey, read) in enumerate(ids):
        src = mat.sources[d]
        read_hook = "cook_crude_sample" if is_crude(src.sample_type) else "read/cook"

        def keys(d=d, i=i) -> tuple[str, ...]:
            return (mat.key(d, i),)

        if pos in exclude:
            skipped_keys.append(f"{src.path}:{mat.key(d, i)}: killed its worker")
            continue
        mark(pos)
        try:
            with (
                using_sample_rng(LazyGenerator(skey, ENCODE)),  # fpipe.sample_rng()
                using_position(step, step * (mat.recipe_size or len(refs)) + pos),
            ):
                with naming_failures(read_hook, keys, step, pos):
                    sample, rng = mat.sample(d, i, e, skey, read)
                # Lazy fields (video frames) are decoded inside the encoder: their failures
                # are bad input too, and go through the same policy.
                with naming_failures(encode_hook, keys, step, pos):
                    encoded = outputs(encode(sample, rng))  # a generator: all it yields
            samples.extend(encoded)
            kept.extend([pos] * len(encoded))
        except SkipSample as err:  # the task encoder's (or a join's): skipped, counted
            skipped_keys.append(getattr(err, "where", "") or f"{src.path}:#{i}: SkipSample")
        except BadSampleError as err:
            if mat.error_policy is ErrorPolicy.RAISE:
                raise
            if mat.error_handler is not None:
                call_error_handler(mat.error_handler, err, mat.key(d, i), failed_sources(mat, d, i))
            skipped_keys.append(f"{err.path}:{err.key}")
        except MaterializeError as err:  # a hook's own failure: Energon's handler skips it
            if mat.error_handler is None:
                raise
            call_error_handler(
                mat.error_handler,
                err.__cause__ or err,
                mat.key(d, i),
                failed_sources(mat, d, i),
            )
            skipped_keys.append(f"{src.path}:{mat.key(d, i)}: {err.hook} failed")
        mark(-1)
    return samples, kept, skipped_keys
