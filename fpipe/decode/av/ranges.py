"""Clip ranges for :meth:`fpipe.decode.av.AVDecoder.get_clips`, as plain functions (no PyAV).

Each helper returns a list of ``(start, end)`` ranges that one ``get_clips`` call decodes, so
the convenience methods of the decoder (uniform clips, random clips, uniform single frames) are
this module plus one ``get_clips``; users can build, inspect or adjust the ranges in between.

Example:
  >>> from fpipe.decode.av.records import AVMetadata
  >>> meta = AVMetadata(duration_s=10.0, video_start_s=0.0, video_duration_s=10.0,
  ...                   video_fps=24.0, video_num_frames=240)
  >>> uniform_clip_ranges(*stream_span(meta, "video"), 3, 2.0)
  [(0.0, 2.0), (4.0, 6.0), (8.0, 10.0)]
  >>> uniform_frame_ranges(240, 3)
  [(0, 0), (120, 120), (239, 239)]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from fpipe.decode.av.records import AVMetadata

__all__ = [
    "check_ranges",
    "random_clip_ranges",
    "stream_clip_ranges",
    "stream_span",
    "uniform_clip_ranges",
    "uniform_frame_ranges",
]

Ranges = list[tuple[float, float]]


def check_ranges(ranges: Sequence, what: str = "video", integers: bool = False) -> Ranges:
    """``(start, end)`` pairs as floats, refusing ``end < start`` (and NaN) with a
    ``ValueError`` naming ``what``; with ``integers`` (frame numbers) finite values are rounded.

    >>> check_ranges([(1, 2), (3.4, 3.4)], integers=True)
    [(1.0, 2.0), (3.0, 3.0)]
    """
    out = []
    for r in ranges:
        start, end = float(r[0]), float(r[1])
        if not end >= start:
            raise ValueError(f"{what} range {r!r}: the end must not be before the start")
        if integers:
            start = float(round(start)) if math.isfinite(start) else start
            end = float(round(end)) if math.isfinite(end) else end
        out.append((start, end))
    return out


def stream_clip_ranges(
    meta: AVMetadata,
    make: Callable[[float, float], Ranges],
    request_video: bool = True,
    request_audio: bool = False,
) -> tuple[Ranges | None, Ranges | None]:
    """``(video ranges, audio ranges)`` for one ``get_clips`` call, from ``make(start_s,
    duration_s)`` over the video stream (the audio follows the same ranges) or, when the file
    has no video (or ``request_video`` is False), over the audio stream.

    Raises:
      ValueError: neither stream is requested.
      LookupError: the file has none of the requested streams.

    >>> m = AVMetadata(duration_s=4.0, audio_sample_rate=16000, audio_start_s=0.0,
    ...                audio_duration_s=4.0)
    >>> stream_clip_ranges(m, lambda s, d: uniform_clip_ranges(s, d, 2, 1.0), True, True)
    (None, [(0.0, 1.0), (3.0, 4.0)])
    """
    if not (request_video or request_audio):
        raise ValueError("request video, audio or both")
    has_video = request_video and meta.video_num_frames is not None
    has_audio = request_audio and meta.audio_sample_rate is not None
    if has_video:
        ranges = make(*stream_span(meta, "video"))
        return ranges, ranges if has_audio else None
    if has_audio:
        return None, make(*stream_span(meta, "audio"))
    raise LookupError("no video stream" if request_video else "no audio stream")


def stream_span(meta: AVMetadata, stream: Literal["video", "audio"]) -> tuple[float, float]:
    """``(start_s, duration_s)`` of the video or audio stream described by ``meta``.

    Raises:
      ValueError: the file has no such stream.

    >>> stream_span(AVMetadata(duration_s=2.0, audio_start_s=-0.02, audio_duration_s=2.02),
    ...             "audio")
    (-0.02, 2.02)
    """
    if stream == "video":
        start, dur = meta.video_start_s, meta.video_duration_s
    elif stream == "audio":
        start, dur = meta.audio_start_s, meta.audio_duration_s
    else:
        raise ValueError(f"stream must be 'video' or 'audio', got {stream!r}")
    if start is None or dur is None:
        raise ValueError(f"the file has no {stream} stream")
    return float(start), float(dur)


def _check(num_clips: int, clip_duration_s: float) -> None:
    if num_clips < 1 or not clip_duration_s > 0:
        raise ValueError(
            f"need num_clips >= 1 and clip_duration_s > 0, got {num_clips} and {clip_duration_s}"
        )


def uniform_clip_ranges(
    start_s: float, duration_s: float, num_clips: int, clip_duration_s: float
) -> list[tuple[float, float]]:
    """``num_clips`` ranges of ``clip_duration_s`` evenly spread over ``[start_s, start_s +
    duration_s)``: the first starts at ``start_s``, the last ends at the end. A clip longer
    than the media is cut to the whole media.

    >>> uniform_clip_ranges(0.0, 10.0, 3, 2.0)
    [(0.0, 2.0), (4.0, 6.0), (8.0, 10.0)]
    """
    _check(num_clips, clip_duration_s)
    length = min(clip_duration_s, duration_s)
    starts = np.linspace(start_s, start_s + duration_s - length, num_clips)
    return [(float(s), float(s) + length) for s in starts]


def random_clip_ranges(
    start_s: float,
    duration_s: float,
    num_clips: int,
    clip_duration_s: float,
    rng: np.random.Generator,
) -> list[tuple[float, float]]:
    """``num_clips`` ranges of ``clip_duration_s`` with starts drawn uniformly from ``rng``
    (sorted by start). The only randomness is ``rng``; pass the sample's generator.

    >>> r = random_clip_ranges(0.0, 10.0, 2, 2.0, np.random.default_rng(0))
    >>> all(0.0 <= s and e <= 10.0 and abs(e - s - 2.0) < 1e-9 for s, e in r)
    True
    """
    _check(num_clips, clip_duration_s)
    length = min(clip_duration_s, duration_s)
    starts = np.sort(rng.uniform(start_s, start_s + duration_s - length, size=num_clips))
    return [(float(s), float(s) + length) for s in starts]


def uniform_frame_ranges(num_frames: int, n: int) -> list[tuple[int, int]]:
    """``n`` zero-length frame ranges ``(i, i)`` (one frame each, in either ``range_end``
    mode) at the evenly spaced frame numbers ``round(linspace(0, num_frames - 1, n))``; use
    with ``video_unit="frames"``.

    >>> uniform_frame_ranges(10, 4)
    [(0, 0), (3, 3), (6, 6), (9, 9)]
    """
    if n < 1 or num_frames < 1:
        raise ValueError(f"need n >= 1 and num_frames >= 1, got {n} and {num_frames}")
    idx = np.round(np.linspace(0, num_frames - 1, n)).astype(np.int64)
    return [(int(i), int(i)) for i in idx]
