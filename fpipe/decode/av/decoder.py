"""Audio and video decoding with PyAV: the lazy :class:`AVDecoder` and the public names.

The ``fpipe.decode.av`` modules are the only ones in fpipe that import ``av``; nothing imports
them eagerly, so ``import fpipe`` stays fast and works without PyAV installed. Each has one job:

* :mod:`fpipe.decode.av.probe`: :func:`av_open` (every container, codec threads off) and
  :func:`probe_av` (stream metadata, keyframes and their frame numbers; demux only);
* :mod:`fpipe.decode.av.video`: video ranges in seconds or frames, seeking by keyframe;
* :mod:`fpipe.decode.av.audio`: audio ranges, resampled, exact sample counts;
* :mod:`fpipe.decode.av.ranges` (no PyAV): range helpers for one ``get_clips`` call;
* :mod:`fpipe.decode.av.records` (no PyAV): :class:`AVMetadata`, :class:`AVClips`
  and the limits check (the limits are :class:`fpipe.decode.DecodeLimits`).

Tensor layouts (see ``docs/video.md``): a video clip is a ``uint8`` tensor ``[T, 3, H, W]``
(RGB, frames in presentation order, as torchvision's ``read_video(output_format="TCHW")``);
an audio clip is a ``float32`` tensor ``[channels, samples]`` with values in ``[-1, 1]``.
Times are seconds on the stream's presentation timeline (``pts * time_base``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Literal

import av.error
import numpy as np
import torch

from fpipe.core.errors import BadSampleError
from fpipe.decode.av import probe as av_probe
from fpipe.decode.av._energon_methods import EnergonAVMethods
from fpipe.decode.av._threads import CodecThreads, resolve_codec_threads
from fpipe.decode.av.audio import audio_layout, decode_audio
from fpipe.decode.av.probe import AVSource, av_open, probe_av
from fpipe.decode.av.ranges import (
    check_ranges,
    random_clip_ranges,
    stream_clip_ranges,
    stream_span,
    uniform_clip_ranges,
    uniform_frame_ranges,
)
from fpipe.decode.av.records import AVClips, AVMetadata, check_av_limits
from fpipe.decode.av.video import RangeEnd, VideoUnit, decode_video
from fpipe.decode.limits import DEFAULT_LIMITS, DecodeLimits

__all__ = [
    "AVClips",
    "AVDecoder",
    "AVMetadata",
    "AVSource",
    "RangeEnd",
    "VideoUnit",
    "audio_layout",
    "av_open",
    "check_av_limits",
    "check_ranges",
    "probe_av",
    "random_clip_ranges",
    "stream_clip_ranges",
    "stream_span",
    "uniform_clip_ranges",
    "uniform_frame_ranges",
]


class AVDecoder(EnergonAVMethods):
    """Lazy decoder of the audio and video of one file (a video, or an audio-only file).

    Constructing reads nothing (not even the header). Every call opens and closes its own
    container, so a decoder holds no open resources between calls and can be pickled when
    built from bytes or a path.

    Without ``metadata``, the first call probes the file (one demux pass, no decoding) to learn
    the keyframes and check the limits; pass the :class:`AVMetadata` stored by ``fpipe
    prepare`` to skip that pass. Metadata without keyframe frame numbers (an old index) is
    probed once when a request in frames needs them.

    Ranges (``docs/video.md``, "Units and range semantics"): video ranges select frames by pts
    in seconds or by frame number (exact on any container); ``range_end`` says whether a frame
    at a range's end belongs to it (:mod:`fpipe.decode.av.video`); ``(t, t)`` is the frame at
    ``t``; audio clips hold ``round((end - start) * rate)`` samples inside the stream.

    Not thread-safe: use one decoder per thread (counters, file-like position).

    Attributes:
      frames_decoded: video frames decoded by this decoder so far (all calls).
      frames_skipped: video frames passed over undecoded so far (non-reference frames that
        no requested frame needs).
      audio_frames_decoded: audio frames (codec packets' worth of samples) decoded so far.

    Example:
      >>> dec = AVDecoder(video_bytes, key="000042")  # doctest: +SKIP
      >>> out = dec.get_clips_uniform(  # doctest: +SKIP
      ...     4, 2.0, request_audio=True, audio_sample_rate=16000
      ... )
      >>> out.video_clips[0].shape, out.audio_clips[0].shape  # doctest: +SKIP
      (torch.Size([48, 3, 480, 854]), torch.Size([1, 32000]))
    """

    def __repr__(self) -> str:
        size = f", {len(self._data)} bytes" if isinstance(self._data, (bytes, bytearray)) else ""
        where = self.key or self.path or "<in memory>"
        return f"AVDecoder({where!r}{size})"

    def __init__(
        self,
        data: AVSource,
        *,
        metadata: AVMetadata | None = None,
        path: str = "",
        key: str = "",
        limits: DecodeLimits = DEFAULT_LIMITS,
        suppress_warnings: bool = False,
    ):
        # suppress_warnings: Energon's; fpipe's frame seeks are exact and never warn
        if isinstance(data, (str, os.PathLike)) and not path:
            path = os.fspath(data)
        self._data = data
        self._metadata = metadata
        self.path = path
        self.key = key
        self.limits = limits
        self.frames_decoded = 0
        self.frames_skipped = 0
        self.audio_frames_decoded = 0
        if metadata is not None:
            check_av_limits(metadata, limits, path=path, key=key)

    # -- metadata -------------------------------------------------------------------------

    def _open(self, video_threads: int = 1):
        if hasattr(self._data, "seek") and not isinstance(self._data, (bytes, bytearray)):
            self._data.seek(0)
        return av_open(self._data, path=self.path, key=self.key, video_threads=video_threads)

    def _probe(self) -> AVMetadata:
        with self._open() as container:
            meta = av_probe.probe_container(container, path=self.path, key=self.key)
        check_av_limits(meta, self.limits, path=self.path, key=self.key)
        return meta

    @property
    def metadata(self) -> AVMetadata:
        """The stream metadata: as given, or probed (demux only) on first use."""
        if self._metadata is None:
            self._metadata = self._probe()
        return self._metadata

    def _bad(self, reason: str) -> BadSampleError:
        return BadSampleError(self.path, self.key, reason)

    # -- public API -----------------------------------------------------------------------

    def get_clips(
        self,
        video_clip_ranges: Sequence[tuple[float, float]] | None = None,
        video_unit: VideoUnit = "seconds",
        audio_clip_ranges: Sequence[tuple[float, float]] | None = None,
        audio_unit: Literal["seconds", "samples"] = "seconds",
        video_out_frame_size: tuple[int, int] | None = None,
        audio_sample_rate: int | None = None,
        audio_channels: int | str | None = None,
        *,
        range_end: RangeEnd = "exclusive",
        codec_threads: CodecThreads = "auto",
        skip_unneeded_frames: bool = True,
    ) -> AVClips:
        """Decode the requested video and audio ranges.

        Args:
          video_clip_ranges: ``(start, end)`` per video clip, in ``video_unit``; None or
            empty for none. ``end`` may be ``math.inf``; ``start == end`` asks for the frame
            at ``start``.
          video_unit: "seconds" (presentation time) or "frames" (frame numbers, rounded to
            integers: frame ``n`` is the ``n``-th decoded frame in presentation order).
          audio_clip_ranges: ``(start, end)`` per audio clip in ``audio_unit``; None for none.
          audio_unit: "seconds", or "samples" at the file's sample rate.
          video_out_frame_size: ``(width, height)`` to scale frames to (bilinear, in
            FFmpeg's swscale, before conversion to tensors); None keeps the coded size.
          audio_sample_rate: resample audio to this rate; None keeps the file's rate.
          audio_channels: mix audio to this many channels or this FFmpeg layout name
            ("mono", "stereo", "5.1"...); None keeps the file's layout.
          range_end: "exclusive" (default) or "inclusive" (Energon's): whether a frame
            exactly at a video range's end belongs to it (see the class docstring). Audio
            ranges are always ``round((end - start) * rate)`` samples.
          codec_threads: FFmpeg frame threads decoding the video: an int (1: none), or
            "auto" (default): ``cores // num_workers`` in a DataLoader worker process, 1
            elsewhere. Threads return the same frames; they only change how fast.
          skip_unneeded_frames: pass over H.264/HEVC non-reference frames that no range
            needs without decoding them (default; the frames returned are those of a full
            decode); False decodes every frame from each seek on.

        Returns:
          An :class:`AVClips` whose lists follow the order of the requested ranges.

        Raises:
          BadSampleError: corrupt data, a missing stream that was asked for, or a limit hit.
          ValueError: an unknown unit, ``range_end`` or ``codec_threads``, a range ending
            before its start.
        """
        if video_unit not in ("seconds", "frames"):
            raise ValueError(f"video_unit must be 'seconds' or 'frames', got {video_unit!r}")
        if audio_unit not in ("seconds", "samples"):
            raise ValueError(f"audio_unit must be 'seconds' or 'samples', got {audio_unit!r}")
        if range_end not in ("exclusive", "inclusive"):
            raise ValueError(f"range_end must be 'exclusive' or 'inclusive', got {range_end!r}")
        if video_out_frame_size is not None:
            w, h = video_out_frame_size
            if int(w) < 1 or int(h) < 1:
                raise ValueError(f"video_out_frame_size must be positive, got {(w, h)}")
        v_ranges = check_ranges(video_clip_ranges or (), "video", video_unit == "frames")
        a_ranges = check_ranges(audio_clip_ranges or (), "audio")
        layout = audio_layout(audio_channels)  # checks the argument before any decoding
        threads = resolve_codec_threads(codec_threads)
        meta = self.metadata
        if v_ranges and meta.video_num_frames is None:
            raise self._bad("video clips requested but the file has no video stream")
        if a_ranges and meta.audio_sample_rate is None:
            raise self._bad("audio clips requested but the file has no audio stream")
        if (
            video_unit == "frames"
            and v_ranges
            and len(meta.keyframe_frames) != len(meta.keyframes_s)
        ):
            meta = self._metadata = self._probe()  # stored metadata without frame numbers
        if audio_unit == "samples" and a_ranges:
            sr = meta.audio_sample_rate
            a_ranges = [(a / sr, b / sr) for a, b in a_ranges]
        clips, stamps, times, n_video, n_skipped = [], [], [], 0, 0
        a_clips, a_stamps, out_rate = [], [], None
        with self._open(threads if v_ranges else 1) as container:
            try:
                if a_ranges:  # first: audio at the stream start decodes without a seek
                    out_rate = audio_sample_rate or meta.audio_sample_rate
                    a_clips, a_stamps, n_audio = decode_audio(
                        container,
                        meta,
                        a_ranges,
                        sample_rate=out_rate,
                        channels=layout,
                        max_samples=self.limits.max_audio_samples,
                        bad=self._bad,
                    )
                    self.audio_frames_decoded += n_audio
                if v_ranges:
                    clips, stamps, times, n_video, n_skipped = decode_video(
                        container,
                        meta,
                        v_ranges,
                        unit=video_unit,
                        range_end=range_end,
                        size=video_out_frame_size,
                        max_frames=self.limits.max_video_frames,
                        bad=self._bad,
                        skip_unneeded=skip_unneeded_frames,
                    )
                    self.frames_decoded += n_video
                    self.frames_skipped += n_skipped
            except av.error.FFmpegError as e:
                raise self._bad(f"corrupt audio/video data: {e}") from e
        return AVClips(
            video_clips=clips,
            video_timestamps=stamps,
            video_frame_times=times,
            audio_clips=a_clips,
            audio_timestamps=a_stamps,
            audio_sample_rate=out_rate,
            video_frames_decoded=n_video,
            video_frames_skipped=n_skipped,
        )

    def _clip_ranges(self, make, request_video: bool, request_audio: bool, what: str):
        """(video, audio) ranges of a convenience method (see ``stream_clip_ranges``)."""
        try:
            return stream_clip_ranges(self.metadata, make, request_video, request_audio)
        except LookupError as e:
            hint = "" if request_audio else " (request_audio=True decodes its audio)"
            raise self._bad(f"{what} requested but the file has {e}{hint}") from None

    def get_clips_uniform(
        self,
        num_clips: int,
        clip_duration_seconds: float,
        request_audio: bool = False,
        video_out_frame_size: tuple[int, int] | None = None,
        audio_sample_rate: int | None = None,
        audio_channels: int | str | None = None,
        *,
        request_video: bool = True,
        range_end: RangeEnd = "exclusive",
    ) -> AVClips:
        """``num_clips`` clips of ``clip_duration_seconds`` evenly spread over the video: the
        first starts at the first frame, the last ends at the end of the video (see
        :func:`~fpipe.decode.av.ranges.uniform_clip_ranges`). With ``request_audio``, audio
        clips over the same time ranges. An audio-only file (or ``request_video=False``) gives
        audio clips spread over the audio stream. Only the frames of the clips and the
        lead-in from each clip's keyframe are decoded.
        """
        v, a = self._clip_ranges(
            lambda s, d: uniform_clip_ranges(s, d, num_clips, clip_duration_seconds),
            request_video,
            request_audio,
            "uniform clips",
        )
        return self.get_clips(
            v,
            audio_clip_ranges=a,
            video_out_frame_size=video_out_frame_size,
            audio_sample_rate=audio_sample_rate,
            audio_channels=audio_channels,
            range_end=range_end,
        )

    def get_clips_random(
        self,
        num_clips: int,
        clip_duration_seconds: float,
        rng: np.random.Generator,
        request_audio: bool = False,
        video_out_frame_size: tuple[int, int] | None = None,
        audio_sample_rate: int | None = None,
        audio_channels: int | str | None = None,
        *,
        request_video: bool = True,
        range_end: RangeEnd = "exclusive",
    ) -> AVClips:
        """Like :meth:`get_clips_uniform`, with clip starts drawn from ``rng`` (the sample's
        generator; see :func:`~fpipe.decode.av.ranges.random_clip_ranges`), in start order."""
        v, a = self._clip_ranges(
            lambda s, d: random_clip_ranges(s, d, num_clips, clip_duration_seconds, rng),
            request_video,
            request_audio,
            "random clips",
        )
        return self.get_clips(
            v,
            audio_clip_ranges=a,
            video_out_frame_size=video_out_frame_size,
            audio_sample_rate=audio_sample_rate,
            audio_channels=audio_channels,
            range_end=range_end,
        )

    def get_single_frames_uniform(
        self, n: int, video_out_frame_size: tuple[int, int] | None = None
    ) -> AVClips:
        """``n`` frames at the evenly spaced frame numbers ``round(linspace(0, N - 1, n))``
        (exact on any container, see :func:`~fpipe.decode.av.ranges.uniform_frame_ranges`),
        as one clip ``[n, 3, H, W]`` (``video_frame_times[0]`` holds their pts)."""
        meta = self.metadata
        if meta.video_num_frames is None:
            raise self._bad("frames requested but the file has no video stream")
        out = self.get_clips(
            uniform_frame_ranges(meta.video_num_frames, n),
            video_unit="frames",
            video_out_frame_size=video_out_frame_size,
        )
        frames = torch.cat(out.video_clips)
        times = torch.cat(out.video_frame_times)
        stamps = [(out.video_timestamps[0][0], out.video_timestamps[-1][1])]
        return AVClips(
            [frames],
            stamps,
            [],
            [],
            video_frame_times=[times],
            video_frames_decoded=out.video_frames_decoded,
        )

    def get_video(self, video_out_frame_size: tuple[int, int] | None = None) -> AVClips:
        """The whole video stream as one clip (no audio)."""
        return self.get_clips([(-math.inf, math.inf)], video_out_frame_size=video_out_frame_size)

    def get_audio(
        self, audio_sample_rate: int | None = None, audio_channels: int | str | None = None
    ) -> AVClips:
        """The whole audio stream as one clip (no video); works on audio-only files."""
        return self.get_clips(
            None,
            audio_clip_ranges=[(-math.inf, math.inf)],
            audio_sample_rate=audio_sample_rate,
            audio_channels=audio_channels,
        )

    def get_video_with_audio(
        self,
        video_out_frame_size: tuple[int, int] | None = None,
        audio_sample_rate: int | None = None,
        audio_channels: int | str | None = None,
    ) -> AVClips:
        """The whole video and the whole audio, one clip each."""
        return self.get_clips(
            [(-math.inf, math.inf)],
            audio_clip_ranges=[(-math.inf, math.inf)],
            video_out_frame_size=video_out_frame_size,
            audio_sample_rate=audio_sample_rate,
            audio_channels=audio_channels,
        )
