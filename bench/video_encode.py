"""Benchmark: CPU per sample of :class:`fpipe.encode.video_task.VideoTaskEncoder` against a bare
PyAV loop doing the same decode, on generated 360p and 720p H.264 clips.

Writes (once, cached in the temp dir) 4 synthetic MP4s per resolution (640x360 and 1280x720,
8 s at 30 fps, a keyframe every 2 s, x264 ``ultrafast``: a textured picture panning right).
Each sample takes 16 frames at stride 4 from a start drawn from a seeded generator and makes
them 256x256. Measured in one process (no loader), as CPU seconds (``time.process_time``) per
sample, the median of ``--rounds`` interleaved rounds of ``--samples`` samples each:

* ``stock``: ``VideoTaskEncoder`` with default settings (torch's antialiased bilinear,
  ``float32 [3, 16, 256, 256]`` in ``[-1, 1]``, the output of earlier versions bit for bit);
* ``stock_uint8``: ``normalize=False`` (``uint8`` out, normalized later, e.g. on the GPU);
* ``ffmpeg``: ``resize="ffmpeg"`` (frames scaled by FFmpeg while decoding), float out;
* ``ffmpeg_uint8``: ``resize="ffmpeg", normalize=False``: the same work as the bare loop;
* ``ffmpeg_uint8_threads2``: the same with two FFmpeg frame threads (``codec_threads=2``):
  the same frames; its CPU (all threads) and wall time next to ``ffmpeg_uint8``'s show the
  cost and the gain of frame threading (wall times only mean something on idle cores);
* ``user``: a user encoder's call, ``get_clips(frames, video_out_frame_size=(256, 256))``;
* ``bare``: PyAV alone: seek to the keyframe, decode, ``to_ndarray(width=256, height=256,
  format="rgb24")`` for the kept frames (squashed, not cropped: a little less work).

The ``*_vs_bare`` keys are ``bare / variant`` (above 1: less CPU than the bare loop). Variants
the installed fpipe does not have are left out, so the same command measures an older
checkout (``PYTHONPATH=<checkout> python bench/video_encode.py``). Codec threads are off
(``codec_threads=1``, what ``"auto"`` gives outside DataLoader workers) and torch uses one
thread, as in a DataLoader worker.

Usage: ``python bench/video_encode.py [--samples 8] [--rounds 5]``. The last line of output
is one JSON object; it records the load average, since the machine may be shared.
"""

from __future__ import annotations

import argparse
import inspect
import io
import json
import os
import statistics
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import torch

from fpipe.decode.av.decoder import AVDecoder
from fpipe.encode.video import VideoTransformConfig, clip_frame_indices
from fpipe.encode.video_task import VideoTaskEncoder
from fpipe.samples import CaptionedVideoSample

SIZES = {"s360": (640, 360), "s720": (1280, 720)}
FPS, GOP_S, SECONDS, CLIPS = 30, 2, 8, 4
CFG = VideoTransformConfig(num_frames=16, height=256, width=256, stride=4)


