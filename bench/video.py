"""Benchmark: seeking clips in a long video with :class:`fpipe.decode.av.AVDecoder`.

Writes (once, cached in the temp dir) a synthetic 10-minute 480p H.264 video at 24 fps with a
keyframe every 2 s (x264 ``ultrafast``, no scene-cut keyframes), then measures, in one run:

* ``early_clip_s``: decoding the 2-second clip at the start (median over ``--repeats``, the
  three clip positions interleaved, after one untimed warm-up clip);
* ``late_clip_s``: the 2-second clip at 90% of the video, with the keyframes from
  :func:`fpipe.decode.av.probe_av` (what ``fpipe prepare`` stores in the index);
* ``late_unaligned_clip_s``: the same one second later, so it starts mid keyframe interval;
* ``from_start_s``: the late clip decoded from the first frame (the same decoder given only
  the first keyframe, so it cannot seek past the start) for comparison;
* ``uniform_frames_decoded_fraction``: frames decoded by ``get_clips_uniform(4, 2.0)``
  divided by the frames in the video (a full decode is 1.0);
* ``late_vs_early_frame_seek_ratio``: the same clip length requested in frames
  (``video_unit="frames"``, frame-accurate: counted from the stored keyframe frame numbers),
  starting mid keyframe interval at 90% of the video, over the one at frame 0;
* ``audio_clip_ms``: a 3-second clip at 90% of a 10-minute 44.1 kHz stereo FLAC (written once,
  cached), with its probed metadata, resampled to 16 kHz mono (median); next to it the same at
  the start (``audio_late_vs_early_clip_ratio``).

Usage: ``python bench/video.py [--minutes 10] [--repeats 7] [--from-start-repeats 3]``.
Targets: ``late_vs_early_clip_ratio <= 3``, ``late_vs_early_frame_seek_ratio <= 3`` and
``uniform_frames_decoded_fraction <= 0.2``. The last line of output is one JSON object; it
records the load average, since the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import av
import msgspec
import numpy as np

from fpipe.decode.av.decoder import AVDecoder, probe_av

WIDTH, HEIGHT, FPS, GOP_S = 854, 480, 24, 2


def _texture(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """A smooth random picture in YUV420 planes, twice as wide as the frame (to pan over)."""
    w2 = 2 * WIDTH
    yy, xx = np.mgrid[0:HEIGHT, 0:w2].astype(np.float32)
    y = 128 + 50 * np.sin(xx / 37.0) * np.cos(yy / 23.0) + 30 * np.sin((xx + yy) / 91.0)
    y += rng.normal(0, 6, y.shape)  # some texture, so frames are not trivially cheap
    u = 128 + 40 * np.sin(xx[::2, ::2] / 53.0)
    v = 128 + 40 * np.cos(yy[::2, ::2] / 29.0)
    return tuple(np.clip(p, 0, 255).astype(np.uint8) for p in (y, u, v))


def write_long_video(path: Path, minutes: float) -> None:
    """Encode the synthetic video: a picture panning right, a keyframe every ``GOP_S`` s."""
    rng = np.random.default_rng(0)
    ty, tu, tv = _texture(rng)
    n = int(round(minutes * 60 * FPS))
    gop = GOP_S * FPS
    opts = {"preset": "ultrafast", "g": str(gop), "keyint_min": str(gop), "sc_threshold": "0"}
    tmp = path.with_suffix(".part.mp4")
    with av.open(str(tmp), "w") as out:
        stream = out.add_stream("libx264", rate=FPS, options=opts)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.codec_context.thread_type = "AUTO"  # encoding only: use every core
        for i in range(n):
            x = (i * 2) % WIDTH  # pan 2 px per frame (even, for the chroma planes)
            planes = np.concatenate(
                [
                    ty[:, x : x + WIDTH].reshape(-1),
                    tu[:, x // 2 : x // 2 + WIDTH // 2].reshape(-1),
                    tv[:, x // 2 : x // 2 + WIDTH // 2].reshape(-1),
                ]
            )
            frame = av.VideoFrame.from_ndarray(
                planes.reshape(HEIGHT * 3 // 2, WIDTH), format="yuv420p"
            )
            frame.pts, frame.time_base = i, Fraction(1, FPS)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    tmp.rename(path)


def write_long_flac(path: Path, minutes: float, rate: int = 44100) -> None:
    """Encode a stereo FLAC of ``minutes``: a tone with some noise, written 1 s at a time."""
    rng = np.random.default_rng(0)
    tmp = path.with_suffix(".part.flac")
    with av.open(str(tmp), "w", format="flac") as out:
        stream = out.add_stream("flac", rate=rate, layout="stereo")
        for sec in range(int(round(minutes * 60))):
            t = (sec * rate + np.arange(rate)) / rate
            tone = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(rate)
            x = np.stack([tone, 0.5 * tone]).astype(np.float32)
            frame = av.AudioFrame.from_ndarray(x, format="fltp", layout="stereo")
            frame.sample_rate, frame.pts, frame.time_base = rate, sec * rate, Fraction(1, rate)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    tmp.rename(path)


def _interleaved(fns: dict, repeats: int) -> tuple[dict, dict]:
    """Median seconds and last result of each ``fns[label]()``, the labels interleaved in
    every round so drifting machine load hits them alike."""
    times: dict = {k: [] for k in fns}
    results: dict = {}
    for _ in range(repeats):
        for label, fn in fns.items():
            seconds, results[label] = _timed(fn, 1)
            times[label].append(seconds)
    return {k: statistics.median(v) for k, v in times.items()}, results


def _timed(fn, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--clip-seconds", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--from-start-repeats", type=int, default=3)
    ap.add_argument("--uniform-clips", type=int, default=4)
    ap.add_argument("--cache-dir", default=tempfile.gettempdir())
    args = ap.parse_args()

    name = f"fpipe-bench-{WIDTH}x{HEIGHT}-{FPS}fps-gop{GOP_S}s-{args.minutes:g}min.mp4"
    path = Path(args.cache_dir) / name
    t = time.perf_counter()
    cached = path.exists()
    if not cached:
        write_long_video(path, args.minutes)
    create_s = time.perf_counter() - t
    data = path.read_bytes()

    probe_s, meta = _timed(lambda: probe_av(data, path=str(path)), 1)
    n_frames, duration = meta.video_num_frames, meta.video_duration_s
    clip = args.clip_seconds
    late = round(0.9 * duration, 6)
    print(
        f"video: {path} ({'cached' if cached else f'written in {create_s:.1f} s'}), "
        f"{len(data) / 1e6:.1f} MB, {meta.width}x{meta.height} {meta.video_codec}, "
        f"{duration:.1f} s, {n_frames} frames at {meta.video_fps:g} fps, "
        f"{len(meta.keyframes_s)} keyframes; probe (demux only) {probe_s:.2f} s"
    )
    print(
        f"clips of {clip:g} s: early at 0 s, late at {late:g} s (and +1 s, mid interval); "
        f"repeats {args.repeats} (from start: {args.from_start_repeats}); "
        f"uniform: {args.uniform_clips} clips"
    )

    def clip_at(start: float, metadata=meta):
        dec = AVDecoder(data, metadata=metadata, path=str(path))
        out = dec.get_clips([(start, start + clip)])
        assert out.video_clips[0].shape[0] == round(clip * FPS), out.video_clips[0].shape
        return dec.frames_decoded

    clip_at(0.0)  # warm-up (allocator, page faults, codec init), not timed
    positions = {"early": 0.0, "late": late, "unaligned": late + 1.0}
    med, counts = _interleaved(
        {k: (lambda start=start: clip_at(start)) for k, start in positions.items()}, args.repeats
    )
    early_s, late_s, unaligned_s = med["early"], med["late"], med["unaligned"]
    early_n, late_n, unaligned_n = counts["early"], counts["late"], counts["unaligned"]
    no_keys = msgspec.structs.replace(
        meta, keyframes_s=meta.keyframes_s[:1], keyframe_frames=meta.keyframe_frames[:1]
    )
    from_start_s, from_start_n = _timed(
        lambda: clip_at(late, metadata=no_keys), args.from_start_repeats
    )

    def uniform():
        dec = AVDecoder(data, metadata=meta, path=str(path))
        out = dec.get_clips_uniform(args.uniform_clips, clip)
        return out.video_frames_decoded

    uniform_s, uniform_n = _timed(uniform, args.repeats)

    # frames unit: a frame-accurate clip of the same length, late and mid keyframe interval
    n_clip = round(clip * FPS)
    late_frame = round(0.9 * n_frames) + GOP_S * FPS // 2

    def frames_at(first: int):
        dec = AVDecoder(data, metadata=meta, path=str(path))
        out = dec.get_clips([(first, first + n_clip)], video_unit="frames")
        assert out.video_clips[0].shape[0] == n_clip, out.video_clips[0].shape
        return dec.frames_decoded

    med, got = _interleaved(
        {f"frames@{f}": (lambda f=f: frames_at(f)) for f in (0, late_frame)}, args.repeats
    )
    counts.update(got)
    frames_early_s, frames_late_s = med["frames@0"], med[f"frames@{late_frame}"]

    # audio: a 3 s clip from a long FLAC
    flac = Path(args.cache_dir) / f"fpipe-bench-44k-stereo-{args.minutes:g}min.flac"
    if not flac.exists():
        write_long_flac(flac, args.minutes)
    flac_data = flac.read_bytes()
    flac_meta = probe_av(flac_data, path=str(flac))
    audio_late = round(0.9 * flac_meta.audio_duration_s, 3)

    def audio_at(start: float):
        dec = AVDecoder(flac_data, metadata=flac_meta, path=str(flac))
        out = dec.get_clips(
            None,
            audio_clip_ranges=[(start, start + 3.0)],
            audio_sample_rate=16000,
            audio_channels=1,
        )
        assert out.audio_clips[0].shape == (1, 48000), out.audio_clips[0].shape
        return dec.audio_frames_decoded

    audio_at(0.0)  # warm-up
    med, got = _interleaved(
        {f"audio@{t}": (lambda t=t: audio_at(t)) for t in (0.0, audio_late)}, args.repeats
    )
    counts.update(got)
    audio_early_s, audio_late_s = med["audio@0.0"], med[f"audio@{audio_late}"]

    rows = [
        ("early clip", early_s, early_n),
        ("late clip", late_s, late_n),
        ("late clip, mid interval", unaligned_s, unaligned_n),
        ("late clip from start", from_start_s, from_start_n),
        (f"uniform {args.uniform_clips} clips", uniform_s, uniform_n),
        ("frames 0..", frames_early_s, counts["frames@0"]),
        (f"frames {late_frame}..", frames_late_s, counts[f"frames@{late_frame}"]),
        ("audio 3 s at 0 s (packets)", audio_early_s, counts["audio@0.0"]),
        (f"audio 3 s at {audio_late:g} s", audio_late_s, counts[f"audio@{audio_late}"]),
    ]
    for label, seconds, frames in rows:
        print(f"  {label:<26} {seconds * 1e3:9.1f} ms  {frames:6d} frames decoded")

    result = {
        "late_vs_early_clip_ratio": round(late_s / early_s, 3),
        "late_unaligned_vs_early_clip_ratio": round(unaligned_s / early_s, 3),
        "from_start_vs_early_clip_ratio": round(from_start_s / early_s, 3),
        "uniform_frames_decoded_fraction": round(uniform_n / n_frames, 4),
        "late_vs_early_frame_seek_ratio": round(frames_late_s / frames_early_s, 3),
        "audio_clip_ms": round(audio_late_s * 1e3, 2),
        "audio_late_vs_early_clip_ratio": round(audio_late_s / audio_early_s, 3),
        "frames_early_clip_s": round(frames_early_s, 4),
        "frames_late_clip_s": round(frames_late_s, 4),
        "early_clip_s": round(early_s, 4),
        "late_clip_s": round(late_s, 4),
        "from_start_s": round(from_start_s, 3),
        "uniform_clips_s": round(uniform_s, 4),
        "probe_s": round(probe_s, 3),
        "video_frames": n_frames,
        "video_seconds": round(duration, 3),
        "clip_seconds": clip,
        "uniform_clips": args.uniform_clips,
        "audio_seconds": round(flac_meta.audio_duration_s, 3),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
