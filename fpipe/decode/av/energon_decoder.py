"""``fpipe.energon.av.AVDecoder``: fpipe's :class:`~fpipe.decode.av.AVDecoder` with Energon 7.4's
output where the two differ.

A module of its own (imported on first use by :mod:`fpipe.decode.av.energon`, as it imports
PyAV) so that the class has a module-level name: a decoder pickles and unpickles like Energon's
(a decoder built from bytes, a path or a ``BytesIO`` holds no open resource).

Where Energon's output differs from fpipe's own decoder:

- ``get_clips`` (and so ``get_clips_uniform``, ``get_audio``, ``get_frames``) leaves out the
  ranges that lie past the end of their stream: a video range with no frame, an audio range
  starting at or after the audio's end (Energon decodes nothing there and returns no clip;
  fpipe's decoder returns an empty clip per range, so entry ``i`` belongs to range ``i``);
- audio of a 16-bit PCM codec is ``int16``, as Energon's ``frame.to_ndarray()`` gives it (the
  same samples: fpipe's ``float32`` times 32768, exactly); other sample formats stay
  ``float32``, and ``get_clips(..., audio_sample_rate=...)`` (fpipe's resampling) keeps
  ``float32``;
- ``get_metadata`` returns Energon's ``AVMetadata`` dataclass
  (:class:`fpipe.decode.media_metadata.AVMetadata`), with ``audio_num_samples`` counted by
  decoding the audio when ``get_audio_num_samples=True`` (Energon's rule; None otherwise).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from fpipe.decode.av._energon_methods import audio_clips_kept
from fpipe.decode.av.audio import count_audio_samples
from fpipe.decode.av.decoder import AVDecoder
from fpipe.decode.av.records import AVClips
from fpipe.decode.media_metadata import AVMetadata as EnergonAVMetadata

__all__ = ["EnergonAVDecoder"]

#: PyAV sample formats whose samples fpipe's float32 audio holds exactly, and their dtype
_EXACT_PCM = {"s16": (np.int16, 32768.0), "s16p": (np.int16, 32768.0)}


class EnergonAVDecoder(AVDecoder):
    """Energon's ``AVDecoder``: fpipe's decoder with Energon's output where they differ (see
    the module doc)."""

    def get_clips(self, *args: Any, **kwargs: Any) -> AVClips:
        out = super().get_clips(*args, **kwargs)
        changes: dict[str, Any] = {}
        kept = [i for i, c in enumerate(out.video_clips) if c.shape[0] > 0]
        if len(kept) != len(out.video_clips):
            changes["video_clips"] = [out.video_clips[i] for i in kept]
            changes["video_timestamps"] = [out.video_timestamps[i] for i in kept]
            if out.video_frame_times:
                changes["video_frame_times"] = [out.video_frame_times[i] for i in kept]
        audio = list(out.audio_clips)
        stamps = list(out.audio_timestamps)
        if audio:
            kept = audio_clips_kept(self.metadata, audio, stamps)
            if len(kept) != len(audio):
                audio, stamps = [audio[i] for i in kept], [stamps[i] for i in kept]
                changes["audio_clips"], changes["audio_timestamps"] = audio, stamps
        pcm = _EXACT_PCM.get(self._audio_format() or "")
        resampled = kwargs.get("audio_sample_rate") or kwargs.get("audio_channels")
        if audio and pcm is not None and not resampled:
            dtype, scale = pcm
            info = np.iinfo(dtype)
            changes["audio_clips"] = [
                torch.from_numpy(
                    np.clip(np.rint(c.numpy() * scale), info.min, info.max).astype(dtype)
                )
                for c in audio
            ]
        return dataclasses.replace(out, **changes) if changes else out

    def get_metadata(  # type: ignore[override]  # Energon's record, not fpipe's
        self,
        get_video: bool = True,
        get_video_duration: bool = True,
        get_video_frame_count: bool = True,
        get_video_frame_size: bool = True,
        get_audio: bool = True,
        get_audio_duration: bool = True,
        get_audio_num_samples: bool = False,
    ) -> EnergonAVMetadata:
        """Energon's: its ``AVMetadata`` dataclass; fields of a stream the file lacks or that
        was not asked for are None. ``audio_num_samples`` is None unless
        ``get_audio_num_samples``, then the samples per channel that decoding the whole audio
        gives (as Energon counts them). The other flags only spare Energon work: fpipe's
        metadata comes from one demux pass (or the index) and has them all."""
        meta = super().get_metadata(get_video=get_video, get_audio=get_audio)
        values = {
            f.name: getattr(meta, f.name)
            for f in dataclasses.fields(EnergonAVMetadata)
            if f.name != "audio_num_samples"
        }
        if get_audio_num_samples and meta.audio_sample_rate is not None:
            values["audio_num_samples"] = self._audio_num_samples()
        return EnergonAVMetadata(**values)

    def _audio_num_samples(self) -> int:
        """Samples per channel of the first audio stream, decoded once and remembered."""
        if not hasattr(self, "_energon_audio_samples"):
            with self._open() as container:
                self._energon_audio_samples = count_audio_samples(container)
        return self._energon_audio_samples

    def _audio_format(self) -> str | None:
        """The first audio stream's PyAV sample format name (None without audio)."""
        if not hasattr(self, "_energon_audio_format"):
            fmt = None
            if self.metadata.audio_sample_rate is not None:
                with self._open() as container:
                    streams = container.streams.audio
                    fmt = streams[0].format.name if streams else None
            self._energon_audio_format = fmt
        return self._energon_audio_format
