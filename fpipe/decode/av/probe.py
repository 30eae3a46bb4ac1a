"""Opening containers and reading their stream metadata with PyAV (no frame is decoded).

* :func:`av_open` opens every container fpipe reads (bytes, a binary file-like object or a
  path) with codec threads turned off, and turns open failures into :class:`BadSampleError`.
* :func:`probe_av` demuxes every packet once and returns an :class:`AVMetadata`: stream
  times, frame count, keyframe times and the frame number of each keyframe (what frame-accurate
  seeks need), for ``fpipe prepare`` to store in the index.

One of the ``fpipe.decode.av`` modules, the only ones that import ``av``.
"""

from __future__ import annotations

import bisect
import io
import os
from typing import BinaryIO, Union

import av
import av.error

from fpipe.core.errors import BadSampleError, error_text
from fpipe.decode.av.records import AVMetadata

__all__ = ["AVSource", "av_open", "probe_av", "probe_container", "seek"]

#: What :func:`av_open` accepts: encoded bytes, a seekable binary file-like object, or a path.
AVSource = Union[bytes, bytearray, memoryview, str, os.PathLike, BinaryIO]

_EPS = 1e-6  # seconds; absorbs float rounding of pts * time_base


def av_open(source: AVSource, *, path: str = "", key: str = "", video_threads: int = 1):
    """Open a container for reading, with codec threads off. The only opener fpipe uses.

    Every stream's codec context gets ``thread_type = "NONE"`` and ``thread_count = 1``
    before anything is decoded, so FFmpeg never starts decoder threads, unless
    ``video_threads`` > 1 asks for that many frame threads in the video streams (see
    :mod:`fpipe.decode.av._threads`: only where a process has spare cores; the threads end
    when the container closes). The reasons for no threads by default:

    * fpipe decodes in forked torch DataLoader workers. A process that forks while FFmpeg
      threads hold locks (for example a decoder used once in the main process for a preview)
      gives children that can deadlock on those locks; without threads there is nothing to
      inherit.
    * closing a container whose frame threads are still running can deadlock in FFmpeg.
    * parallelism comes from the workers: N workers each starting "auto" (one per core)
      threads oversubscribe the CPU and make throughput worse, not better.

    Args:
      source: encoded bytes, a seekable binary file-like object (read from its current
        position; :class:`~fpipe.decode.av.AVDecoder` rewinds it), or a filesystem path.
      path, key: the file and sample key named in errors (``path`` defaults to ``source``
        when that is a path).
      video_threads: FFmpeg threads per video stream (1: none).

    Returns:
      An ``av`` input container; use it as a context manager to close it.

    Raises:
      BadSampleError: the data is not a container FFmpeg can open (corrupt, truncated,
        unsupported, missing file).

    Example:
      >>> with av_open(video_bytes, key="shard-0/000042") as container:  # doctest: +SKIP
      ...     print(container.streams.video[0].average_rate)
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        file = io.BytesIO(source)
    elif isinstance(source, (str, os.PathLike)):
        file = os.fspath(source)
        path = path or file
    else:
        file = source
    try:
        container = av.open(file, mode="r")
    except av.error.FFmpegError as e:
        raise BadSampleError(path, key, f"cannot open as audio/video: {error_text(e)}") from e
    try:
        for stream in container.streams:
            ctx = stream.codec_context
            if ctx is None:
                continue
            if video_threads > 1 and stream.type == "video":
                ctx.thread_type = "AUTO"  # frame threads (slices too): the same frames
                ctx.thread_count = video_threads
            else:
                ctx.thread_type = "NONE"
                ctx.thread_count = 1
    except Exception:
        container.close()
        raise
    return container


def seek(container, stream, time_s: float, first_s: float) -> None:
    """Seek ``stream`` to the packet at or before ``time_s`` seconds. Where the demuxer
    refuses (FFmpeg's FLAC demuxer near the end of a short file without a seek table), seek to
    the stream's first packet at ``first_s`` instead: decoding forward is slower but right."""
    try:
        container.seek(round(time_s / stream.time_base), backward=True, stream=stream)
    except av.error.FFmpegError:
        if time_s <= first_s:
            raise
        container.seek(round(first_s / stream.time_base), backward=True, stream=stream)


def _video_fields(vs, pts: list[int], ends: list[int], keys: list[int]) -> dict:
    """AVMetadata fields of a video stream from its packets' pts, ends and keyframe pts."""
    tb = vs.time_base
    pts.sort()
    rate = vs.average_rate or vs.guessed_rate
    fps = float(rate) if rate else None
    start = float(pts[0] * tb)
    end = float(max(ends) * tb)
    if end <= float(pts[-1] * tb):  # packets without durations: the last frame lasts 1/fps
        end = float(pts[-1] * tb) + (1 / fps if fps else 0.0)
    if fps is None:
        fps = len(pts) / (end - start) if end > start else None
    elif abs(float((pts[-1] - pts[0]) * tb) - (len(pts) - 1) / fps) <= 0.5 * float(tb) + _EPS:
        # every frame on the 1/fps grid up to rounding in the time base (e.g. Matroska's
        # milliseconds): take the exact end instead of one rounded twice
        end = start + len(pts) / fps
    uniq = sorted(set(keys))
    ctx = vs.codec_context
    return dict(
        video_start_s=start,
        video_duration_s=end - start,
        video_fps=fps,
        video_num_frames=len(pts),
        width=ctx.width,
        height=ctx.height,
        video_codec=ctx.name,
        keyframes_s=tuple(float(k * tb) for k in uniq),
        # frames before each keyframe in presentation order = its rank among all pts
        keyframe_frames=tuple(bisect.bisect_left(pts, k) for k in uniq),
    )


def probe_container(container, *, path: str = "", key: str = "") -> AVMetadata:
    """:func:`probe_av` on an open container (reads it from the start to the end)."""
    vs = container.streams.video[0] if container.streams.video else None
    aus = container.streams.audio[0] if container.streams.audio else None
    if vs is None and aus is None:
        raise BadSampleError(path, key, "no audio or video stream")
    v_pts: list[int] = []
    v_ends: list[int] = []
    keys: list[int] = []
    a_first = a_end = None
    try:
        for packet in container.demux([s for s in (vs, aus) if s is not None]):
            ts = packet.pts if packet.pts is not None else packet.dts
            if ts is None:  # flush packet at the end of a stream
                continue
            end = ts + (packet.duration or 0)
            if vs is not None and packet.stream_index == vs.index:
                if packet.size == 0 or packet.is_discard:  # decodes to no frame
                    continue
                v_pts.append(ts)
                v_ends.append(end)
                if packet.is_keyframe:
                    keys.append(ts)
            else:
                a_first = ts if a_first is None else min(a_first, ts)
                a_end = end if a_end is None else max(a_end, end)
    except av.error.FFmpegError as e:
        raise BadSampleError(path, key, f"corrupt audio/video data: {e}") from e
    fields: dict = {}
    spans: list[tuple[float, float]] = []
    if vs is not None:
        if not v_pts:
            raise BadSampleError(path, key, "video stream has no frames")
        fields.update(_video_fields(vs, v_pts, v_ends, keys))
        v0 = fields["video_start_s"]
        spans.append((v0, v0 + fields["video_duration_s"]))
    if aus is not None and a_first is not None:
        tb = aus.time_base
        # the stream's start time skips priming samples the demuxer marks for discarding
        # (AAC in MP4, Opus pre-skip); it may be negative (audio before the video)
        first = aus.start_time if aus.start_time is not None else a_first
        start, end = float(first * tb), float(a_end * tb)
        spans.append((start, end))
        ctx = aus.codec_context
        fields.update(
            audio_codec=ctx.name,
            audio_sample_rate=ctx.sample_rate,
            audio_channels=ctx.layout.nb_channels,
            audio_start_s=start,
            audio_duration_s=end - start,
        )
    duration = max(e for _, e in spans) - min(s for s, _ in spans)
    return AVMetadata(duration_s=duration, **fields)


def probe_av(data: AVSource, *, path: str = "", key: str = "") -> AVMetadata:
    """Read the stream metadata and keyframes of a file, decoding no frame.

    Demuxes every packet once (it reads the whole file but decodes nothing). The frame count
    is the number of video packets that decode to a frame (empty and discarded packets are
    not counted); the video runs from the first pts to the end of its last frame (pts +
    duration); keyframes are the packets flagged ``is_keyframe``, each with its frame number
    in presentation order. Audio starts at the stream's start time and ends at the end of its
    last packet.

    Raises:
      BadSampleError: the file cannot be opened or demuxed, or has no audio/video stream.

    Example:
      >>> meta = probe_av(video_bytes, key="000042")  # doctest: +SKIP
      >>> meta.video_num_frames, meta.keyframes_s[:3], meta.keyframe_frames[:3]  # doctest: +SKIP
      (240, (0.0, 2.0, 4.0), (0, 48, 96))
    """
    with av_open(data, path=path, key=key) as container:
        return probe_container(container, path=path, key=key)
