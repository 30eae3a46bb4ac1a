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

Energon's forms work as written: ``DefaultTaskEncoder[TSample, TEncoded, TRawBatch, TBatch]``,
``super().__init__(batch_type=..., raw_batch_type=..., encoded_sample_type=...)``, a
``decoder = SampleDecoder(image_decode="torchrgb")`` class attribute, and the one-argument
hooks ``encode_sample(self, sample)`` / ``preencode_sample`` / ``postencode_sample``: such a hook
reaches the sample's generator with :func:`fpipe.sample_rng() <fpipe.encode.hooks.sample_rng>`
(the same generator the two-argument form gets as ``rng``).
The sample hooks may also be generators (``yield``): everything the samples of one recipe yield
goes into that recipe's batch; ``batch_group_criterion`` groups the encoded samples in the
loader (:mod:`fpipe.loader._group_batches`); the other hook forms are in
:mod:`fpipe.encode.hook_forms`.

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

import dataclasses
import inspect
from collections.abc import Sequence
from types import GeneratorType
from typing import Any, Generic, TypeVar

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.encode._hook_wrapper import HookWrapper
from fpipe.encode.hook_forms import drain, then
from fpipe.encode.hooks import _RNG, current_position, generic_batch

__all__ = [
    "DefaultTaskEncoder",
    "TaskEncoder",
    "decode_limits_of",
    "image_options",
    "sample_decoder_of",
]

T_sample = TypeVar("T_sample")
T_encoded_sample = TypeVar("T_encoded_sample")
T_raw_batch = TypeVar("T_raw_batch")
T_batch = TypeVar("T_batch")

#: hooks that take a sample and may be written with or without the ``rng`` argument.
_SAMPLE_HOOKS = ("encode_sample", "preencode_sample", "postencode_sample")


def _takes_rng(fn: Any) -> bool:
    """Whether a hook is written ``(self, sample, rng)`` (fpipe) rather than ``(self, sample)``."""
    try:
        params = list(inspect.signature(fn).parameters.values())[1:]  # after self
    except (TypeError, ValueError):
        return True
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2


class _SampleHook(HookWrapper):
    """A user's sample hook, callable in both forms, with :func:`sample_rng` seeing its rng.
    An object rather than a closure, so that a task encoder class of the training script
    reaches Ray actors (see :mod:`fpipe.encode._hook_wrapper`)."""

    __fpipe_hook__ = True

    def __init__(self, fn: Any) -> None:
        super().__init__(fn)
        self.takes_rng = _takes_rng(fn)

    def __call__(self, encoder: Any, sample: Any, rng: Any = None) -> Any:
        if rng is None:
            rng = _RNG.get()
        token = _RNG.set(rng)
        try:  # a generator hook runs to its end here, with its sample's rng
            fn = self.fn
            return drain(fn(encoder, sample, rng) if self.takes_rng else fn(encoder, sample))
        finally:
            _RNG.reset(token)


def _passes_rng_on(fn: Any) -> Any:
    """Mark one of fpipe's own sample hooks as needing no :class:`_SampleHook` wrapper: it
    takes ``rng`` and only hands it to the hooks it calls, which are wrapped when the user
    wrote them (as :meth:`TaskEncoder.encode_sample`, which no wrapper reaches). The wrapper
    would set the rng and drain a generator around every sample for nothing."""
    fn.__fpipe_hook__ = True
    return fn


def image_options(task_encoder: Any) -> Any:
    """Image decode options of a task encoder: ``image_decode``, else its Energon ``decoder``
    (:class:`~fpipe.decode._sample_decoder.SampleDecoder`), else None (the loader's default)."""
    opts = getattr(task_encoder, "image_decode", None)
    if opts is None:
        decoder = getattr(task_encoder, "decoder", None)
        opts = getattr(decoder, "image_options", None)
    return opts


def _keep_raw(sample: Any) -> Any:
    return sample


