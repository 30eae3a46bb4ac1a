"""Energon's ``AugmentTaskEncoder``: a task encoder that delegates to another one."""

from __future__ import annotations

from typing import Any

from fpipe.encode.task_encoder import TaskEncoder

__all__ = ["AugmentTaskEncoder"]


class AugmentTaskEncoder(TaskEncoder):
    """Wraps ``task_encoder``: ``decoder``, ``cookers``, the image and decode settings,
    ``encode_sample``, ``batch``, ``encode_batch`` and ``cook_crude_sample`` go to it unless a
    subclass overrides them (Energon's ``AugmentTaskEncoder``).

    Example::

        class Logged(AugmentTaskEncoder):
            def encode_sample(self, sample):
                print(sample.__key__)
                return super().encode_sample(sample)

        ds = get_train_dataset(path, batch_size=8, task_encoder=Logged(MyEncoder()))
    """

    def __init__(self, task_encoder: Any):
        self._task_encoder = task_encoder

    @property  # type: ignore[override]
    def decoder(self) -> Any:
        return self._task_encoder.decoder

    @property  # type: ignore[override]
    def cookers(self) -> Any:
        return self._task_encoder.cookers

    @property  # type: ignore[override]
    def image_decode(self) -> Any:
        return getattr(self._task_encoder, "image_decode", None)

    @property  # type: ignore[override]
    def decode_limits(self) -> Any:
        return getattr(self._task_encoder, "decode_limits", None)

    def cook_crude_sample(self, crude: Any) -> Any:
        return self._task_encoder.cook_crude_sample(crude)

    def encode_sample(self, sample: Any) -> Any:
        return self._task_encoder.encode_sample(sample)

    def batch(self, samples: list[Any]) -> Any:
        return self._task_encoder.batch(samples)

    def encode_batch(self, batch: Any) -> Any:
        return self._task_encoder.encode_batch(batch)
