"""Audio/video records that need no PyAV: stream metadata, the limits check and clip results.

Kept apart from the ``fpipe.decode.av`` modules that import ``av`` so the index and the plan
can read stored metadata without loading PyAV. :mod:`fpipe.decode.av.decoder` re-exports every name
here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from fpipe.core.errors import BadSampleError
from fpipe.decode.limits import DecodeLimits, limit_hint

if TYPE_CHECKING:  # annotations only: this module must not import torch or av
    import torch

__all__ = [
    "AVClips",
    "AVMetadata",
    "check_av_limits",
]


class AVMetadata(msgspec.Struct, frozen=True, kw_only=True):
    """Stream metadata of one audio/video file, as stored in the index by ``fpipe prepare``.

    Only the first video stream and the first audio stream are described; fields of a missing
    stream are None. Times are seconds on the presentation timeline.
    """

    duration_s: float  #: span of the video and audio streams together, seconds
    video_start_s: float | None = None  #: pts of the first video frame, seconds (usually 0)
    video_duration_s: float | None = None  #: first frame start to last frame's end, seconds
    video_fps: float | None = None  #: average frame rate, frames per second
    video_num_frames: int | None = None  #: number of frames (non-empty video packets), demuxed
    width: int | None = None  #: coded frame width, pixels
    height: int | None = None  #: coded frame height, pixels
    video_codec: str | None = None  #: FFmpeg codec name, e.g. "h264"
    #: presentation times of the video keyframes, seconds, ascending (from ``is_keyframe``)
    keyframes_s: tuple[float, ...] = ()
    #: frame number of each keyframe of ``keyframes_s``: how many frames precede it in
    #: presentation order (the first frame is 0); empty when unknown (an index written before
    #: frame numbers were stored), in which case frame-accurate seeks probe the file once
    keyframe_frames: tuple[int, ...] = ()
    audio_codec: str | None = None  #: FFmpeg codec name, e.g. "aac"
    audio_sample_rate: int | None = None  #: samples per second per channel
    audio_channels: int | None = None  #: number of channels
    #: time of the first audio sample, seconds (the stream's start time: priming samples that
    #: the container discards are not counted; may be negative)
    audio_start_s: float | None = None
    audio_duration_s: float | None = None  #: first sample to the last packet's end, seconds

    # Energon's field names (megatron.energon.AVMetadata), read from the fields above.
    @property
    def video_duration(self) -> float | None:
        """Energon's name of :attr:`video_duration_s`."""
        return self.video_duration_s

    @property
    def video_width(self) -> int | None:
        """Energon's name of :attr:`width`."""
        return self.width

    @property
    def video_height(self) -> int | None:
        """Energon's name of :attr:`height`."""
        return self.height

    @property
    def audio_duration(self) -> float | None:
        """Energon's name of :attr:`audio_duration_s`."""
        return self.audio_duration_s

    @property
    def audio_num_samples(self) -> int | None:
        """Samples per channel of the whole audio stream: ``round(audio_duration_s * rate)``,
        the length of ``AVDecoder.get_audio()``'s clip at the file's rate."""
        if self.audio_duration_s is None or self.audio_sample_rate is None:
            return None
        return int(round(self.audio_duration_s * self.audio_sample_rate))


def check_av_limits(
    metadata: AVMetadata, limits: DecodeLimits, *, path: str = "", key: str = ""
) -> None:
    """Raise :class:`BadSampleError` if ``metadata`` exceeds the audio/video limits of
    ``limits`` (``max_av_duration_s``, ``max_video_frames``, ``max_video_pixels``)."""
    m, lim = metadata, limits
    if lim.max_av_duration_s is not None and m.duration_s > lim.max_av_duration_s:
        reason = f"duration {m.duration_s:.3f} s exceeds max_av_duration_s={lim.max_av_duration_s}"
        raise BadSampleError(path, key, f"{reason} ({limit_hint('max_av_duration_s')})")
    if lim.max_video_frames is not None and (m.video_num_frames or 0) > lim.max_video_frames:
        reason = f"{m.video_num_frames} video frames exceed max_video_frames={lim.max_video_frames}"
        raise BadSampleError(path, key, f"{reason} ({limit_hint('max_video_frames')})")
    pixels = (m.width or 0) * (m.height or 0)
    if lim.max_video_pixels is not None and pixels > lim.max_video_pixels:
        reason = f"frame size {m.width}x{m.height} exceeds max_video_pixels={lim.max_video_pixels}"
        raise BadSampleError(path, key, f"{reason} ({limit_hint('max_video_pixels')})")


@dataclass(frozen=True, eq=False)
class AVClips:
    """Decoded clips; entry ``i`` of each list belongs to requested range ``i``.

    Attributes:
      video_clips: one ``uint8`` tensor ``[T, 3, H, W]`` (RGB) per video range, stored in
        ``torch.channels_last`` memory format (a view of the decoded ``[T, H, W, 3]`` pixels;
        call ``.contiguous()`` if you need the default layout); ``T`` may be 0 for a range
        after the end of the video.
      video_timestamps: ``(start, end)`` seconds covered by each clip: pts of its first frame
        and pts + duration of its last frame.
      video_frame_times: one ``float64`` tensor ``[T]`` per clip: the pts of each frame, s.
      audio_clips: one ``float32`` tensor ``[channels, samples]`` per audio range.
      audio_timestamps: ``(start, end)`` seconds of the first sample and just past the last.
      audio_sample_rate: sample rate of ``audio_clips`` (None if no audio was requested).
      video_frames_decoded: video frames this call decoded (including frames decoded only to
        reach a clip start from its keyframe).
      video_frames_skipped: video frames this call passed over without decoding them
        (non-reference frames outside every clip, which no kept frame depends on).

    The first four are Energon's ``AVData`` (``AVClips(video_clips=..., video_timestamps=...,
    audio_clips=..., audio_timestamps=...)`` builds one); the others are keyword-only with
    defaults (no frame times, no rate, nothing decoded).
    """

    video_clips: list[torch.Tensor]
    video_timestamps: list[tuple[float, float]]
    audio_clips: list[torch.Tensor]
    audio_timestamps: list[tuple[float, float]]
    video_frame_times: list[torch.Tensor] = field(default_factory=list, kw_only=True)
    audio_sample_rate: int | None = field(default=None, kw_only=True)
    video_frames_decoded: int = field(default=0, kw_only=True)
    video_frames_skipped: int = field(default=0, kw_only=True)