def sample_decoder_of(task_encoder: Any) -> Any:
    """Energon's whole-sample ``decoder`` of a task encoder, when fpipe is not to decode by
    extension: a callable ``decoder(sample: dict) -> dict`` other than a
    :class:`~fpipe.decode.SampleDecoder` (called with ``__key__`` and the raw members; the
    field map reads its result as it is), or, for ``decoder = None`` set in the user's class
    (Energon: no decoding), one that keeps the raw bytes. None: fpipe decodes the members the
    field map reads by extension (with a ``SampleDecoder``'s image options).

    Raises:
      ConfigError: ``decoder`` is neither of these.
    """
    decoder = getattr(task_encoder, "decoder", None)
    if decoder is None:
        own = vars(task_encoder) if hasattr(task_encoder, "__dict__") else {}
        if "decoder" in own:
            return _keep_raw
        for cls in type(task_encoder).__mro__:
            if cls is TaskEncoder:
                break
            if "decoder" in vars(cls):
                return _keep_raw
        return None
    if hasattr(decoder, "image_options"):  # a SampleDecoder: decoded lazily, by extension
        return None
    if callable(decoder):
        return decoder
    raise ConfigError(
        f"{type(task_encoder).__name__}.decoder = {decoder!r}: expected a SampleDecoder "
        '(e.g. SampleDecoder(image_decode="torchrgb")), a callable '
        "decoder(sample: dict) -> dict, or None for raw bytes (as in Energon)"
    )


def decode_limits_of(task_encoder: Any) -> Any:
    """Decoding limits of a task encoder: ``decode_limits``, else its Energon ``decoder``'s
    (:class:`~fpipe.decode._sample_decoder.SampleDecoder`), else the defaults
    (:class:`fpipe.decode.DecodeLimits`)."""
    limits = getattr(task_encoder, "decode_limits", None)
    if limits is None:
        limits = getattr(getattr(task_encoder, "decoder", None), "decode_limits", None)
    if limits is None:
        from fpipe.decode.limits import DEFAULT_LIMITS

        limits = DEFAULT_LIMITS
    return limits


class TaskEncoder(Generic[T_sample, T_encoded_sample, T_raw_batch, T_batch]):
    """Base of task encoders: every hook has a default, override what the task needs.

    Attributes:
      cookers: :class:`fpipe.samples.Cooker` list for crude datasets (first match wins).
      image_decode: :class:`fpipe.decode.image.ImageDecodeOptions` used when decoding images
        (``None``: the loader's option, or a full-size torch tensor).
      decode_limits: :class:`fpipe.decode.DecodeLimits`, every decoding limit (inflated
        ``.gz`` members, ``.npy``/``.npz`` arrays, image pixels, audio/video); ``None``: the
        loader's option, else the Energon ``decoder``'s, else the defaults.
      probe_av: probe audio/video members without stored metadata while cooking (limits and
        corrupt files then fail before ``encode_sample``).
    """

    cookers: Sequence[Any] = ()
    image_decode: Any = None
    decode_limits: Any = None
    probe_av: bool = False
    #: Energon's ``decoder = SampleDecoder(image_decode="torchrgb")`` (see ``image_options``),
    #: a callable ``decoder(sample: dict) -> dict``, or ``None`` set in a subclass for raw
    #: bytes (see :func:`sample_decoder_of`).
    decoder: Any = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in _SAMPLE_HOOKS:  # Energon's one-argument hooks, and sample_rng() in both
            fn = cls.__dict__.get(name)
            if callable(fn) and not getattr(fn, "__fpipe_hook__", False):
                setattr(cls, name, _SampleHook(fn))

    @property
    def current_batch_index(self) -> int:
        """Inside a hook run by the loader: the step of the batch being built, on this rank
        (Energon's; the same for any ``num_workers`` and after a restore)."""
        return current_position()[0]

    @property
    def current_sample_index(self) -> int:
        """Inside a hook run by the loader: the sample's place in this rank's stream, ``step *
        samples per batch + position in the batch`` (Energon's; a pure function of the plan,
        so it is reproduced on a restore and by any worker)."""
        return current_position()[1]

    def cook_crude_sample(self, crude: Any, aux: dict[str, Any] | None = None) -> Any:
        """Turn a :class:`~fpipe.samples.CrudeSample` into a typed sample (via ``cookers``);
        ``aux``: the file stores a cooker gets as keywords (a metadataset's ``aux:`` and, for
        ``@cooker(need_primary=True)``, ``primary``), passed only when there are some."""
        if not self.cookers:
            raise ConfigError(
                f"{type(self).__name__} got a crude sample ({crude.get('__key__')!r}) but defines "
                "no cookers; set `cookers = [Cooker(fn)]` or override cook_crude_sample"
            )
        from fpipe.samples import cook_crude_sample

        return cook_crude_sample(crude, self.cookers, aux)

    def encode_sample(self, sample: Any, rng: np.random.Generator) -> Any:
        """Per-sample transform (tokenize, augment...). Default: preencode then postencode
        (on each sample a generator ``preencode_sample`` yields)."""
        out = self.preencode_sample(sample, rng)
        if isinstance(out, GeneratorType):
            return then(out, lambda s: self.postencode_sample(s, rng))
        return self.postencode_sample(out, rng)  # what then() does, without its calls

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
        from fpipe.encode._collate import collate_samples  # torch: on first batch, not import

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


