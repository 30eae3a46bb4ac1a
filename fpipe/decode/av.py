"""Audio and video decoding with PyAV: one opener, stream metadata with keyframes, lazy clips.

This is the only module of fpipe that imports ``av``; nothing imports it eagerly, so
``import fpipe`` stays fast and works without PyAV installed.

* :func:`av_open` opens every container (bytes, a binary file-like object or a path) with
  codec threads turned off, and turns open failures into :class:`BadSampleError`.
* :func:`probe_av` reads the stream metadata and the keyframe times by demuxing packets (no
  frame is decoded), for ``fpipe prepare`` to store in the index as an :class:`AVMetadata`.
* :class:`AVDecoder` decodes clips lazily: constructing one reads nothing. Each clip is decoded
  from the nearest keyframe at or before its start and stops at its end.

Tensor layouts (see ``docs/video.md``): a video clip is a ``uint8`` tensor ``[T, 3, H, W]``
(RGB, frames in presentation order, as torchvision's ``read_video(output_format="TCHW")``);
an audio clip is a ``float32`` tensor ``[channels, samples]`` with values in ``[-1, 1]``.
Times are seconds on the stream's presentation timeline (``pts * time_base``).
"""

from __future__ import annotations

import bisect
import math
import os
from collections.abc import Iterator, Sequence
from typing import Literal

import av
import av.error
import numpy as np
import torch

from fpipe.core.errors import BadSampleError
from fpipe.decode import av_probe
from fpipe.decode.av_probe import AVSource, av_open, probe_av
from fpipe.decode.av_records import (
    AVClips,
    AVLimits,
    AVMetadata,
    check_av_limits,
    random_clip_ranges,
    uniform_clip_ranges,
)

__all__ = [
    "AVClips",
    "AVDecoder",
    "AVLimits",
    "AVMetadata",
    "AVSource",
    "av_open",
    "check_av_limits",
    "probe_av",
    "random_clip_ranges",
    "uniform_clip_ranges",
]

_EPS = 1e-6  # seconds; absorbs float rounding of pts * time_base and of requested ranges


def _layout_name(channels: int) -> str:
    return {1: "mono", 2: "stereo"}.get(channels, f"{channels}c")


def _check_ranges(ranges: Sequence[tuple[float, float]], what: str) -> list[tuple[float, float]]:
    out = []
    for r in ranges:
        start, end = float(r[0]), float(r[1])
        if not end > start:
            raise ValueError(f"{what} range {r!r}: the end must be after the start")
        out.append((start, end))
    return out


_Frame = tuple[float, "av.VideoFrame"]


