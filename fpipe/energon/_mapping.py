"""The task encoder of Energon's ``MapDataset`` / ``BatchDataset`` over a factory's dataset
(:class:`fpipe.energon._factory.Recipe`): the mapped functions and the batcher as hooks."""

from __future__ import annotations

from typing import Any

from fpipe.encode import DefaultTaskEncoder

__all__ = ["MappingEncoder"]


class MappingEncoder(DefaultTaskEncoder):
    """``sample_maps`` applied to each sample in order (``encode_sample``), the ``batcher``
    (``batch``; None: the default collation), then ``batch_maps`` to each batch
    (``encode_batch``), as Energon's ``MapDataset`` / ``BatchDataset`` chain runs them."""

    def __init__(self, sample_maps: tuple, batcher: Any, batch_maps: tuple) -> None:
        super().__init__()
        self.sample_maps, self.batcher, self.batch_maps = sample_maps, batcher, batch_maps

    def encode_sample(self, sample: Any) -> Any:
        for fn in self.sample_maps:
            sample = fn(sample)
        return sample

    def batch(self, samples: list[Any]) -> Any:
        if self.batcher is None:
            return super().batch(samples)
        return self.batcher(samples)

    def encode_batch(self, batch: Any) -> Any:
        for fn in self.batch_maps:
            batch = fn(batch)
        return batch