def _convert(value: Any, target: type | None) -> Any:
    """Energon's conversion of a sample or batch to ``target`` by field names."""
    if target is None or isinstance(value, target):
        return value
    if dataclasses.is_dataclass(value):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
    elif isinstance(value, tuple) and hasattr(value, "_fields"):
        fields = value._asdict()
    elif isinstance(value, dict):
        fields = dict(value)
    else:
        raise ConfigError(f"cannot convert {type(value).__name__} to {target.__name__}")
    if issubclass(target, dict):
        return fields
    names = (
        {f.name for f in dataclasses.fields(target)}
        if dataclasses.is_dataclass(target)
        else (set(getattr(target, "_fields", ())))
    )
    return target(**{k: v for k, v in fields.items() if k in names})


class DefaultTaskEncoder(
    TaskEncoder[T_sample, T_encoded_sample, T_raw_batch, T_batch],
    Generic[T_sample, T_encoded_sample, T_raw_batch, T_batch],
):
    """The task encoder used when none is given: samples pass through, ``batch`` collates.

    Args (keyword-only, Energon's): ``encoded_sample_type``, ``raw_batch_type``,
    ``batch_type``: when set, ``encode_sample`` / ``batch`` / ``encode_batch`` return that type,
    fields mapped by name (``raw_batch_type.from_samples(samples)`` when it has it).
    """

    def __init__(
        self,
        *,
        encoded_sample_type: type | None = None,
        raw_batch_type: type | None = None,
        batch_type: type | None = None,
    ):
        self._encoded_sample_type = encoded_sample_type
        self._raw_batch_type = raw_batch_type
        self._batch_type = batch_type

    @_passes_rng_on
    def encode_sample(self, sample: Any, rng: np.random.Generator | None = None) -> Any:
        """Preencode then postencode, then convert to ``encoded_sample_type`` if set (each
        sample, when the hooks are generators)."""
        target = getattr(self, "_encoded_sample_type", None)
        # then() spelled out where no generator is involved: this runs for every sample
        out = self.preencode_sample(sample, rng)
        if isinstance(out, GeneratorType):
            out = then(out, lambda s: self.postencode_sample(s, rng))
        else:
            out = self.postencode_sample(out, rng)
        if target is None and not isinstance(out, GeneratorType):
            return out
        return then(out, lambda s: _convert(s, target))

    def batch(self, samples: list[Any]) -> Any:
        """Collate (pad+stack tensors, lists for the rest) into ``raw_batch_type`` if set, else
        into the samples' own type."""
        target = getattr(self, "_raw_batch_type", None)
        if target is None:
            return super().batch(samples)
        if hasattr(target, "from_samples"):
            return target.from_samples(samples)
        if dataclasses.is_dataclass(samples[0]):
            names = [f.name for f in dataclasses.fields(samples[0]) if f.init]
            fields = {n: generic_batch([getattr(s, n) for s in samples]) for n in names}
        else:
            fields = {k: generic_batch([s[k] for s in samples]) for k in samples[0]}
        return _convert(fields, target)

    def encode_batch(self, batch: Any) -> Any:
        """Convert to ``batch_type`` if set (and different from ``raw_batch_type``)."""
        target = getattr(self, "_batch_type", None)
        if target is None or target is getattr(self, "_raw_batch_type", None):
            return batch
        return _convert(batch, target)


def keeps_collated_tensors(encoder: Any) -> bool:
    """True when ``encoder``'s ``batch`` and ``encode_batch`` are fpipe's own, with no batch
    types to convert to: the batch it makes holds the tensors collate built, unchanged (so a
    worker may build them where it sends them from, see :mod:`fpipe.encode.batch_memory`)."""
    cls = type(encoder)
    return (
        getattr(cls, "batch", None) in (TaskEncoder.batch, DefaultTaskEncoder.batch)
        and getattr(cls, "encode_batch", None)
        in (TaskEncoder.encode_batch, DefaultTaskEncoder.encode_batch)
        and getattr(encoder, "_raw_batch_type", None) is None
        and getattr(encoder, "_batch_type", None) is None
    )
