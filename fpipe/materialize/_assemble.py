"""Phase two of a recipe: its encoded samples as a batch (``batch`` then ``encode_batch``; packs
chosen in the plan tier packed first), the one sample of an unbatched recipe, or a packing
buffer's packs."""

from __future__ import annotations

import dataclasses
from types import GeneratorType
from typing import TYPE_CHECKING, Any

from fpipe.core.errors import ConfigError
from fpipe.core.records import Recipe
from fpipe.encode.batch_memory import sent_as_collated
from fpipe.encode.hooks import SkipSample, using_position
from fpipe.encode.packing import pack_buffer, pack_planned
from fpipe.encode.task_encoder import keeps_collated_tensors
from fpipe.materialize._hook_errors import naming_failures, show_keys

if TYPE_CHECKING:  # the materializer calls this with itself
    from fpipe.materialize.materializer import Materializer

__all__ = ["Assembled", "assemble"]


@dataclasses.dataclass
class Assembled:
    """What the second phase of a recipe makes of its encoded samples."""

    batch: Any = None
    packs: list | None = None
    sizes: list | None = None
    #: what a generator ``encode_batch`` yielded: each is a batch of its own
    batches: list | None = None
    skipped_keys: list[str] = dataclasses.field(default_factory=list)


def assemble(
    mat: Materializer, enc, recipe: Recipe, samples: list, kept: list[int], skeys: list[int]
) -> Assembled:
    """Phase two: the encoded samples as a packing buffer's packs, the one sample of an
    unbatched recipe, or a batch (``batch`` then ``encode_batch``; packs chosen in the plan
    tier are packed first). A SkipSample here skips what was handed to the hook."""
    step = recipe.step

    def keys() -> tuple[str, ...]:
        return mat.recipe_keys(recipe)

    with using_position(step, step * (mat.recipe_size or len(recipe.refs))):
        return _assemble_at(mat, enc, recipe, samples, kept, skeys, keys)


def _assemble_at(mat: Materializer, enc, recipe: Recipe, samples, kept, skeys, keys) -> Assembled:
    step = recipe.step
    try:
        if mat.packing:  # the loader batches the packs (a batch may take packs of two buffers)
            # The buffer is identified by its first sample's key (the recipe's when empty).
            with naming_failures("packing hooks", keys, step):
                key = skeys[0] if skeys else recipe.key
                packs, sizes = pack_buffer(enc, samples, key, step)
            return Assembled(packs=packs, sizes=sizes)
        if not samples:
            return Assembled()
        if mat.unbatched:
            if len(samples) > 1:  # a hook returned a generator: several samples, one step
                raise ConfigError(
                    f"encode_sample yielded {len(samples)} samples (sample "
                    f"{show_keys(keys())}), but batch_size=None delivers one sample per "
                    "step; set batch_size=N (the samples a step yields are batched together)"
                )
            return Assembled(batch=samples[0])
        if "pack" in recipe.refs.columns:  # packs chosen in the plan tier
            with naming_failures("packing hooks", keys, step):
                samples = pack_planned(enc, samples, recipe.refs.column("pack"), kept)
        # fpipe's own hooks send collate's tensors as they are: in a worker, collate then
        # builds them in shared memory (fpipe.encode.batch_memory)
        with (
            naming_failures("batch", keys, step),
            sent_as_collated(keeps_collated_tensors(enc)),
        ):
            out = enc.batch(samples)
        with naming_failures("encode_batch", keys, step):
            encoded = enc.encode_batch(out)
            if isinstance(encoded, GeneratorType):  # Energon's: each yielded item is a batch
                return Assembled(batches=list(encoded))
            return Assembled(batch=encoded)
    except SkipSample:
        return Assembled(skipped_keys=[f"batch {step}: SkipSample" for _ in samples])