class AVDecoder:
    """Lazy decoder of the audio and video of one file.

    Constructing reads nothing (not even the header). The first call that needs it opens the
    container; every call opens and closes its own container, so a decoder holds no open
    resources between calls and can be pickled when built from bytes or a path.

    Without ``metadata``, the first call probes the file (one demux pass, no decoding) to learn
    the keyframes and check the limits; pass the :class:`AVMetadata` stored by ``fpipe
    prepare`` to skip that pass.

    Each requested video range is decoded by seeking to the last keyframe at or before its
    start (``container.seek(..., backward=True, stream=video)``) and decoding forward until
    the first frame at or after its end. Ranges are decoded in start order; when the next
    range starts in the same keyframe interval after the last decoded frame, decoding
    continues instead of seeking back. A video range ``[start, end)`` in seconds holds the
    frames whose pts is in it; in frames, ``[a, b)`` holds frames ``a .. b-1`` (converted to
    seconds with the average frame rate, exact for constant frame rate). A range that holds no
    frame pts returns the frame on screen at ``start``.

    Not thread-safe: use one decoder per thread (counters, file-like position).

    Attributes:
      frames_decoded: video frames decoded by this decoder so far (all calls).
      audio_frames_decoded: audio frames (codec packets' worth of samples) decoded so far.

    Example:
      >>> dec = AVDecoder(video_bytes, key="000042")  # doctest: +SKIP
      >>> out = dec.get_clips_uniform(  # doctest: +SKIP
      ...     4, 2.0, request_audio=True, audio_sample_rate=16000
      ... )
      >>> out.video_clips[0].shape, out.audio_clips[0].shape  # doctest: +SKIP
      (torch.Size([48, 3, 480, 854]), torch.Size([1, 32000]))
    """

    def __init__(
        self,
        data: AVSource,
        *,
        metadata: AVMetadata | None = None,
        path: str = "",
        key: str = "",
        limits: AVLimits = AVLimits(),  # noqa: B008 - frozen record, safe as a default
    ):
        if isinstance(data, (str, os.PathLike)) and not path:
            path = os.fspath(data)
        self._data = data
        self._metadata = metadata
        self.path = path
        self.key = key
        self.limits = limits
        self.frames_decoded = 0
        self.audio_frames_decoded = 0
        if metadata is not None:
            check_av_limits(metadata, limits, path=path, key=key)

    # -- metadata -------------------------------------------------------------------------

    def _open(self):
        if hasattr(self._data, "seek") and not isinstance(self._data, (bytes, bytearray)):
            self._data.seek(0)
        return av_open(self._data, path=self.path, key=self.key)

    @property
    def metadata(self) -> AVMetadata:
        """The stream metadata: as given, or probed (demux only) on first use."""
        if self._metadata is None:
            with self._open() as container:
                meta = av_probe.probe_container(container, path=self.path, key=self.key)
            check_av_limits(meta, self.limits, path=self.path, key=self.key)
            self._metadata = meta
        return self._metadata

    def _bad(self, reason: str) -> BadSampleError:
        return BadSampleError(self.path, self.key, reason)

    # -- public API -----------------------------------------------------------------------

    def get_clips(
        self,
        video_clip_ranges: Sequence[tuple[float, float]] | None,
        video_unit: Literal["seconds", "frames"] = "seconds",
        audio_clip_ranges: Sequence[tuple[float, float]] | None = None,
        audio_unit: Literal["seconds", "samples"] = "seconds",
        video_out_frame_size: tuple[int, int] | None = None,
        audio_sample_rate: int | None = None,
        audio_channels: int | None = None,
    ) -> AVClips:
        """Decode the requested video and audio ranges (half-open ``[start, end)``).

        Args:
          video_clip_ranges: ``(start, end)`` per video clip, in ``video_unit``; None or
            empty for none. ``end`` may be ``math.inf``.
          video_unit: "seconds" (presentation time) or "frames" (frame index, ``[a, b)``
            returns frames ``a .. b-1``).
          audio_clip_ranges: ``(start, end)`` per audio clip in ``audio_unit``; None for none.
          audio_unit: "seconds", or "samples" at the file's sample rate.
          video_out_frame_size: ``(width, height)`` to scale frames to (bilinear, in
            FFmpeg's swscale, before conversion to tensors); None keeps the coded size.
          audio_sample_rate: resample audio to this rate; None keeps the file's rate.
          audio_channels: mix audio to this many channels; None keeps the file's layout.

        Returns:
          An :class:`AVClips` whose lists follow the order of the requested ranges.

        Raises:
          BadSampleError: corrupt data, a missing stream that was asked for, or a limit hit.
        """
        if video_unit not in ("seconds", "frames"):
            raise ValueError(f"video_unit must be 'seconds' or 'frames', got {video_unit!r}")
        if audio_unit not in ("seconds", "samples"):
            raise ValueError(f"audio_unit must be 'seconds' or 'samples', got {audio_unit!r}")
        if video_out_frame_size is not None:
            w, h = video_out_frame_size
            if int(w) < 1 or int(h) < 1:
                raise ValueError(f"video_out_frame_size must be positive, got {(w, h)}")
        v_ranges = _check_ranges(video_clip_ranges or (), "video")
        a_ranges = _check_ranges(audio_clip_ranges or (), "audio")
        meta = self.metadata
        if v_ranges and meta.video_num_frames is None:
            raise self._bad("video clips requested but the file has no video stream")
        if a_ranges and meta.audio_sample_rate is None:
            raise self._bad("audio clips requested but the file has no audio stream")
        if video_unit == "frames" and v_ranges:
            fps, t0 = meta.video_fps, meta.video_start_s
            v_ranges = [(t0 + (a - 0.5) / fps, t0 + (b - 0.5) / fps) for a, b in v_ranges]
        if audio_unit == "samples" and a_ranges:
            sr = meta.audio_sample_rate
            a_ranges = [(a / sr, b / sr) for a, b in a_ranges]
        before = self.frames_decoded
        clips, stamps, times = [], [], []
        a_clips, a_stamps, out_rate = [], [], None
        with self._open() as container:
            try:
                if v_ranges:
                    clips, stamps, times = self._decode_video(
                        container, v_ranges, video_out_frame_size
                    )
                if a_ranges:
                    out_rate = audio_sample_rate or meta.audio_sample_rate
                    a_clips, a_stamps = self._decode_audio(
                        container, a_ranges, out_rate, audio_channels
                    )
            except av.error.FFmpegError as e:
                raise self._bad(f"corrupt audio/video data: {e}") from e
        return AVClips(
            video_clips=clips,
            video_timestamps=stamps,
            video_frame_times=times,
            audio_clips=a_clips,
            audio_timestamps=a_stamps,
            audio_sample_rate=out_rate,
            video_frames_decoded=self.frames_decoded - before,
        )

    def get_clips_uniform(
        self,
        num_clips: int,
        clip_duration_seconds: float,
        request_audio: bool = False,
        video_out_frame_size: tuple[int, int] | None = None,
        audio_sample_rate: int | None = None,
        audio_channels: int | None = None,
    ) -> AVClips:
        """``num_clips`` clips of ``clip_duration_seconds`` evenly spread over the video: the
        first starts at the first frame, the last ends at the end of the video (see
        :func:`uniform_clip_ranges`). With ``request_audio``, audio clips over the same
        time ranges (if the file has audio). Only the frames of the clips and the lead-in
        from each clip's keyframe are decoded.
        """
        meta = self.metadata
        if meta.video_num_frames is None:
            raise self._bad("uniform clips requested but the file has no video stream")
        ranges = uniform_clip_ranges(
            meta.video_start_s, meta.video_duration_s, num_clips, clip_duration_seconds
        )
        audio = ranges if request_audio and meta.audio_sample_rate is not None else None
        return self.get_clips(
            ranges,
            audio_clip_ranges=audio,
            video_out_frame_size=video_out_frame_size,
            audio_sample_rate=audio_sample_rate,
            audio_channels=audio_channels,
        )

    def get_clips_random(
        self,
        num_clips: int,
        clip_duration_seconds: float,
        rng: np.random.Generator,
        request_audio: bool = False,
        video_out_frame_size: tuple[int, int] | None = None,
        audio_sample_rate: int | None = None,
        audio_channels: int | None = None,
    ) -> AVClips:
        """Like :meth:`get_clips_uniform`, with clip starts drawn from ``rng`` (the sample's
        generator; see :func:`random_clip_ranges`), in start order."""
        meta = self.metadata
        if meta.video_num_frames is None:
            raise self._bad("random clips requested but the file has no video stream")
        ranges = random_clip_ranges(
            meta.video_start_s, meta.video_duration_s, num_clips, clip_duration_seconds, rng
        )
        audio = ranges if request_audio and meta.audio_sample_rate is not None else None
        return self.get_clips(
            ranges,
            audio_clip_ranges=audio,
            video_out_frame_size=video_out_frame_size,
            audio_sample_rate=audio_sample_rate,
            audio_channels=audio_channels,
        )

    def get_single_frames_uniform(
        self, n: int, video_out_frame_size: tuple[int, int] | None = None
    ) -> AVClips:
        """``n`` frames at evenly spaced frame indices ``round(linspace(0, N - 1, n))``, as one
        clip ``[n, 3, H, W]`` (``video_frame_times[0]`` holds their pts)."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        meta = self.metadata
        if meta.video_num_frames is None:
            raise self._bad("frames requested but the file has no video stream")
        idx = np.round(np.linspace(0, meta.video_num_frames - 1, n)).astype(np.int64)
        out = self.get_clips(
            [(int(i), int(i) + 1) for i in idx],
            video_unit="frames",
            video_out_frame_size=video_out_frame_size,
        )
        frames = torch.cat(out.video_clips)
        times = torch.cat(out.video_frame_times)
        stamps = [(out.video_timestamps[0][0], out.video_timestamps[-1][1])]
        return AVClips([frames], stamps, [times], [], [], None, out.video_frames_decoded)

    def get_video(self, video_out_frame_size: tuple[int, int] | None = None) -> AVClips:
        """The whole video stream as one clip (no audio)."""
        return self.get_clips([(-math.inf, math.inf)], video_out_frame_size=video_out_frame_size)

    def get_audio(
        self, audio_sample_rate: int | None = None, audio_channels: int | None = None
    ) -> AVClips:
        """The whole audio stream as one clip (no video)."""
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
        audio_channels: int | None = None,
    ) -> AVClips:
        """The whole video and the whole audio, one clip each."""
        return self.get_clips(
            [(-math.inf, math.inf)],
            audio_clip_ranges=[(-math.inf, math.inf)],
            video_out_frame_size=video_out_frame_size,
            audio_sample_rate=audio_sample_rate,
            audio_channels=audio_channels,
        )

    # -- video ----------------------------------------------------------------------------

    def _video_frames(self, container, stream, seek_s: float, start_s: float) -> Iterator[_Frame]:
        """Seek to the keyframe at ``seek_s`` and yield ``(pts seconds, frame)`` from there."""
        meta = self.metadata
        container.seek(round(seek_s / stream.time_base), backward=True, stream=stream)
        first, prev_t = True, None
        for frame in container.decode(stream):
            self.frames_decoded += 1
            t = frame.time
            if t is None:  # no pts: assume constant frame rate
                t = start_s if prev_t is None else prev_t + 1.0 / meta.video_fps
            if first:
                first = False
                if t > start_s + _EPS and seek_s > meta.video_start_s + _EPS:
                    # The demuxer landed past the requested keyframe (a wrong index): decode
                    # from the first frame instead of returning a clip with missing frames.
                    yield from self._video_frames(container, stream, meta.video_start_s, start_s)
                    return
            prev_t = t
            yield t, frame

    def _decode_video(self, container, ranges, size):
        meta = self.metadata
        stream = container.streams.video[0]
        keys = meta.keyframes_s or (meta.video_start_s,)
        budget = self.limits.max_frames
        start_count = self.frames_decoded
        unique = sorted(set(ranges))
        done: dict[tuple[float, float], tuple] = {}
        it: Iterator[_Frame] | None = None
        pending: _Frame | None = None  # decoded past the previous clip's end, not yet used
        prev: _Frame | None = None  # last frame pulled before the current position
        for start, end in unique:
            k = keys[max(bisect.bisect_right(keys, start + _EPS) - 1, 0)]
            # Continue decoding forward when no frame this clip needs was used up yet and
            # seeking would land no later than where we are; otherwise seek to its keyframe.
            here = pending if pending is not None else prev
            fresh = prev is None or prev[0] < start - _EPS
            if it is None or here is None or not (fresh and k <= here[0] + _EPS):
                it, pending, prev = self._video_frames(container, stream, k, start), None, None
            frames: list[_Frame] = []
            while True:
                if pending is not None:
                    item, pending = pending, None
                else:
                    item = next(it, None)
                    if item is None:
                        it = None
                        break
                if budget is not None and self.frames_decoded - start_count > budget:
                    raise self._bad(f"decoded more than max_frames={budget} video frames")
                t = item[0]
                if t >= end - _EPS:
                    pending = item
                    break
                if t >= start - _EPS:
                    frames.append(item)
                prev = item
            if (
                not frames
                and prev is not None
                and start < meta.video_start_s + (meta.video_duration_s or 0.0)
            ):
                frames = [prev]  # no pts inside the range: the frame on screen at `start`
            done[(start, end)] = self._to_clip(frames, stream, size)
        clips, stamps, times = zip(*(done[r] for r in ranges))
        return list(clips), list(stamps), list(times)

    def _to_clip(self, frames: list[_Frame], stream, size):
        if size is not None:
            w, h = int(size[0]), int(size[1])
        else:
            w, h = stream.codec_context.width, stream.codec_context.height
        arr = np.empty((len(frames), h, w, 3), np.uint8)
        for i, (_, frame) in enumerate(frames):
            if size is not None or (frame.width, frame.height) != (w, h):
                frame = frame.reformat(width=w, height=h, interpolation="BILINEAR")
            arr[i] = frame.to_ndarray(format="rgb24")
        # [T, 3, H, W] over the [T, H, W, 3] buffer: torch.channels_last memory, no copy
        clip = torch.from_numpy(arr).permute(0, 3, 1, 2)
        times = torch.tensor([t for t, _ in frames], dtype=torch.float64)
        if frames:
            last_t, last = frames[-1]
            dur = float(last.duration * last.time_base) if last.duration else 0.0
            dur = dur or 1.0 / (self.metadata.video_fps or 1.0)
            stamp = (frames[0][0], last_t + dur)
        else:
            stamp = (math.nan, math.nan)
        return clip, stamp, times

    # -- audio ----------------------------------------------------------------------------

    def _decode_audio(self, container, ranges, rate: int, channels: int | None):
        meta = self.metadata
        stream = container.streams.audio[0]
        layout = _layout_name(channels) if channels is not None else None
        nch = channels or meta.audio_channels
        clips, stamps = [], []
        for start, end in ranges:
            resampler = av.AudioResampler(format="fltp", layout=layout, rate=rate)
            chunks: list[np.ndarray] = []
            t0 = None
            for frame in self._audio_frames(container, stream, start):
                t = frame.time if frame.time is not None else start
                frame_end = t + frame.samples / frame.sample_rate
                if frame_end < start - 0.05:  # well before the clip: skip, keep some lead-in
                    continue
                if t0 is None:
                    t0 = t
                chunks.extend(f.to_ndarray() for f in resampler.resample(frame))
                if frame_end >= end:
                    break
            chunks.extend(f.to_ndarray() for f in resampler.resample(None))
            data = np.concatenate(chunks, axis=1) if chunks else np.zeros((nch, 0), np.float32)
            if t0 is None:
                t0 = max(start, meta.audio_start_s)
            i0 = 0 if start <= t0 else int(round((start - t0) * rate))
            if math.isinf(end):
                i1 = data.shape[1]
            else:
                i1 = i0 + int(round((end - max(start, t0)) * rate))
            clip = np.ascontiguousarray(data[:, i0:i1], dtype=np.float32)
            clips.append(torch.from_numpy(clip))
            stamps.append((t0 + i0 / rate, t0 + (i0 + clip.shape[1]) / rate))
        return clips, stamps

    def _audio_frames(self, container, stream, start_s: float):
        meta = self.metadata
        seek_s = max(start_s, meta.audio_start_s)
        container.seek(round(seek_s / stream.time_base), backward=True, stream=stream)
        first = True
        for frame in container.decode(stream):
            self.audio_frames_decoded += 1
            if first:
                first = False
                t = frame.time
                if t is not None and t > seek_s + _EPS and seek_s > meta.audio_start_s + _EPS:
                    yield from self._audio_frames(container, stream, meta.audio_start_s)
                    return
            yield frame