def write_clip(path: Path, width: int, height: int, seed: int) -> None:
    """A textured picture panning 2 px per frame, a keyframe every ``GOP_S`` seconds."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0 : 2 * width].astype(np.float32)
    y = 128 + 50 * np.sin(xx / 37.0) * np.cos(yy / 23.0) + 30 * np.sin((xx + yy) / 91.0)
    y += rng.normal(0, 6, y.shape)
    u = 128 + 40 * np.sin(xx[::2, ::2] / 53.0)
    v = 128 + 40 * np.cos(yy[::2, ::2] / 29.0)
    ty, tu, tv = (np.clip(p, 0, 255).astype(np.uint8) for p in (y, u, v))
    gop = str(GOP_S * FPS)
    opts = {"preset": "ultrafast", "g": gop, "keyint_min": gop, "sc_threshold": "0"}
    tmp = path.with_suffix(".part.mp4")
    with av.open(str(tmp), "w") as out:
        stream = out.add_stream("libx264", rate=FPS, options=opts)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(SECONDS * FPS):
            x = (i * 2) % width
            planes = np.concatenate(
                [
                    ty[:, x : x + width].reshape(-1),
                    tu[:, x // 2 : x // 2 + width // 2].reshape(-1),
                    tv[:, x // 2 : x // 2 + width // 2].reshape(-1),
                ]
            )
            frame = av.VideoFrame.from_ndarray(planes.reshape(height * 3 // 2, width), "yuv420p")
            frame.pts, frame.time_base = i, Fraction(1, FPS)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    tmp.rename(path)


def clips(cache: Path, name: str) -> list[bytes]:
    width, height = SIZES[name]
    out = []
    for i in range(CLIPS):
        path = cache / f"fpipe_video_encode_{width}x{height}_{i}.mp4"
        if not path.exists():
            write_clip(path, width, height, seed=i)
        out.append(path.read_bytes())
    return out


def variants(datas: list[bytes]) -> dict:
    """``label -> fn(i)`` for every variant the installed fpipe has."""
    metas = [AVDecoder(d).metadata for d in datas]
    params = inspect.signature(VideoTaskEncoder).parameters
    new = "resize" in params
    options = {"stock": {}}
    if new:
        options.update(
            stock_uint8={"normalize": False},
            ffmpeg={"resize": "ffmpeg"},
            ffmpeg_uint8={"resize": "ffmpeg", "normalize": False},
        )
        for o in options.values():
            o["codec_threads"] = 1
        options["ffmpeg_uint8_threads2"] = {"resize": "ffmpeg", "normalize": False}
        options["ffmpeg_uint8_threads2"]["codec_threads"] = 2

    def indices(i: int) -> list[int]:
        n = metas[i % CLIPS].video_num_frames
        return clip_frame_indices(CFG, n, np.random.default_rng(i)).tolist()

    def encoder(enc):
        def run(i: int):
            d = AVDecoder(datas[i % CLIPS], metadata=metas[i % CLIPS], key=str(i))
            s = CaptionedVideoSample(__key__=str(i), __restore_key__=(), video=d, caption="")
            return enc.encode_sample(s, np.random.default_rng(i)).video

        return run

    def user(i: int):
        d = AVDecoder(datas[i % CLIPS], metadata=metas[i % CLIPS], key=str(i))
        kw = {"codec_threads": 1} if new else {}
        ranges = [(j, j) for j in indices(i)]
        out = d.get_clips(ranges, video_unit="frames", video_out_frame_size=(256, 256), **kw)
        return torch.cat(out.video_clips)

    def bare(i: int):
        want = indices(i)
        keep, last = set(want), max(want)
        meta = metas[i % CLIPS]
        k = max(j for j, f in enumerate(meta.keyframe_frames) if f <= want[0])
        got = {}
        with av.open(io.BytesIO(datas[i % CLIPS])) as c:
            s = c.streams.video[0]
            c.seek(round(meta.keyframes_s[k] / s.time_base), backward=True, stream=s)
            for n, frame in enumerate(c.decode(s), start=meta.keyframe_frames[k]):
                if n in keep:
                    got[n] = frame.to_ndarray(width=256, height=256, format="rgb24")
                if n >= last:
                    break
        return np.stack([got[j] for j in want])

    fns = {k: encoder(VideoTaskEncoder(CFG, **o)) for k, o in options.items()}
    fns.update(user=user, bare=bare)
    return fns


def measure(fns: dict, samples: int, rounds: int) -> tuple[dict, dict]:
    """Median CPU and wall seconds per sample of each variant, interleaved per round."""
    for fn in fns.values():
        fn(0)  # warm-up
    cpu: dict = {k: [] for k in fns}
    wall: dict = {k: [] for k in fns}
    for r in range(rounds):
        for label, fn in fns.items():
            t, w = time.process_time(), time.perf_counter()
            for i in range(samples):
                fn(r * samples + i)
            cpu[label].append((time.process_time() - t) / samples)
            wall[label].append((time.perf_counter() - w) / samples)
    med = statistics.median
    return {k: med(v) for k, v in cpu.items()}, {k: med(v) for k, v in wall.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cache-dir", default=tempfile.gettempdir())
    args = ap.parse_args()
    torch.set_num_threads(1)
    result: dict = {"load_avg_before": os.getloadavg()[0]}
    for name in SIZES:
        fns = variants(clips(Path(args.cache_dir), name))
        cpu, wall = measure(fns, args.samples, args.rounds)
        for label, seconds in cpu.items():
            result[f"{name}_{label}_cpu_ms"] = round(seconds * 1000, 1)
            result[f"{name}_{label}_wall_ms"] = round(wall[label] * 1000, 1)
            if label != "bare":
                result[f"{name}_{label}_vs_bare"] = round(cpu["bare"] / seconds, 3)
        print(name, {k: round(v * 1000, 1) for k, v in cpu.items()}, "ms CPU per sample")
    result["load_avg_after"] = os.getloadavg()[0]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
