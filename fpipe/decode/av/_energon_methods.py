"""Megatron-Energon's ``AVDecoder`` methods, a base of :class:`fpipe.decode.av.AVDecoder`.

Energon code calls a decoder's ``get_frames``, ``get_video_clips``, ``get_audio_clips``,
``get_metadata``, ``get_video_duration`` ...; they are defined here as Energon 7.4 defines them
(``megatron/energon/av/av_decoder.py``), on top of fpipe's ``get_clips`` and metadata, so every
decoder fpipe hands out has them. See :mod:`fpipe.decode.av.energon` for the free functions and
what stays fpipe's.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from fpipe.decode.av.records import AVClips, AVMetadata

if TYPE_CHECKING:
    import torch

__all__ = ["EnergonAVMethods", "audio_clips_kept"]

_EPS = 1e-6  # seconds

_VIDEO_FIELDS = (
    "video_start_s",
    "video_duration_s",
    "video_fps",
    "video_num_frames",
    "width",
    "height",
    "video_codec",
)
_AUDIO_FIELDS = (
    "audio_codec",
    "audio_sample_rate",
    "audio_channels",
    "audio_start_s",
    "audio_duration_s",
)


def audio_clips_kept(
    meta: Any, clips: Sequence[Any], stamps: Sequence[tuple[float, float]]
) -> list[int]:
    """Which audio clips Energon returns: all but the empty clips of ranges that start at or
    after the end of the audio (Energon decodes nothing there and returns no clip; fpipe's
    ``get_clips`` keeps one entry per range)."""
    audio_end = (meta.audio_start_s or 0.0) + (meta.audio_duration_s or 0.0)
    return [
        i
        for i, (clip, (start, _)) in enumerate(zip(clips, stamps))
        if not (clip.shape[-1] == 0 and start >= audio_end - _EPS)
    ]


class EnergonAVMethods:
    """Energon's ``AVDecoder`` methods; a base of :class:`fpipe.decode.av.AVDecoder`."""

    # provided by AVDecoder
    metadata: AVMetadata
    _data: Any
    get_clips: Any

    @property
    def stream(self) -> Any:
        """Energon's ``stream``: a binary file object over the data (the object given, or a
        ``BytesIO`` over the bytes; a path is opened for reading, which the caller closes)."""
        data = self._data
        if isinstance(data, (bytes, bytearray, memoryview)):
            return io.BytesIO(bytes(data))
        if hasattr(data, "read"):
            data.seek(0)
            return data
        return open(data, "rb")  # noqa: SIM115 - Energon hands out an open stream

    def get_video_clips(
        self,
        video_clip_ranges: Sequence[tuple[float, float]],
        video_unit: Literal["frames", "seconds"] = "seconds",
        video_out_frame_size: tuple[int, int] | None = None,
    ) -> tuple[list[torch.Tensor], list[tuple[float, float]]]:
        """Energon's: ``(clips, (start, end) seconds of each)`` for the ranges, whose ends are
        inclusive; a range with no frame gives no clip (the lists are shorter)."""
        out = self.get_clips(
            video_clip_ranges,
            video_unit=video_unit,
            video_out_frame_size=video_out_frame_size,
            range_end="inclusive",
        )
        kept = [i for i, c in enumerate(out.video_clips) if c.shape[0] > 0]
        return [out.video_clips[i] for i in kept], [out.video_timestamps[i] for i in kept]

    def get_audio_clips(
        self,
        audio_clip_ranges: Sequence[tuple[float, float]],
        audio_unit: Literal["samples", "seconds"] = "seconds",
    ) -> tuple[list[torch.Tensor], list[tuple[float, float]]]:
        """Energon's: ``(clips, (start, end) seconds of each)`` at the file's rate and layout
        (``float32`` in ``[-1, 1]``, where Energon keeps the codec's sample format); a range
        starting at or after the audio's end gives no clip (the lists are shorter), as a video
        range with no frame does in :meth:`get_video_clips`."""
        out = self.get_clips(None, audio_clip_ranges=audio_clip_ranges, audio_unit=audio_unit)
        kept = audio_clips_kept(self.metadata, out.audio_clips, out.audio_timestamps)
        return [out.audio_clips[i] for i in kept], [out.audio_timestamps[i] for i in kept]

    def get_frames(self, video_decode_audio: bool = False) -> AVClips:
        """Energon's: the whole video (and its audio with ``video_decode_audio``), or the
        whole audio of an audio-only file."""
        meta = self.metadata
        if meta.video_num_frames is not None:
            if video_decode_audio and meta.audio_sample_rate is not None:
                return self.get_video_with_audio()  # type: ignore[attr-defined]
            return self.get_video()  # type: ignore[attr-defined]
        return self.get_audio()  # type: ignore[attr-defined]

    def get_metadata(
        self,
        get_video: bool = True,
        get_video_duration: bool = True,
        get_video_frame_count: bool = True,
        get_video_frame_size: bool = True,
        get_audio: bool = True,
        get_audio_duration: bool = True,
        get_audio_num_samples: bool = False,
    ) -> AVMetadata:
        """Energon's: the stream metadata (fpipe's record, which answers to Energon's field
        names too); the fields of a stream not asked for are None, as in Energon. The other
        flags only spare Energon work: fpipe's metadata comes from one demux pass (or the
        index) and has them all."""
        meta = self.metadata
        drop = (_VIDEO_FIELDS if not get_video else ()) + (_AUDIO_FIELDS if not get_audio else ())
        if not drop:
            return meta
        extra = {"keyframes_s": (), "keyframe_frames": ()} if not get_video else {}
        return msgspec.structs.replace(meta, **dict.fromkeys(drop), **extra)

    def get_video_duration(self, get_frame_count: bool = False) -> tuple[float | None, int | None]:
        """Energon's: ``(video duration in seconds, frame count or None)``."""
        meta = self.metadata
        return meta.video_duration_s, meta.video_num_frames if get_frame_count else None

    def get_audio_duration(self) -> float | None:
        """Energon's: the audio stream's duration in seconds (None without audio)."""
        return self.metadata.audio_duration_s

    def get_video_fps(self) -> float:
        """Energon's: the video's average frame rate."""
        fps = self.metadata.video_fps
        if fps is None:
            raise self._bad("no video stream: no frame rate")  # type: ignore[attr-defined]
        return fps

    def get_audio_samples_per_second(self) -> int:
        """Energon's: the audio's sample rate."""
        rate = self.metadata.audio_sample_rate
        if rate is None:
            raise self._bad("no audio stream: no sample rate")  # type: ignore[attr-defined]
        return rate

    def has_video_stream(self) -> bool:
        """Energon's: whether the file has a video stream."""
        return self.metadata.video_num_frames is not None

    def has_audio_stream(self) -> bool:
        """Energon's: whether the file has an audio stream."""
        return self.metadata.audio_sample_rate is not None
