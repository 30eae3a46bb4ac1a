"""Megatron-Energon's audio/video API over fpipe's :class:`~fpipe.decode.av.AVDecoder`.

Energon code calls a decoder's ``get_frames``, ``get_video_clips``, ``get_audio_clips``,
``get_metadata``, ``get_video_duration`` ... and the free functions ``get_clips_uniform`` and
``get_single_frames_uniform`` of ``megatron.energon.av``. They are defined here as Energon 7.4
defines them (``megatron/energon/av/av_decoder.py`` and ``utils.py``), on top of fpipe's one
decoder: the methods are a base of :class:`fpipe.decode.av.AVDecoder`
(:mod:`fpipe.decode.av._energon_methods`), so every decoder fpipe hands out (a sample's
``video`` field, ``decode_field("mp4", ...)``) has them.
``fpipe.energon.av`` re-exports the names under Energon's module path.

What follows Energon, and what stays fpipe's (``docs/video.md``, "Differences from
Megatron-Energon's decoder"):

- ranges of ``get_video_clips`` and of the free functions end inclusively, as in Energon, and a
  clip with no frame is left out of ``get_video_clips``' lists; ``get_clips`` keeps fpipe's
  exclusive default (``range_end="inclusive"`` gives Energon's);
- frames in frame units are exact on every container (Energon converts them with the average
  rate, with a warning, on Matroska), so ``suppress_warnings`` has nothing to suppress;
- fpipe's own decoder's ``get_metadata`` is fpipe's :class:`~fpipe.decode.av.AVMetadata`,
  which also answers to Energon's field names (``video_duration``, ``video_width``,
  ``audio_duration`` ...);
- data that is not audio or video raises :class:`~fpipe.core.errors.BadSampleError` naming the
  sample where Energon's ``get_frames`` returns None.

``fpipe.energon.av.AVDecoder`` is :class:`~fpipe.decode.av.energon_decoder.EnergonAVDecoder`,
which returns what Energon's decoder returns where fpipe's own differs: ``get_clips`` leaves out
ranges past the end of their stream (video ranges with no frame, audio ranges starting after the
audio's end), audio comes in the codec's sample format (``int16`` for 16-bit PCM, FLAC ...),
where fpipe's decoder gives ``float32`` in ``[-1, 1]``, and ``get_metadata`` returns Energon's
``AVMetadata`` dataclass (``audio_num_samples`` counted by decoding, when asked for).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from fpipe.decode.av.records import AVClips

if TYPE_CHECKING:
    import torch

    from fpipe.decode.av.decoder import AVDecoder

__all__ = [  # and EnergonAVDecoder, defined on first use (module __getattr__)
    "AVData",
    "AVWebdatasetDecoder",
    "get_clips_uniform",
    "get_single_frames_uniform",
]

#: Energon's name of the decoded clips record: fpipe's :class:`AVClips` (``video_clips``,
#: ``video_timestamps``, ``audio_clips``, ``audio_timestamps``, plus fpipe's frame times).
AVData = AVClips


def get_clips_uniform(
    av_decoder: AVDecoder,
    clip_duration_seconds: float,
    num_clips: int,
    request_video: bool = False,
    request_audio: bool = False,
    video_out_frame_size: tuple[int, int] | None = None,
) -> AVClips:
    """Energon's ``megatron.energon.av.get_clips_uniform``: ``num_clips`` clips of
    ``clip_duration_seconds`` whose starts are evenly spaced from 0 to the shorter of the video
    and audio durations minus a clip (for ``clip_duration_seconds == 0``, single frames from half
    a frame in to half a frame before the end), video ranges ending inclusively.

    Raises:
      ValueError: neither video nor audio requested, or the requested stream has no duration.
    """
    if not request_video and not request_audio:
        raise ValueError("You must request at least one of video or audio")
    total = float("inf")
    if request_video:
        video_duration, _ = av_decoder.get_video_duration()
        if video_duration is None:
            raise ValueError("No video duration found")
        total = min(total, video_duration)
    if request_audio:
        audio_duration = av_decoder.get_audio_duration()
        if audio_duration is None:
            raise ValueError("No audio duration found")
        total = min(total, audio_duration)
    if clip_duration_seconds == 0:
        spf = 1 / av_decoder.get_video_fps()
        first, last = spf * 0.5, total - spf * 0.5
    else:
        first, last = 0.0, total - clip_duration_seconds
    clips = [
        (float(start), float(start + clip_duration_seconds))
        for start in np.linspace(first, last, num_clips)
    ]
    return av_decoder.get_clips(
        clips if request_video else None,
        audio_clip_ranges=clips if request_audio else None,
        video_out_frame_size=video_out_frame_size,
        range_end="inclusive",
    )


def get_single_frames_uniform(
    av_decoder: AVDecoder,
    num_frames: int,
    *,
    video_out_frame_size: tuple[int, int] | None = None,
    return_timestamps: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, list[float]]:
    """Energon's ``megatron.energon.av.get_single_frames_uniform``: ``num_frames`` single
    frames evenly spaced over the video (:func:`get_clips_uniform` with clips of 0 s), as one
    ``[num_frames, 3, H, W]`` tensor; with ``return_timestamps``, also each frame's start (s).

    Raises:
      ValueError: no frame found.
    """
    import torch

    data = get_clips_uniform(
        av_decoder,
        clip_duration_seconds=0,
        num_clips=num_frames,
        request_video=True,
        video_out_frame_size=video_out_frame_size,
    )
    clips = [c for c in data.video_clips if c.shape[0] > 0]
    if not clips:
        raise ValueError("No video frames found")
    video = torch.cat(clips, dim=0)
    if return_timestamps:
        stamps = [t for c, (t, _) in zip(data.video_clips, data.video_timestamps) if c.shape[0]]
        return video, stamps
    return video


def _energon_decoder_class() -> type:
    """:class:`~fpipe.decode.av.energon_decoder.EnergonAVDecoder`, imported on first use (so
    this module imports no PyAV)."""
    from fpipe.decode.av.energon_decoder import EnergonAVDecoder

    return EnergonAVDecoder


def __getattr__(name: str) -> Any:
    # ``AVDecoder`` too: ``fpipe.energon.av`` loads Energon's names from this module by name
    # (fpipe's own AVDecoder is imported here only for type checking)
    if name in ("EnergonAVDecoder", "AVDecoder"):
        return _energon_decoder_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_AV_EXTENSIONS = ("mp4", "avi", "mov", "webm", "mkv", "flac", "mp3", "wav", "flv")


class AVWebdatasetDecoder:
    """Energon's member decoder for audio/video: ``decoder(key, data)`` gives, for a media
    extension, an :class:`~fpipe.decode.av.AVDecoder` (``av_decode="AVDecoder"``), the decoded
    frames (``"torch"``, as ``get_frames``) or an open PyAV container (``"pyav"``); None for
    other extensions."""

    def __init__(
        self,
        video_decode_audio: bool,
        av_decode: Literal["torch", "AVDecoder", "pyav"] = "AVDecoder",
    ) -> None:
        if av_decode not in ("torch", "AVDecoder", "pyav"):
            raise ValueError(f"Invalid av_decode value: {av_decode}")
        self.video_decode_audio = video_decode_audio
        self.av_decode = av_decode

    def read_av_data(self, data: bytes) -> AVDecoder:
        """A lazy decoder over ``data`` (Energon's, :class:`EnergonAVDecoder`)."""
        return _energon_decoder_class()(bytes(data))

    def __call__(self, key: str, data: bytes) -> Any:
        key = key.lower()
        if not any(key == ext or key.endswith("." + ext) for ext in _AV_EXTENSIONS):
            return None
        decoder = self.read_av_data(data)
        if self.av_decode == "AVDecoder":
            return decoder
        if self.av_decode == "pyav":
            from fpipe.decode.av.probe import av_open

            return av_open(bytes(data))
        return decoder.get_frames(video_decode_audio=self.video_decode_audio)
