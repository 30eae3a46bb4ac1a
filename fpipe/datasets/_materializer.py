"""The materializer of a training or validation dataset (DataLoader workers read, cook, encode
and collate each recipe with it), and the size of the recipes its plan makes."""

from __future__ import annotations

from fpipe.core.errors import ConfigError
from fpipe.datasets.options import DatasetOptions
from fpipe.materialize.materializer import GROUP_CHUNK, Materializer
from fpipe.materialize.sources import DatasetSource
from fpipe.plan.packing.stage import PackConfig

__all__ = ["dataset_materializer"]


def dataset_materializer(
    sources: list[DatasetSource], options: DatasetOptions, batch_size: int | None
) -> tuple[Materializer, int]:
    """The materializer of both dataset kinds, and the recipe size: with a packing buffer,
    recipes are buffers (the last one may be short, as in Energon) and the loader batches
    their packs; otherwise recipes are batches (Energon's ``batch_size=None``: one sample)."""
    from fpipe.encode import DefaultTaskEncoder  # lazy: the encode package imports torch

    mat = Materializer(
        sources,
        options.task_encoder or DefaultTaskEncoder(),
        image_decode=options.image_decode,
        error_policy=options.error_policy,
        packing_buffer_size=options.packing_buffer_size,
        decode_limits=options.decode_limits,
        unbatched=batch_size is None,
        batch_size=batch_size,
        error_handler=options.handler,
        plan_packs=any(isinstance(s.config, PackConfig) for s in options.plan_stages),
    )
    if mat.grouping:  # recipes are chunks of the stream; the loader groups their samples
        return mat, batch_size or GROUP_CHUNK
    if not mat.packing:
        return mat, batch_size or 1
    if batch_size is None:
        raise ConfigError("packing_buffer_size needs a batch_size (batches of packs)")
    assert options.packing_buffer_size is not None  # packing is on only with a buffer size
    return mat, options.packing_buffer_size
