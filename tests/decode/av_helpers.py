"""Write short synthetic videos and audio with PyAV for tests (and for others' tests to import).

Every video frame encodes its own index in its pixel values, so a test can tell which frames a
clip returned even after lossy compression and resizing: the top half of the frame is a flat gray
level ``(i // 16) * 16 + 8`` and the bottom half ``(i % 16) * 16 + 8`` (indices ``0..255``).
:func:`frame_index` reads the index back from a decoded ``[3, H, W]`` uint8 frame.

Audio is a sine tone (440 Hz by default) in every channel, with channel ``c`` scaled by
``1 / (c + 1)`` so channel order can be checked.

Example:
    >>> data = write_video(None, num_frames=24, fps=12)          # mp4 bytes
    >>> path = write_video(tmp_path / "a.mkv", num_frames=24)     # doctest: +SKIP
"""

from __future__ import annotations

import io
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

__all__ = [
    "frame_index",
    "index_frame",
    "sine",
    "write_audio",
    "write_video",
]


def index_frame(i: int, width: int, height: int) -> np.ndarray:
    """An RGB uint8 ``[height, width, 3]`` frame whose pixel values encode ``i`` (0..255)."""
    if not 0 <= i < 256:
        raise ValueError(f"frame index {i} does not fit the 0..255 pixel code")
    img = np.empty((height, width, 3), np.uint8)
    img[: height // 2] = (i // 16) * 16 + 8
    img[height // 2 :] = (i % 16) * 16 + 8
    return img


def frame_index(frame) -> int:
    """Read back the index of a decoded frame, given as a ``[3, H, W]`` uint8 tensor or array."""
    arr = np.asarray(frame, dtype=np.float64)
    h = arr.shape[-2]
    q = max(1, h // 8)  # stay away from the block boundary between the two halves
    top = arr[..., q : h // 2 - q, :].mean()
    bottom = arr[..., h // 2 + q : h - q, :].mean()
    return int(round((top - 8) / 16)) * 16 + int(round((bottom - 8) / 16))


def sine(num_samples: int, sample_rate: int, channels: int, freq: float = 440.0) -> np.ndarray:
    """A float32 ``[channels, num_samples]`` sine tone; channel ``c`` has amplitude 0.5/(c+1)."""
    t = np.arange(num_samples) / sample_rate
    tone = np.sin(2 * np.pi * freq * t)
    return np.stack([0.5 / (c + 1) * tone for c in range(channels)]).astype(np.float32)


def _add_audio_stream(container, codec: str, sample_rate: int, channels: int):
    layout = {1: "mono", 2: "stereo"}[channels]
    stream = container.add_stream(codec, rate=sample_rate, layout=layout)
    return stream


def _mux_audio(container, stream, samples: np.ndarray, sample_rate: int, chunk: int = 1024):
    channels = samples.shape[0]
    layout = {1: "mono", 2: "stereo"}[channels]
    resampler = av.AudioResampler(
        format=stream.codec_context.format, layout=layout, rate=sample_rate
    )
    for start in range(0, samples.shape[1], chunk):
        part = np.ascontiguousarray(samples[:, start : start + chunk])
        frame = av.AudioFrame.from_ndarray(part, format="fltp", layout=layout)
        frame.sample_rate = sample_rate
        frame.pts = start
        frame.time_base = Fraction(1, sample_rate)
        for out in resampler.resample(frame):
            container.mux(stream.encode(out))
    for out in resampler.resample(None):
        container.mux(stream.encode(out))
    container.mux(stream.encode(None))


def write_video(
    target: str | Path | None,
    *,
    num_frames: int = 48,
    fps: int = 24,
    width: int = 64,
    height: int = 48,
    codec: str = "mpeg4",
    container_format: str | None = None,
    gop: int = 12,
    options: dict[str, str] | None = None,
    audio_codec: str | None = None,
    audio_sample_rate: int = 16000,
    audio_channels: int = 1,
    audio_seconds: float | None = None,
    frame_fn=None,
    pts=None,
    audio_samples: np.ndarray | None = None,
) -> bytes | Path:
    """Encode a video whose frame ``i`` encodes ``i`` (see module docstring).

    Args:
      target: a path to write, or None to return the encoded bytes.
      num_frames, fps, width, height: the video stream; frame ``i`` has pts ``i / fps`` seconds.
      codec: video encoder (``mpeg4``, ``libx264``, ``libvpx``...).
      container_format: e.g. ``"mp4"``, ``"matroska"``; defaults to the path's suffix, or mp4.
      gop: keyframe interval in frames (scene-cut keyframes are turned off where possible).
      options: extra encoder options.
      audio_codec: add a sine-tone audio stream with this encoder (``aac``, ``pcm_s16le``...).
      audio_sample_rate, audio_channels: the audio stream; its length is ``audio_seconds``
        (default: the video's duration ``num_frames / fps``).
      frame_fn: ``frame_fn(i, width, height) -> [H, W, 3] uint8``; default :func:`index_frame`.
      audio_samples: ``float32 [channels, n]`` to write instead of the sine tone.
      pts: the pts of each frame in units of ``1 / fps`` (default ``range(num_frames)``), for
        timestamp gaps, variable frame rates or a late first frame; strictly increasing.

    Returns:
      The bytes (``target`` None) or the path written.
    """
    frame_fn = frame_fn or index_frame
    buf = io.BytesIO() if target is None else None
    fmt = container_format or ("mp4" if target is None else None)
    with av.open(buf if target is None else str(target), "w", format=fmt) as out:
        opts = {"g": str(gop)}
        if codec == "libx264":
            opts.update({"sc_threshold": "0", "keyint_min": str(gop), "preset": "ultrafast"})
        elif codec == "mpeg4":
            opts.update({"sc_threshold": "1000000000"})
        opts.update(options or {})
        vstream = out.add_stream(codec, rate=fps, options=opts)
        vstream.width, vstream.height = width, height
        vstream.pix_fmt = "yuv420p"
        vstream.codec_context.gop_size = gop
        if codec == "mpeg4":
            vstream.codec_context.qmax = 4  # keep flat gray levels nearly exact
        astream = None
        if audio_codec is not None:
            astream = _add_audio_stream(out, audio_codec, audio_sample_rate, audio_channels)
        for i in range(num_frames):
            frame = av.VideoFrame.from_ndarray(frame_fn(i, width, height), format="rgb24")
            frame.pts = i if pts is None else int(pts[i])
            frame.time_base = Fraction(1, fps)
            for packet in vstream.encode(frame):
                out.mux(packet)
        for packet in vstream.encode(None):
            out.mux(packet)
        if astream is not None:
            seconds = num_frames / fps if audio_seconds is None else audio_seconds
            n = int(round(seconds * audio_sample_rate))
            if audio_samples is None:
                audio_samples = sine(n, audio_sample_rate, audio_channels)
            _mux_audio(out, astream, audio_samples, audio_sample_rate)
    return buf.getvalue() if target is None else Path(target)


def write_audio(
    target: str | Path | None,
    *,
    seconds: float = 1.0,
    sample_rate: int = 16000,
    channels: int = 1,
    codec: str = "pcm_s16le",
    container_format: str | None = None,
    samples: np.ndarray | None = None,
) -> bytes | Path:
    """Encode an audio-only file holding :func:`sine` (wav with pcm by default), or
    ``samples`` (``float32 [channels, n]``; then ``seconds`` and ``channels`` are ignored).

    Returns the bytes (``target`` None) or the path written.
    """
    buf = io.BytesIO() if target is None else None
    fmt = container_format or ("wav" if target is None else None)
    with av.open(buf if target is None else str(target), "w", format=fmt) as out:
        if samples is None:
            samples = sine(int(round(seconds * sample_rate)), sample_rate, channels)
        stream = _add_audio_stream(out, codec, sample_rate, samples.shape[0])
        _mux_audio(out, stream, samples, sample_rate)
    return buf.getvalue() if target is None else Path(target)
