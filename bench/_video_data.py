"""Synthetic video sets and the shared clip for ``bench/video_loader.py`` (not collected by
pytest). Imported by ``bench/_video_peers.py`` too, in the peers' Python: numpy and PyAV only at
module level (fpipe only inside :func:`ensure_video_set`).

A set is a folder of ``.tar`` shards of ``vNNNN.mp4`` + ``vNNNN.txt`` (a caption), prepared for
fpipe (``.fpipe/``, stream metadata and keyframes in the index). Every video is H.264 (x264
``veryfast``, B-frames on) at 30 fps, ``SECONDS`` long, a keyframe every ``GOP`` frames and no
scene-cut keyframes: a textured picture panning 2 px per frame under fresh sensor-like noise
(``NOISE``; about 0.75 Mbit/s at 360p and 2.5 at 720p, so decoding costs what a real clip of the
size costs, not a flat picture's), with the frame's index written in the middle of the
frame as ``BITS`` black or white cells (:func:`read_index` reads it back after any resize).

The clip every loader takes from video ``v`` (:func:`clip_indices`): ``FRAMES`` frames at
stride ``STRIDE`` from a start drawn with a seeded generator keyed by ``v``. The start is the
drawn keyframe interval plus ``GOP // 2`` frames: every clip then costs the same lead-in
(half an interval, the mean of a uniform start), so a run's rate does not depend on which
videos it happened to draw. fpipe's own ``VideoTaskEncoder`` draws its start from the sample's
generator instead (uniform over the valid starts: the same mean cost).
"""

from __future__ import annotations

import io
import json
import tarfile
from fractions import Fraction
from pathlib import Path

import numpy as np
from _loader_data import write_shard

FPS, SECONDS, GOP = 30, 10, 60
FRAMES, STRIDE, OUT, BATCH = 16, 4, 256, 4
SEED = 7
BITS = 10  # frame indices up to 1023
NOISE = 4.0  # standard deviation of the per-frame luma noise (8 noise frames, cycled)
#: the marker band, as fractions of the frame: rows, and the columns its cells span
BAND_Y, BAND_X = (0.42, 0.58), (0.25, 0.75)

__all__ = ["clip_indices", "ensure_video_set", "mp4_index", "read_index", "video_number"]


