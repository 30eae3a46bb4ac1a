"""Video clips from an open container: keyframe seeks, frame-accurate numbering, range selection.

:func:`decode_video` decodes a list of ranges from the first video stream of an open container,
in seconds (presentation time) or in frames (frame ``n`` is the ``n``-th decoded frame in
presentation order, on any container: variable frame rate, gaps in timestamps, millisecond
time bases). Both units seek by keyframe: the stored keyframe times say where to seek, and the
stored keyframe frame numbers (:attr:`AVMetadata.keyframe_frames`) say which frame number the
keyframe has, so counting decoded frames from there gives exact frame numbers without decoding
from the start.

Range semantics (``range_end``), with ``pos`` the frame's pts in seconds or its number:

* ``"exclusive"`` (default): the frames with ``start <= pos < end``; a range holding none
  (zero-length, or shorter than a frame) gives the frame on screen at ``start``;
* ``"inclusive"`` (Megatron-Energon's): the frame on screen at ``start``, then every frame
  with ``start < pos <= end``.

A range starting at or after the end of the stream gives no frame. One of the
``fpipe.decode.av`` modules, the only ones that import ``av``.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Sequence
from typing import Literal

import av
import numpy as np
import torch
from av.video.reformatter import VideoReformatter

from fpipe.decode.av._skipping import (
    SKIPPING_CODECS,
    SKIPPING_FORMATS,
    SkipUnsafe,
    frames_skipping,
)
from fpipe.decode.av.probe import seek
from fpipe.decode.av.records import AVMetadata
from fpipe.decode.limits import limit_hint

__all__ = ["RangeEnd", "VideoUnit", "decode_video"]

#: Unit of video ranges: presentation time in seconds, or frame numbers.
VideoUnit = Literal["seconds", "frames"]
#: Whether a frame exactly at a range's end belongs to it (see the module docstring).
RangeEnd = Literal["exclusive", "inclusive"]

_EPS = 1e-6  # seconds; absorbs float rounding of pts * time_base and of requested ranges
_Item = tuple[int, float, "av.VideoFrame"]  # (frame number, pts seconds, frame)


class _Cursor:
    """Decoded frames of one stream with their frame numbers, one frame of lookahead, and the
    choice between continuing and seeking for each range.

    ``pos(item)`` is the position ranges are given in (frame number or pts seconds); ``prev``
    is the last frame consumed (the candidate "frame on screen" for the next range),
    ``pending`` a frame pulled but not consumed (it lies after the last range's end).
    """

    def __init__(
        self, container, meta: AVMetadata, unit: VideoUnit, max_frames, bad, ranges, skip: bool
    ):
        self.container, self.stream, self.meta = container, container.streams.video[0], meta
        self.max_frames, self.bad = max_frames, bad
        self.frames = unit == "frames"
        self.eps = 0.5 if self.frames else _EPS  # half a frame number, or float rounding
        self.key_times, self.key_numbers = _keyframes(meta, self.frames)
        self.key_pos = self.key_numbers if self.frames else self.key_times
        if self.frames:
            self.stop = float(meta.video_num_frames or 0)
        else:
            self.stop = (meta.video_start_s or 0.0) + (meta.video_duration_s or 0.0) - _EPS
        self.decoded = self.skipped = 0
        self.windows = _windows(ranges) if skip else None
        formats = set(container.format.name.split(","))
        if self.stream.codec_context.name not in SKIPPING_CODECS or not formats & SKIPPING_FORMATS:
            self.windows = None
        self.it: Iterator[_Item] | None = None
        self.pending: _Item | None = None
        self.prev: _Item | None = None

    def pos(self, item: _Item) -> float:
        return item[0] if self.frames else item[1]

    def close(self) -> None:
        """Finish the frame generator now, while its container is open: a suspended
        generator finalized later (after the container closed, or in a forked child) makes
        FFmpeg touch freed memory."""
        if self.it is not None:
            self.it.close()
            self.it = None

    def position_for(self, lo: float) -> None:
        """Seek to the last keyframe at or before ``lo``, unless decoding forward from the
        current position reaches ``lo`` without passing a later keyframe or a used frame."""
        k = max(bisect.bisect_right(self.key_pos, lo + self.eps / 2) - 1, 0)
        here = self.pending if self.pending is not None else self.prev
        fresh = self.prev is None or self.pos(self.prev) < lo - self.eps
        ended = self.it is None and self.pending is None
        if ended or here is None or not fresh or self.key_pos[k] > self.pos(here) + self.eps / 2:
            self.close()
            self.it = self._frames(self.key_times[k], self.key_numbers[k])
            self.pending = self.prev = None

    def _frames(self, key_s: float, number: int) -> Iterator[_Item]:
        stream, meta = self.stream, self.meta
        seek(self.container, stream, key_s, meta.video_start_s or 0.0)
        n, prev_t, started = number, None, False
        if self.windows is None:
            source = ((frame.time, frame) for frame in self.container.decode(stream))
        else:
            source = frames_skipping(self.container, stream, key_s, self._unneeded(number))
        for t, frame in source:
            if frame is None:
                self.skipped += 1
            else:
                self.decoded += 1
            if self.max_frames is not None and self.decoded > self.max_frames:
                raise self.bad(
                    f"decoded more than max_video_frames={self.max_frames} video frames "
                    f"({limit_hint('max_video_frames')})"
                )
            if t is None:  # no pts: one frame period after the previous one
                t = key_s if prev_t is None else prev_t + 1.0 / (meta.video_fps or 1.0)
            prev_t = t
            if not started:
                if t < key_s - _EPS:  # before the keyframe: numbered before it, skip
                    continue
                if t > key_s + _EPS and key_s > (meta.video_start_s or 0.0) + _EPS:
                    # the demuxer landed after the keyframe (a broken index): decode from
                    # the first frame instead of returning wrong frame numbers
                    yield from self._frames(meta.video_start_s or 0.0, 0)
                    return
                started = True
            yield n, t, frame
            n += 1

    def _unneeded(self, number: int):
        """``unneeded(t, offset, next_t)`` of :func:`frames_skipping` for a decode from the
        keyframe numbered ``number``: a frame is needed inside a range's window, or where it is
        the frame on screen at a window's start (the next frame comes after that start)."""
        starts, ends = self.windows
        eps = self.eps

        def unneeded(t: float, offset: int, next_t: float) -> bool:
            if self.frames:
                pos, next_pos = float(number + offset), float(number + offset + 1)
            else:
                pos, next_pos = t, next_t
            i = bisect.bisect_right(starts, pos + eps)  # the first window starting after pos
            if i and pos <= ends[i - 1] + eps:
                return False
            return not (i < len(starts) and next_pos > starts[i] + eps)

        return unneeded

    def next(self) -> _Item | None:
        if self.pending is not None:
            item, self.pending = self.pending, None
            return item
        item = next(self.it, None) if self.it is not None else None
        if item is None:
            self.it = None
        return item

    def select(self, lo: float, hi: float, inclusive: bool) -> list[_Item]:
        """Consume the frames of one range (see the module docstring)."""
        eps = self.eps
        out: list[_Item] = []
        before = self.prev  # the last frame before `lo`
        while True:
            item = self.next()
            if item is None:
                break
            p = self.pos(item)
            if p > hi + eps or (not inclusive and p >= hi - eps):
                self.pending = item
                break
            self.prev = item
            if p >= lo - eps:
                out.append(item)
            else:
                before = item
        if not out or self.pos(out[0]) > lo + eps:  # no frame starts at `start`
            pending = self.pending
            if not out and pending is not None and self.pos(pending) <= lo + eps:
                out = [pending]  # a zero-length range at this frame
            elif (inclusive or not out) and before is not None:
                out = [before, *out]  # the frame on screen at `start`
        return out


def _windows(ranges) -> tuple[list[float], list[float]]:
    """Overlapping ranges merged, as ``(starts, ends)``."""
    starts: list[float] = []
    ends: list[float] = []
    for lo, hi in sorted(ranges):
        if starts and lo <= ends[-1]:
            ends[-1] = max(ends[-1], hi)
        else:
            starts.append(lo)
            ends.append(hi)
    return starts, ends


def _keyframes(meta: AVMetadata, frames: bool) -> tuple[list[float], list[int]]:
    """Keyframe times and frame numbers. Without numbers, seeks in seconds still use every
    keyframe (numbers unused, -1) and seeks in frames start from the first frame."""
    times = list(meta.keyframes_s)
    numbers = list(meta.keyframe_frames)
    if times and len(numbers) == len(times):
        return times, numbers
    if times and not frames:
        return times, [-1] * len(times)
    return [meta.video_start_s or 0.0], [0]


class _ToRGB:
    """Frames to RGB arrays through two reused FFmpeg scalers: one scales in the frame's own
    pixel format (bilinear), one converts to RGB. ``VideoFrame.reformat`` and ``to_ndarray``
    make a new scaler per call, which sets swscale up again for every frame (as costly as the
    conversion itself), and let swscale choose its own thread count; these scalers run in the
    calling thread, as the codecs do by default (``av_open``). The pixels are the same."""

    def __init__(self) -> None:
        self.scaler, self.rgb = VideoReformatter(), VideoReformatter()

    def into(self, out: np.ndarray, frame) -> None:
        """Write ``frame`` scaled to ``out``'s ``[h, w, 3]`` size into ``out``."""
        h, w = out.shape[:2]
        if (frame.width, frame.height) != (w, h):
            frame = self.scaler.reformat(
                frame, width=w, height=h, interpolation="BILINEAR", threads=1
            )
        plane = self.rgb.reformat(frame, format="rgb24", threads=1).planes[0]
        rows = np.frombuffer(plane, np.uint8).reshape(-1, plane.line_size)  # padded rows
        out[...] = rows[:h, : w * 3].reshape(h, w, 3)


def _to_clip(frames: list[_Item], stream, meta: AVMetadata, size, to_rgb: _ToRGB):
    if size is not None:
        w, h = int(size[0]), int(size[1])
    else:
        w, h = stream.codec_context.width, stream.codec_context.height
    arr = np.empty((len(frames), h, w, 3), np.uint8)
    for i, (_, _, frame) in enumerate(frames):
        to_rgb.into(arr[i], frame)
    # [T, 3, H, W] over the [T, H, W, 3] buffer: torch.channels_last memory, no copy
    clip = torch.from_numpy(arr).permute(0, 3, 1, 2)
    times = torch.tensor([t for _, t, _ in frames], dtype=torch.float64)
    if frames:
        _, last_t, last = frames[-1]
        dur = float(last.duration * last.time_base) if last.duration else 0.0
        dur = dur or 1.0 / (meta.video_fps or 1.0)
        stamp = (frames[0][1], last_t + dur)
    else:
        stamp = (math.nan, math.nan)
    return clip, stamp, times


def decode_video(
    container,
    meta: AVMetadata,
    ranges: Sequence[tuple[float, float]],
    *,
    unit: VideoUnit = "seconds",
    range_end: RangeEnd = "exclusive",
    size: tuple[int, int] | None = None,
    max_frames: int | None = None,
    bad=ValueError,
    skip_unneeded: bool = True,
) -> tuple[list, list, list, int, int]:
    """Decode ``ranges`` (checked ``(start, end)`` pairs in ``unit``) from the first video stream.

    Ranges are decoded in start order (identical ranges once) and returned in the given order.
    For each range the decoder seeks to the last keyframe at or before its start, unless it is
    already positioned between that keyframe and the start (adjacent or nearby ranges continue
    decoding instead of seeking back).

    Args:
      container: an open input container (:func:`fpipe.decode.av.probe.av_open`).
      meta: the file's metadata; frame numbers need ``keyframe_frames`` (without them the
        decoder counts from the first frame).
      size: ``(width, height)`` to scale frames to, or None.
      max_frames: raise ``bad(reason)`` after decoding more frames than this in this call.
      bad: the exception factory for data errors (the caller's, naming its file and key).
      skip_unneeded: pass over the non-reference frames no range needs (see below).

    Frames no kept frame depends on (non-reference H.264/HEVC frames more than two frames
    from every range) are passed over undecoded (:mod:`fpipe.decode.av._skipping`); the kept
    frames are those of a full decode.

    Returns:
      ``(clips, stamps, frame_times, frames_decoded, frames_skipped)``: per range a ``uint8
      [T, 3, H, W]`` tensor, ``(start, end)`` seconds it covers and ``float64 [T]`` pts; then
      the number of frames decoded (lead-ins included) and of frames passed over.
    """
    wanted = sorted(set(ranges))
    decoded = skipped = 0
    done: dict[tuple[float, float], tuple] = {}
    for skip in (True, False) if skip_unneeded else (False,):  # False: where unsafe
        cur = _Cursor(container, meta, unit, max_frames, bad, wanted, skip)
        cur.decoded, cur.skipped = decoded, skipped
        try:
            done = _decode_ranges(cur, wanted, inclusive=range_end == "inclusive", size=size)
            break
        except SkipUnsafe:
            decoded, skipped = cur.decoded, cur.skipped
        finally:
            cur.close()
    if not done:
        return [], [], [], 0, 0
    clips, stamps, times = zip(*(done[r] for r in ranges))
    return list(clips), list(stamps), list(times), cur.decoded, cur.skipped


def _decode_ranges(cur: _Cursor, wanted, *, inclusive: bool, size) -> dict:
    to_rgb = _ToRGB()
    done: dict[tuple[float, float], tuple] = {}
    for lo, hi in wanted:
        frames: list[_Item] = []
        if lo < cur.stop:  # a range starting after the last frame is empty
            cur.position_for(lo)
            frames = cur.select(lo, hi, inclusive)
        if any(frame is None for _, _, frame in frames):
            raise SkipUnsafe(f"a skipped frame is in range {(lo, hi)}")
        done[(lo, hi)] = _to_clip(frames, cur.stream, cur.meta, size, to_rgb)
    return done
