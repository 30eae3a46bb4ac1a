"""The TaskEncoder: user hooks of the materialize tier, as in Megatron-Energon.

For each batch recipe, the materializer calls, in order::

    cook_crude_sample(crude)              # only for CrudeSample datasets
    encode_sample(sample, rng)            # per sample; rng is keyed by the sample and epoch
    batch(samples)                        # collate
    encode_batch(batch)                   # per batch
and with a packing buffer (``packing_buffer_size``; Energon's order, see fpipe.encode.packing)::

    preencode_sample(sample, rng)         # per sample (or encode_sample if only it is defined)
    select_samples_to_pack(samples)       # one buffer -> groups of samples to pack together
    postencode_sample(sample, rng)        # per selected sample
    pack_selected_samples(group)          # one packed sample per group
    batch(packs); encode_batch(batch)     # batch_size packs per batch
and the loader calls ``pin_memory(batch)`` in the main process when pinning is on.

Every hook must be a pure function of its inputs: randomness only from the ``rng`` handed in
(a ``numpy.random.Generator`` built from the sample's key), so re-materializing a recipe after a
restore, in any worker, gives identical tensors.

Example:
    >>> from dataclasses import dataclass
    >>> from fpipe.samples import TextSample
    >>> class Upper(DefaultTaskEncoder):
    ...     def encode_sample(self, sample, rng):
    ...         return sample.replace(text=sample.text.upper())
    >>> enc = Upper()
    >>> b = enc.batch([enc.encode_sample(TextSample(text="a"), None)])
    >>> b.text
    ['A']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fpipe.core.errors import ConfigError

__all__ = ["DefaultTaskEncoder", "TaskEncoder"]


class TaskEncoder:
    """Base of task encoders: every hook has a default, override what the task needs.

    Attributes:
      cookers: :class:`fpipe.samples.Cooker` list for crude datasets (first match wins).
      image_decode: :class:`fpipe.decode.image.ImageDecodeOptions` used when decoding images
        (``None``: the loader's option, or a full-size torch tensor).
      decode_limits: :class:`fpipe.decode.DecodeLimits`, the size limits of inflated ``.gz``
        members and ``.npy``/``.npz`` arrays (``None``: the loader's option, or the defaults).
    """

    cookers: Sequence[Any] = ()
    image_decode: Any = None
    decode_limits: Any = None

    def cook_crude_sample(self, crude: Any) -> Any:
        """Turn a :class:`~fpipe.samples.CrudeSample` into a typed sample (via ``cookers``)."""
        if not self.cookers:
            raise ConfigError(
                f"{type(self).__name__} got a crude sample ({crude.get('__key__')!r}) but defines "
                "no cookers; set `cookers = [Cooker(fn)]` or override cook_crude_sample"
            )
        from fpipe.samples import cook_crude_sample

        return cook_crude_sample(crude, self.cookers)

    def encode_sample(self, sample: Any, rng: np.random.Generator) -> Any:
        """Per-sample transform (tokenize, augment...). Default: preencode then postencode."""
        return self.postencode_sample(self.preencode_sample(sample, rng), rng)

    def preencode_sample(self, sample: Any, rng: np.random.Generator) -> Any:
        """Part of encoding done before packing (default: unchanged)."""
        return sample

    def postencode_sample(self, sample: Any, rng: np.random.Generator) -> Any:
        """Part of encoding done after packing selection (default: unchanged)."""
        return sample

    # Packing hooks: None means "no packing"; used with get_train_dataset(packing_buffer_size=N).
    select_samples_to_pack = None
    """Optional ``(samples) -> list[list[sample]]``: groups to pack from one packing buffer
    (deterministic; any objects may be returned)."""

    def pack_selected_samples(self, samples: list[Any]) -> Any:
        """Merge one group chosen by ``select_samples_to_pack`` into one sample."""
        raise NotImplementedError(
            f"{type(self).__name__} defines select_samples_to_pack but not pack_selected_samples"
        )

    def for_bucket(self, shape: tuple[int, ...]) -> TaskEncoder:
        """The encoder for a batch of one bucket, whose samples all get ``shape``
        (``(frames, height, width)`` for OpenSora's buckets). Default: ``self`` (the encoder
        ignores buckets); :class:`~fpipe.encode.video_task.VideoTaskEncoder` returns one that
        resizes and crops to the shape."""
        return self

    def batch(self, samples: list[Any]) -> Any:
        """Collate samples into a batch (default: pad+stack tensors, lists for the rest)."""
        from fpipe.encode.collate import collate_samples  # torch: on first batch, not import

        return collate_samples(samples)

    def encode_batch(self, batch: Any) -> Any:
        """Per-batch transform after collation (default: unchanged)."""
        return batch

    def pin_memory(self, batch: Any) -> Any:
        """Pin the batch's tensors (runs in the main process when pin_memory is on)."""
        if hasattr(batch, "pin_memory"):
            return batch.pin_memory()
        from fpipe.samples import map_tensors

        return map_tensors(batch, lambda t: t.pin_memory())


class DefaultTaskEncoder(TaskEncoder):
    """The task encoder used when none is given: samples pass through, ``batch`` collates."""
