"""Audio clips from an open container: seek, decode, resample, cut to exact sample counts.

:func:`decode_audio` decodes ``(start, end)`` ranges in seconds from the first audio stream of
an open container (an audio-only file or the audio of a video), converts them with
``av.AudioResampler`` to planar float32 at the requested rate and channel layout, and cuts
each clip to ``round((end - start) * rate)`` samples.

One of the ``fpipe.decode.av`` modules, the only ones that import ``av``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import av
import numpy as np
import torch

from fpipe.decode.av.probe import seek
from fpipe.decode.av.records import AVMetadata
from fpipe.decode.limits import limit_hint

__all__ = ["audio_layout", "count_audio_samples", "decode_audio"]

_EPS = 1e-6  # seconds
_LEAD_IN_S = 0.05  # audio decoded before a clip's start, so the resampler is settled there


def audio_layout(channels: int | str | None) -> str | None:
    """The FFmpeg channel layout for ``channels``: an int (1 = "mono", 2 = "stereo", n =
    FFmpeg's default n-channel layout), a layout name ("5.1", "stereo"...) kept as is, or None
    (keep the file's layout).

    >>> audio_layout(1), audio_layout(6), audio_layout("5.1"), audio_layout(None)
    ('mono', '6c', '5.1', None)
    """
    if channels is None or isinstance(channels, str):
        return channels
    n = int(channels)
    if n < 1:
        raise ValueError(f"audio_channels must be >= 1, got {channels!r}")
    return {1: "mono", 2: "stereo"}.get(n, f"{n}c")


def _frames(container, stream, meta: AVMetadata, start_s: float, at_start: bool):
    """Decoded audio frames from the packet at or before ``start_s``. A container still at
    its start is not sought for a range at the stream's start: decoders drop their priming
    samples only when decoding from the first packet (MP3 encoder delay)."""
    first_s = meta.audio_start_s or 0.0
    seek_s = max(start_s - _LEAD_IN_S, first_s)
    if not (at_start and seek_s <= first_s + _EPS):
        seek(container, stream, seek_s, first_s)
    first = True
    for frame in container.decode(stream):
        if first:
            first = False
            t = frame.time
            if t is not None and t > seek_s + _EPS and seek_s > first_s + _EPS:
                # landed after the requested position (a broken index): decode from the start
                seek(container, stream, first_s, first_s)
                yield from container.decode(stream)
                return
        yield frame


def decode_audio(
    container,
    meta: AVMetadata,
    ranges: Sequence[tuple[float, float]],
    *,
    sample_rate: int | None = None,
    channels: int | str | None = None,
    max_samples: int | None = None,
    bad=ValueError,
) -> tuple[list[torch.Tensor], list[tuple[float, float]], int]:
    """Decode audio ``ranges`` (seconds on the presentation timeline) from the first audio stream.

    A range inside the stream gives exactly ``round((end - start) * rate)`` samples at the
    output rate (the last few are zero when resampling or a coarse time base, such as
    Matroska's milliseconds, rounds the stream's length down). A range reaching past the
    stream's end stops at the end, one starting before the stream starts at its first sample,
    one starting after its end gives 0 samples; ``end=math.inf`` runs to the end.
    Each clip uses a fresh resampler, flushed at its end, so its samples are aligned with its
    start.

    Args:
      container: an open input container (:func:`fpipe.decode.av.probe.av_open`), not read
        yet (it is read from its start when the first range starts the stream).
      meta: the file's metadata (``audio_start_s``, ``audio_duration_s``...).
      sample_rate: output rate; None keeps the file's rate.
      channels: output channels or layout (see :func:`audio_layout`); None keeps the file's.
      max_samples: raise ``bad(reason)`` when one call decodes more samples than this (per
        channel, at the output rate); None: no cap. The hook for a decode-limit policy.
      bad: the exception factory for data errors (the caller's, naming its file and key).

    Returns:
      ``(clips, stamps, frames_decoded)``: per range a ``float32 [channels, samples]`` tensor
      in ``[-1, 1]`` and the ``(start, end)`` seconds of its first sample and just past its
      last; then the number of audio frames (codec packets) decoded.
    """
    stream = container.streams.audio[0]
    rate = int(sample_rate or meta.audio_sample_rate or stream.codec_context.sample_rate)
    layout = audio_layout(channels)
    nch = av.AudioLayout(layout).nb_channels if layout else int(meta.audio_channels or 1)
    a_start = meta.audio_start_s or 0.0
    a_end = a_start + (meta.audio_duration_s or 0.0)
    # stream times are rounded to the time base (Matroska: 1 ms): tolerate that at the end
    tol = 2 * float(stream.time_base) + 2.0 / rate
    clips, stamps, decoded, total = [], [], 0, 0
    for i, (start, end) in enumerate(ranges):
        start = max(start, a_start)  # nothing before the first sample (priming included)
        if start >= a_end - _EPS:  # after the end of the stream
            clips.append(torch.zeros((nch, 0), dtype=torch.float32))
            stamps.append((a_end, a_end))
            continue
        resampler = av.AudioResampler(format="fltp", layout=layout, rate=rate)
        chunks: list[np.ndarray] = []
        t0 = None
        frames = _frames(container, stream, meta, start, at_start=i == 0)
        for frame in frames:
            decoded += 1
            t = frame.time if frame.time is not None else start
            frame_end = t + frame.samples / frame.sample_rate
            if frame_end < start - _LEAD_IN_S:  # well before the clip
                continue
            if t0 is None:
                t0 = t
            chunks.extend(f.to_ndarray() for f in resampler.resample(frame))
            if max_samples is not None and total + sum(c.shape[1] for c in chunks) > max_samples:
                raise bad(
                    f"decoded more than max_audio_samples={max_samples} audio samples per "
                    f"channel ({limit_hint('max_audio_samples')})"
                )
            if frame_end >= end:
                break
        frames.close()  # now, while the container is open (see av_video._Cursor.close)
        chunks.extend(f.to_ndarray() for f in resampler.resample(None))
        data = np.concatenate(chunks, axis=1) if chunks else np.zeros((nch, 0), np.float32)
        total += data.shape[1]
        if t0 is None:
            t0 = max(start, a_start)
        i0 = 0 if start <= t0 else int(round((start - t0) * rate))
        if math.isinf(end):
            clip = data[:, i0:]
        else:
            n = max(int(round((end - max(start, t0)) * rate)), 0)
            clip = data[:, i0 : i0 + n]
            if clip.shape[1] < n and end <= a_end + tol:  # rounding at the stream end
                clip = np.pad(clip, ((0, 0), (0, n - clip.shape[1])))
        clip = np.ascontiguousarray(clip, dtype=np.float32)
        clips.append(torch.from_numpy(clip))
        stamps.append((t0 + i0 / rate, t0 + (i0 + clip.shape[1]) / rate))
    return clips, stamps, decoded


def count_audio_samples(container) -> int:
    """Samples per channel in the first audio stream of an open container, counted by
    decoding it all (the number ``frame.samples`` adds up to; a stream's header or duration
    can be a few codec frames off). Reads the container to its end."""
    stream = container.streams.audio[0]
    return sum(frame.samples for frame in container.decode(stream))