def clip_indices(v: int, num_frames: int = SECONDS * FPS) -> np.ndarray:
    """The frame indices every loader (but fpipe's stock encoder) takes from video ``v``."""
    span = (FRAMES - 1) * STRIDE + 1
    intervals = (num_frames - span - GOP // 2) // GOP + 1  # starts k * GOP + GOP // 2 that fit
    k = int(np.random.default_rng([SEED, v]).integers(0, intervals))
    return k * GOP + GOP // 2 + STRIDE * np.arange(FRAMES, dtype=np.int64)


def video_number(key: str) -> int:
    """``v`` of a sample key (``.../v0007``)."""
    return int(key.rsplit("/", 1)[-1].lstrip("v"))


def marker_x(src_w: int, src_h: int, out: int, crop: bool) -> tuple[float, float]:
    """The marker's columns in an ``out`` x ``out`` output, as fractions of its width: squashed
    to ``out`` x ``out`` (``crop=False``), or scaled to cover it and center-cropped."""
    if not crop:
        return BAND_X
    s = max(out / src_w, out / src_h)
    left = (max(out, round(src_w * s)) - out) // 2
    return tuple((f * src_w * s - left) / out for f in BAND_X)  # type: ignore[return-value]


def read_index(frame: np.ndarray, x_span: tuple[float, float] = BAND_X) -> int:
    """The index written in a decoded ``[3, H, W]`` frame (uint8, or float in ``[0, 255]``);
    ``x_span``: the marker's columns (:func:`marker_x`)."""
    arr = np.asarray(frame, dtype=np.float32)
    h, w = arr.shape[-2:]
    y0, y1 = (int(f * h) for f in BAND_Y)
    q = (y1 - y0) // 4
    rows = arr[..., y0 + q : y1 - q, :].mean(axis=(0, 1))  # mean over channels and rows
    cell = (x_span[1] - x_span[0]) * w / BITS
    value = 0
    for b in range(BITS):
        c0 = x_span[0] * w + b * cell
        cells = rows[int(c0 + cell / 4) : int(c0 + 3 * cell / 4) + 1]
        value |= int(cells.mean() > 128) << (BITS - 1 - b)
    return value


def _texture(rng: np.random.Generator, w: int, h: int) -> tuple[np.ndarray, ...]:
    """A smooth random picture with grain, YUV420 planes, twice as wide as the frame."""
    yy, xx = np.mgrid[0:h, 0 : 2 * w].astype(np.float32)
    ph = rng.uniform(0, 6.28, 3)
    y = 128 + 50 * np.sin(xx / 37.0 + ph[0]) * np.cos(yy / 23.0) + 30 * np.sin((xx + yy) / 91.0)
    y += rng.normal(0, 6, y.shape)
    u = 128 + 40 * np.sin(xx[::2, ::2] / 53.0 + ph[1])
    v = 128 + 40 * np.cos(yy[::2, ::2] / 29.0 + ph[2])
    return tuple(np.clip(p, 0, 255).astype(np.uint8) for p in (y, u, v))


def write_video(v: int, w: int, h: int) -> bytes:
    """One synthetic H.264 MP4 (see the module docstring)."""
    import av

    rng = np.random.default_rng([SEED, 1000 + v])
    ty, tu, tv = _texture(rng, w, h)
    noise = [rng.normal(0, NOISE, (h, w)).astype(np.float32) for _ in range(8)]
    y0, y1 = (int(f * h) for f in BAND_Y)
    cell = (BAND_X[1] - BAND_X[0]) * w / BITS
    gop = str(GOP)
    opts = {"preset": "veryfast", "g": gop, "keyint_min": gop, "sc_threshold": "0"}
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=FPS, options=opts)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.codec_context.thread_type = "AUTO"  # encoding only
        for i in range(SECONDS * FPS):
            x = (2 * i + 16 * v) % w & ~1  # pan 2 px per frame (even, for the chroma planes)
            py = np.clip(ty[:, x : x + w] + noise[i % 8], 0, 255).astype(np.uint8)
            for b in range(BITS):
                c0 = int(BAND_X[0] * w + b * cell)
                py[y0:y1, c0 : int(c0 + cell)] = 235 if (i >> (BITS - 1 - b)) & 1 else 16
            pu = tu[:, x // 2 : x // 2 + w // 2].copy()
            pv = tv[:, x // 2 : x // 2 + w // 2].copy()
            pu[y0 // 2 : y1 // 2, int(BAND_X[0] * w) // 2 : int(BAND_X[1] * w) // 2] = 128
            pv[y0 // 2 : y1 // 2, int(BAND_X[0] * w) // 2 : int(BAND_X[1] * w) // 2] = 128
            planes = np.concatenate([py.reshape(-1), pu.reshape(-1), pv.reshape(-1)])
            frame = av.VideoFrame.from_ndarray(planes.reshape(h * 3 // 2, w), format="yuv420p")
            frame.pts, frame.time_base = i, Fraction(1, FPS)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


def ensure_video_set(root: Path, count: int, w: int, h: int, shards: int = 4) -> dict:
    """Write (once) ``count`` videos of ``w`` x ``h`` in ``shards`` shards and prepare them for
    fpipe; reused while ``bench-params.json`` matches and fpipe's index format is current."""
    import yaml

    from fpipe.storage import prepare_dataset
    from fpipe.storage.read.tar.index import VERSION

    params = dict(
        count=count, w=w, h=h, shards=shards, fps=FPS, seconds=SECONDS, gop=GOP, noise=NOISE, v=2
    )
    pf, info = root / "bench-params.json", root / ".fpipe" / "info.yaml"
    if (
        pf.exists()
        and json.loads(pf.read_text()) == params
        and info.exists()
        and yaml.safe_load(info.read_text()).get("version") == VERSION
    ):
        return {**params, "reused": True}
    root.mkdir(parents=True, exist_ok=True)
    videos = [
        (f"v{v:04d}", {"mp4": write_video(v, w, h), "txt": f"clip {v}".encode()})
        for v in range(count)
    ]
    per = -(-count // shards)
    for s in range(shards):
        write_shard(root / f"shard-{s:02d}.tar", videos[s * per : (s + 1) * per])
    prepare_dataset(
        root, fields={"video": "mp4", "caption": "txt"}, sample_type="CaptionedVideoSample"
    )
    pf.write_text(json.dumps(params))
    mb = sum(len(m["mp4"]) for _, m in videos) / count / 1e6
    return {**params, "reused": False, "mean_mp4_mb": round(mb, 2)}


def mp4_index(root: Path) -> list[tuple[int, str, int, int]]:
    """``(video number, shard, offset, size)`` of every ``.mp4`` member, by video number."""
    out = []
    for shard in sorted(root.glob("*.tar")):
        with tarfile.open(shard, "r:") as tf:
            for m in tf:
                if m.isfile() and m.name.endswith(".mp4"):
                    out.append((video_number(m.name[:-4]), str(shard), m.offset_data, m.size))
    return sorted(out)
