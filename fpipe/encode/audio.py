"""Audio in samples and batches: the audio options, audio clips aligned with video frames, and
``AudioTaskEncoder`` for audio-only datasets.

* :class:`AudioConfig` (frozen, checked when built): output rate and channels, and for audio-only
  samples the clip length and where it starts.
* :func:`aligned_audio`: the audio of a time span (e.g. of the frames a video clip kept) as
  exactly ``round(span * rate)`` samples, zeros where the file has no audio, so sample ``i`` is
  at time ``start + i / rate``.
* :class:`AudioTaskEncoder`: a sample whose ``audio`` field is an
  :class:`~fpipe.decode.av.AVDecoder` (FLAC, WAV, MP3, Opus, or the audio of a video) ->
  :class:`EncodedAudioSample` -> :class:`AudioBatch` with ``audio [B, C, S]`` padded with zeros
  and ``audio_lengths [B]``.

Example::

    from fpipe.encode.audio import AudioConfig, AudioTaskEncoder

    enc = AudioTaskEncoder(AudioConfig(sample_rate=16000, clip_seconds=3.0, clip="random"))
    ds = fpipe.get_train_dataset("data/speech", batch_size=8, task_encoder=enc, seed=1)
    batch = next(iter(fpipe.get_loader(ds)))
    batch.audio.shape, batch.audio_lengths   # [8, 1, 48000], int64 [8]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
import numpy as np
import torch

from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.encode._collate import pad_stack_lengths
from fpipe.encode.task_encoder import TaskEncoder
from fpipe.samples.base import Sample
from fpipe.samples.batch import Batch

__all__ = [
    "AudioBatch",
    "AudioConfig",
    "AudioTaskEncoder",
    "EncodedAudioSample",
    "aligned_audio",
    "sample_decoder",
]


class AudioConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Audio options of a task encoder, checked when built (``ConfigError`` naming the field).

    ``clip_seconds`` and ``clip`` apply to audio-only samples (:class:`AudioTaskEncoder`); with
    video the audio follows the frames (:class:`~fpipe.encode.video_task.VideoTaskEncoder`).
    """

    sample_rate: int = 16000  #: output samples per second (the file is resampled)
    channels: int = 1  #: output channels (1 = mono, 2 = stereo, n = FFmpeg's n-channel layout)
    #: clip length in seconds; None decodes the whole file (variable lengths, padded in batches)
    clip_seconds: float | None = None
    #: where a clip starts: "first" (at the audio's start) or "random" (uniform, from the
    #: sample's rng). A file shorter than the clip gives its whole audio: a shorter clip,
    #: padded in the batch, its length in ``audio_lengths``.
    clip: Literal["first", "random"] = "first"

    def __post_init__(self) -> None:
        if int(self.sample_rate) < 1:
            raise ConfigError(f"AudioConfig.sample_rate must be >= 1, got {self.sample_rate}")
        if int(self.channels) < 1:
            raise ConfigError(f"AudioConfig.channels must be >= 1, got {self.channels}")
        if self.clip_seconds is not None and not self.clip_seconds > 0:
            raise ConfigError(f"AudioConfig.clip_seconds must be > 0, got {self.clip_seconds}")
        if self.clip not in ("first", "random"):
            raise ConfigError(f"AudioConfig.clip must be 'first' or 'random', got {self.clip!r}")


def sample_decoder(value: Any, sample: Any, field: str, limits: Any, also: str = "") -> Any:
    """The :class:`~fpipe.decode.av.AVDecoder` of a sample's audio/video field: ``value`` as
    is (it carries the loader's limits), or a decoder over encoded bytes with ``limits`` (None:
    the defaults); ``TypeError`` naming the sample, the field and what it accepts (``also``:
    other accepted kinds) otherwise."""
    from fpipe.decode.av.decoder import AVDecoder
    from fpipe.decode.limits import DEFAULT_LIMITS

    key = getattr(sample, "__key__", "")
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = AVDecoder(bytes(value), key=key, limits=limits or DEFAULT_LIMITS)
    if not isinstance(value, AVDecoder):
        raise TypeError(
            f"sample {key!r}: field {field!r} holds {type(value).__name__}; "
            f"expected an AVDecoder{', ' if also else ' or '}encoded bytes{also}"
        )
    return value


