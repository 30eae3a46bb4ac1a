"""The options of building a dataset, as one record: :class:`DatasetOptions`.

``get_train_dataset`` and ``get_val_dataset`` take these as keyword arguments (Energon's names
and defaults) and build the record; everything downstream (the plan's head, buckets, the
materializer, ``fpipe plan``'s YAML) reads the record. An option is added here and where it is
used, nowhere else. The modes an option chooses from are ``Literal`` types, checked once, when
the record is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, ParamSpec, TypeVar, get_args

import msgspec

from fpipe.core import keywords
from fpipe.core.errors import ConfigError, ErrorPolicy
from fpipe.decode.image import ImageDecodeOptions
from fpipe.decode.limits import DecodeLimits

__all__ = [
    "DatasetOptions",
    "Distribution",
    "PYTHON_ONLY",
    "ScheduleMode",
    "SequenceSlices",
    "check_keywords",
]

#: ``"global"``: one plan on every rank, each rank takes its part of every global batch;
#: ``"per_rank"``: each rank reads its own contiguous part of the data (docs/distributed.md);
#: ``"energon"``: per-rank, with the parts Energon's sharder gives (:mod:`fpipe.plan.worker_split`).
Distribution = Literal["global", "per_rank", "energon"]

#: How ``max_samples_per_sequence`` cuts a dataset into slices: ``"fixed"``: slices of exactly that
#: many positions, across shards (None: one sample each); ``"shards"``: Energon's, a slice never
#: crosses a shard (None: each shard one slice), see :mod:`fpipe.plan.shard_slices`.
SequenceSlices = Literal["fixed", "shards"]

#: How a Python ``weight_schedule`` moves between its points: in steps or linearly.
ScheduleMode = Literal["step", "linear"]

#: Options whose values are Python objects (a task encoder, plan stages, a topology): given as
#: keyword arguments only, never read from a YAML file.
PYTHON_ONLY = frozenset({"task_encoder", "plan_stages", "topology", "worker_config", "handler"})


class DatasetOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Every option of :func:`fpipe.get_train_dataset` and :func:`fpipe.get_val_dataset`.

    The fields are the functions' keyword arguments, with the same names and defaults (see
    :func:`fpipe.get_train_dataset` for what each one does); ``limit`` is the validation pass's
    own. The fields in :data:`PYTHON_ONLY` hold Python objects; the others are plain data, so
    a YAML mapping converts to this record (``msgspec.convert``), as ``fpipe plan`` reads it.
    """

    # What to read.
    split: str = "train"
    split_part: str | None = None  # Energon's name for ``split``
    columns: tuple[str, ...] = ()
    sample_type: Any = None  # a sample type name, or the class
    field_map: dict[str, Any] | None = None
    subflavors: dict[str, Any] | None = None
    open_kwargs: dict[str, Any] | None = None
    dataset_config: str | None = None  # Energon's: another dataset.yaml in the index folder
    split_config: str | None = None  # Energon's: another split.yaml in the index folder
    limit: int | None = None  # get_val_dataset: the first ``limit`` samples
    # The order of the samples.
    seed: int = 0
    shuffle_buffer_size: int | None = None
    max_samples_per_sequence: int | None = None
    sequence_slices: SequenceSlices = "fixed"  # "shards": Energon's slices (fpipe.energon's)
    num_epochs: int | None = None
    repeat: bool = True
    shuffle_over_epochs_multiplier: int | None = 1  # Energon's: slices shuffled over m passes
    parallel_shard_iters: int | None = None  # Energon's: slices read interleaved, n at a time
    virtual_epoch_length: int = 0  # Energon's: a for loop ends after this many batches
    # Batches and ranks.
    batch_size: int | None = None
    global_batch_size: Any = None  # an int, {step: size} or a fpipe.plan.BatchSchedule
    drop_last: bool = True
    distribution: Distribution = "global"
    topology: Any = None
    worker_config: Any = None
    # More plan: extra stages, packing, buckets, blend weights.
    plan_stages: Any = ()
    packing_buffer_size: int | None = None
    bucket_config: Any = None  # a mapping, YAML text or a YAML file
    bucket_window: int | None = None
    weight_schedule: Any = None  # a WeightSchedule or [(position, {name: weight}), ...]
    schedule_mode: ScheduleMode = "step"
    allow_changed_weights: bool = False
    blend_unit: str | None = None  # "samples" or an index column ("tokens"); None: the file's
    blend_draw: str | None = None  # "hash" or "quota" (fpipe.plan.blend); None: the file's
    rampup_batch_size: tuple[int, int, int] | None = None  # Megatron's: start, increment, samples
    skip_steps: Any = None  # global step ranges left out: [(a, b), ...], range(a, b) or "a:b"
    # How each sample is read, decoded and encoded.
    task_encoder: Any = None
    image_decode: ImageDecodeOptions | str | None = None  # or Energon's spec ("pil", ...)
    error_policy: ErrorPolicy = ErrorPolicy.RAISE
    handler: Any = None  # Energon's: called with each skipped sample's error (error_policy skip)
    decode_limits: DecodeLimits | None = None

    def __post_init__(self) -> None:
        _check_mode("distribution", self.distribution, Distribution)
        _check_mode("schedule_mode", self.schedule_mode, ScheduleMode)
        _check_mode("sequence_slices", self.sequence_slices, SequenceSlices)


def _check_mode(option: str, value: Any, modes: Any) -> None:
    """Raise a ConfigError naming ``option`` and its valid values unless ``value`` is one."""
    valid = get_args(modes)
    if value not in valid:
        names = " or ".join(", ".join(map(repr, valid)).rsplit(", ", 1))
        raise ConfigError(f"{option} must be {names}, got {value!r}")


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _energon_keyword(function: str, name: str) -> Exception | None:
    """The error for an Energon keyword fpipe replaced (None for any other)."""
    if name == "auto_decode":  # Energon 5's: name the fix
        from fpipe.decode import SampleDecoder

        return ConfigError(f"{function}(auto_decode=...): {SampleDecoder.AUTO_DECODE_FIX}")
    return None


def check_keywords(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """``fn`` with a clearer error for an unknown keyword argument: the TypeError names the
    closest valid one (:func:`fpipe.core.keywords.check_keywords`), and Energon's
    ``auto_decode`` names its replacement.

    The signature and docstring stay ``fn``'s, so ``help()`` and IDEs show the options.
    """
    return keywords.check_keywords(fn, explain=_energon_keyword)
