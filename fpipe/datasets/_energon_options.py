"""Energon's spellings of the dataset options, resolved into fpipe's once, before building.

``get_train_dataset`` / ``get_val_dataset`` take Energon 7.4's keywords with Energon's meaning:

* ``split_part``: the split (``split``); both given and different is an error.
* ``image_decode="pil"`` (any ``SampleDecoder`` spec, or a mapping of
  :class:`~fpipe.decode.image.ImageDecodeOptions` fields): the image options.
* ``handler`` and ``WorkerConfig(global_error_handler=...)``: a bad sample is skipped (and
  counted) after the handler is called with its error, unless the handler raises.
* ``WorkerConfig(seed_offset=...)``: the seed (Energon seeds every shuffle from it).
* ``shuffle_over_epochs_multiplier``, ``parallel_shard_iters``: checked here, applied to each
  dataset's slice order (:mod:`fpipe.plan.slice_order`).
* ``virtual_epoch_length``: checked here; the loader ends each ``for`` loop after that many
  batches.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from fpipe.core.errors import ConfigError, ErrorPolicy
from fpipe.datasets.options import DatasetOptions
from fpipe.decode.image import ImageDecodeOptions

__all__ = ["resolve_energon_options"]


def resolve_energon_options(
    options: DatasetOptions, topology: Any, *, default_split: str
) -> DatasetOptions:
    """``options`` with Energon's spellings turned into fpipe's fields (see the module doc);
    ``default_split``: the function's default ``split``.

    Raises:
      ConfigError: two spellings disagree, or a value fpipe cannot honour (named with the fix).
    """
    changes: dict[str, Any] = {}
    if options.split_part is not None:
        if options.split not in (options.split_part, default_split):
            raise ConfigError(
                f"split={options.split!r} and split_part={options.split_part!r} name two splits; "
                "give one of them (split_part is Energon's name for split)"
            )
        changes["split"] = options.split_part
    if options.limit == 0:  # Energon: limit 0 is no limit
        changes["limit"] = None
    seed = _seed(options.seed, getattr(topology, "seed_offset", 0))
    if seed != options.seed:
        changes["seed"] = seed
    if options.image_decode is not None and not isinstance(
        options.image_decode, ImageDecodeOptions
    ):
        changes["image_decode"] = _image_options(options.image_decode, options.task_encoder)
    handler = getattr(topology, "global_error_handler", None) or options.handler
    if handler is not None:
        if not callable(handler):
            raise ConfigError(
                f"handler / global_error_handler must be callable(exception, sample_key, "
                f"sources), got {handler!r}"
            )
        changes["handler"] = handler
        changes["error_policy"] = ErrorPolicy.SKIP
    _check_order_knobs(options)
    return msgspec.structs.replace(options, **changes) if changes else options


def _seed(seed: int, seed_offset: int) -> int:
    """The seed: ``seed``, or Energon's ``WorkerConfig.seed_offset`` (both: they must agree)."""
    if not seed_offset:
        return seed
    if seed and seed != seed_offset:
        raise ConfigError(
            f"seed={seed} and WorkerConfig(seed_offset={seed_offset}) both set the seed of every "
            "shuffle; give one of them"
        )
    return int(seed_offset)


def _image_options(value: Any, task_encoder: Any) -> ImageDecodeOptions:
    """Image options from Energon's ``image_decode`` spec (``"pil"``, ``"torchrgb"``, ...) or a
    mapping of :class:`ImageDecodeOptions` fields."""
    if isinstance(value, Mapping):
        return ImageDecodeOptions(**value)
    if not isinstance(value, str):
        raise ConfigError(
            f"image_decode must be a fpipe.decode.image.ImageDecodeOptions, a mapping of its "
            f"fields or an Energon spec such as 'pil' or 'torchrgb', got {value!r}"
        )
    from fpipe.decode import SampleDecoder

    opts = SampleDecoder(image_decode=value).image_options
    decoder = getattr(task_encoder, "decoder", None)
    own = getattr(decoder, "image_options", None)
    if own is not None and own != opts:  # Energon: a task encoder's decoder is not replaced
        raise ConfigError(
            f"image_decode={value!r}, but the task encoder already has decoder = {decoder!r}; "
            "set the image decoding in one place (the task encoder's decoder)"
        )
    return opts


def _check_order_knobs(options: DatasetOptions) -> None:
    m = options.shuffle_over_epochs_multiplier
    if m == -1 and options.num_epochs is not None:
        raise ConfigError(
            f"num_epochs={options.num_epochs} with shuffle_over_epochs_multiplier=-1: slices "
            "are drawn with replacement forever (as in Energon), so there are no epochs to "
            "count; leave num_epochs unset"
        )
    if m is not None and m < 1 and m != -1:
        raise ConfigError(f"shuffle_over_epochs_multiplier must be >= 1, None or -1, got {m}")
    if m is not None and m > 1 and options.num_epochs is not None and options.num_epochs % m:
        raise ConfigError(
            f"num_epochs={options.num_epochs} with shuffle_over_epochs_multiplier={m}: the "
            f"slices are shuffled over {m} passes at a time, so num_epochs must be a multiple "
            f"of {m}"
        )
    p = options.parallel_shard_iters
    if p is not None and p < 1:
        raise ConfigError(f"parallel_shard_iters must be >= 1 or None, got {p}")
    if m is None and p is not None and p > 1:
        raise ConfigError(
            f"parallel_shard_iters={p} draws from parallel slices at random, but "
            "shuffle_over_epochs_multiplier=None reads the slices in index order (as in "
            "Energon, the two do not combine); leave parallel_shard_iters at None or 1"
        )
    if options.virtual_epoch_length < 0:
        raise ConfigError(
            f"virtual_epoch_length must be >= 0 (0: none), got {options.virtual_epoch_length}"
        )
    if options.limit is not None and options.limit < 0:
        raise ConfigError(f"limit (batches per rank) must be >= 0 or None, got {options.limit}")