def aligned_audio(decoder: Any, start_s: float, end_s: float, config: AudioConfig) -> torch.Tensor:
    """``float32 [channels, round((end_s - start_s) * rate)]``: the audio of ``[start_s,
    end_s)`` on the file's timeline, zeros where the file has no audio (before its first
    sample, after its end, or no audio stream), so sample ``i`` is at ``start_s + i / rate``.
    """
    rate, nch = int(config.sample_rate), int(config.channels)
    n = max(int(round((end_s - start_s) * rate)), 0)
    out = torch.zeros((nch, n), dtype=torch.float32)
    if decoder.metadata.audio_sample_rate is None or n == 0:
        return out
    got = decoder.get_clips(
        None, audio_clip_ranges=[(start_s, end_s)], audio_sample_rate=rate, audio_channels=nch
    )
    clip, (t0, _) = got.audio_clips[0], got.audio_timestamps[0]
    i0 = max(int(round((t0 - start_s) * rate)), 0) if math.isfinite(t0) else 0
    k = max(min(clip.shape[1], n - i0), 0)
    out[:, i0 : i0 + k] = clip[:, :k]
    return out


@dataclass
class EncodedAudioSample(Sample):
    """One sample after :meth:`AudioTaskEncoder.encode_sample`."""

    #: ``float32 [channels, samples]`` in ``[-1, 1]``.
    audio: Any
    #: The caption (None when the sample has none).
    caption: Any = None
    #: Seconds of the clip's first sample on the file's timeline.
    audio_start_s: float = 0.0


@dataclass(kw_only=True)
class AudioBatch(Batch):
    """A batch of :class:`EncodedAudioSample`."""

    #: ``float32 [B, channels, max samples]``, zero-padded at the end.
    audio: Any
    #: ``int64 [B]``: samples of each clip before padding.
    audio_lengths: Any = None
    #: One caption per sample.
    caption: list = field(default_factory=list)
    #: ``float64 [B]``: start of each clip on its file's timeline, seconds.
    audio_start_s: Any = None


class AudioTaskEncoder(TaskEncoder):
    """Audio-only samples (e.g. :class:`~fpipe.samples.CaptionedAudioSample` from FLAC, WAV,
    MP3 or Opus members) -> ``[B, C, S]`` batches plus lengths.

    Args:
      config: the :class:`AudioConfig` (rate, channels, clip length and start policy).
      decode_limits: :class:`fpipe.decode.DecodeLimits` the loader uses unless
        ``get_train_dataset(decode_limits=...)`` is given (the decoders it cooks carry them),
        and the limits of encoded bytes this encoder decodes itself (None: the defaults for
        those, whatever the loader's); a file over a limit is a bad sample under the loader's
        error policy.
      audio_field: the sample attribute holding the audio (an ``AVDecoder`` or encoded bytes).
      caption_field: the sample attribute copied into ``caption`` (None to skip).

    Randomness (the clip start with ``clip="random"``) comes only from the ``rng`` handed to
    :meth:`encode_sample`, so a restored loader gives the same clips in any worker.
    """

    #: audio/video members without stored metadata are probed while cooking
    probe_av = True

    def __init__(
        self,
        config: AudioConfig | None = None,
        *,
        decode_limits: Any = None,
        audio_field: str = "audio",
        caption_field: str | None = "caption",
    ):
        config = AudioConfig() if config is None else config
        if not isinstance(config, AudioConfig):
            raise ConfigError(f"AudioTaskEncoder needs an AudioConfig, got {type(config).__name__}")
        self.config = config
        self.decode_limits = decode_limits
        self.audio_field = audio_field
        self.caption_field = caption_field

    def __repr__(self) -> str:
        return f"AudioTaskEncoder({self.config!r}, decode_limits={self.decode_limits!r})"

    def encode_sample(self, sample: Any, rng: np.random.Generator) -> EncodedAudioSample:
        """Decode the sample's clip (or whole file) at the configured rate and channels."""
        from fpipe.decode.av.decoder import stream_span

        cfg = self.config
        dec = sample_decoder(
            getattr(sample, self.audio_field), sample, self.audio_field, self.decode_limits
        )
        if dec.metadata.audio_sample_rate is None:
            raise BadSampleError(dec.path, dec.key, "no audio stream")
        start, dur = stream_span(dec.metadata, "audio")
        end = start + dur
        if cfg.clip_seconds is not None and dur > cfg.clip_seconds:
            if cfg.clip == "random":
                start += float(rng.uniform(0.0, dur - cfg.clip_seconds))
            end = start + cfg.clip_seconds
        audio = aligned_audio(dec, start, end, cfg)
        caption = getattr(sample, self.caption_field, None) if self.caption_field else None
        return EncodedAudioSample.derive_from(
            sample,
            audio=audio,
            caption=caption,
            audio_start_s=start,
        )

    def batch(self, samples: list[EncodedAudioSample]) -> AudioBatch:
        """``audio [B, C, S]`` zero-padded to the longest clip, with ``audio_lengths``."""
        audio, lengths = pad_stack_lengths([s.audio for s in samples])
        return AudioBatch.from_samples(
            samples,
            audio=audio,
            audio_lengths=lengths,
            audio_start_s=torch.tensor([s.audio_start_s for s in samples], dtype=torch.float64),
        )
