"""Peer video loaders for ``bench/video_loader.py``, run as subprocesses (not collected by pytest).

SPDL and Megatron-Energon live in their own virtual environment (no fpipe there), so
``bench/video_loader.py`` runs ``python bench/_video_peers.py LOADER --root SET ...`` with that
environment's Python, interleaved with its in-process fpipe loaders. Each run prints ONE JSON
line: ``{"rate": samples/s, "cpu_rate": samples per CPU-second of the process and its
children, "checked": samples whose frame indices were checked}``.

Every loader delivers batches of ``BATCH`` clips ``uint8 [FRAMES, 3, OUT, OUT]`` (all frames
squashed to ``OUT`` x ``OUT`` with swscale's bilinear, RGB), the clip of video ``v`` being the
frames :func:`_video_data.clip_indices` names; the frame indices of every warm-up batch are read
back from the pixels and checked (a mismatch fails the run). Videos are read from the ``.tar``
shards by offset (``_video_data.mp4_index``), in a seeded shuffled order per pass.

- ``bare``: one PyAV loop, nothing else: open, seek to the clip's keyframe, decode forward
  (frame number from pts), convert the kept frames with ``reformat(width, height,
  format="rgb24", interpolation="BILINEAR").to_ndarray()`` (Energon's call), stack; codec
  threads off. With ``--half k`` it takes the videos with ``v % 2 == k``; with ``--wait`` it
  warms up, prints ``ready`` and starts timing on a stdin line (``video_loader.py`` runs two
  at once: the practical 2-core ceiling).
- ``spdl``: ``spdl.pipeline.PipelineBuilder``: source -> ``spdl.io.demux_video(data,
  timestamp=clip window)`` + ``spdl.io.decode_packets`` with one FFmpeg filter graph (``trim``
  to the window, ``select`` every 4th frame, ``scale`` 256x256 bilinear, ``rgb24``)
  (``concurrency=W``) -> ``aggregate(BATCH)`` -> stack, ``build(num_threads=W)``. (SPDL's
  ``sample_decode_video(packets, indices)`` gives the same frames for ~40% more CPU here.)
- ``energon``: Megatron-Energon's ``AVDecoder(stream).get_video_clips([(i, i), ...],
  video_unit="frames", video_out_frame_size=(OUT, OUT))`` in a map-style dataset under a torch
  ``DataLoader(batch_size=BATCH, num_workers=W)``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _peers import cpu_seconds  # noqa: E402
from _video_data import BATCH, FPS, GOP, OUT, SEED, STRIDE, clip_indices, mp4_index, read_index  # noqa: E402

#: a batch handed over faster than this was decoded before it was asked for (4 clips take
#: >= 0.15 s on 2 cores even at 360p)
BUFFERED_S = 0.04

__all__ = ["check_batch", "drain_buffered", "order"]


class Source:
    """Random access to the mp4 bytes of a set, by video number."""

    def __init__(self, root: str):
        self.index = {v: (path, off, size) for v, path, off, size in mp4_index(Path(root))}
        self._fds: dict[str, int] = {}

    def __call__(self, v: int) -> bytes:
        path, off, size = self.index[v]
        fd = self._fds.get(path)
        if fd is None:
            fd = self._fds[path] = os.open(path, os.O_RDONLY)
        return os.pread(fd, size, off)

    def __getstate__(self) -> dict:  # file descriptors do not cross processes
        return {"index": self.index, "_fds": {}}


def order(videos: list[int]) -> Iterator[int]:
    """The videos forever, in a seeded shuffled order per pass."""
    rng = np.random.default_rng(SEED)
    while True:
        yield from (videos[i] for i in rng.permutation(len(videos)))


def check_batch(clips, videos) -> int:
    """Raise unless every clip holds the frames :func:`clip_indices` names for its video."""
    for clip, v in zip(clips, videos):
        got = [read_index(np.asarray(f)) for f in clip]
        want = clip_indices(int(v)).tolist()
        if got != want:
            raise AssertionError(f"video {v}: frames {got}, expected {want}")
        assert tuple(clip.shape) == (len(want), 3, OUT, OUT), clip.shape
    return len(videos)


# --------------------------------------------------------------------------------------------


def bare_clip(data: bytes, v: int) -> np.ndarray:
    import av

    want = clip_indices(v)
    keep, last = set(want.tolist()), int(want[-1])
    frames = []
    with av.open(io.BytesIO(data)) as c:
        vs = c.streams.video[0]
        vs.thread_type, vs.codec_context.thread_count = "NONE", 1
        tb, t0 = vs.time_base, vs.start_time or 0
        gop_start = int(want[0]) // GOP * GOP
        c.seek(t0 + int(gop_start / FPS / tb), stream=vs, backward=True)
        for f in c.decode(vs):
            n = round(float((f.pts - t0) * tb) * FPS)
            if n in keep:
                rgb = f.reformat(width=OUT, height=OUT, format="rgb24", interpolation="BILINEAR")
                frames.append(rgb.to_ndarray())
            if n >= last:
                break
    return np.stack(frames).transpose(0, 3, 1, 2)


def bare_iter(root: str, half: int | None) -> Iterator[tuple[np.ndarray, list[int]]]:
    src = Source(root)
    videos = [v for v in sorted(src.index) if half is None or v % 2 == half]
    clips, vs = [], []
    for v in order(videos):
        clips.append(bare_clip(src(v), v))
        vs.append(v)
        if len(clips) == BATCH:
            yield np.stack(clips), vs
            clips, vs = [], []


def spdl_iter(root: str, workers: int) -> Iterator[tuple[np.ndarray, list[int]]]:
    import spdl.io
    from spdl.pipeline import PipelineBuilder

    src = Source(root)

    def load(v: int) -> tuple[np.ndarray, int]:
        idx = clip_indices(v)
        packets = spdl.io.demux_video(src(v), timestamp=(idx[0] / FPS, (idx[-1] + 1) / FPS))
        t0, t1 = packets.timestamp
        # keep every STRIDE-th frame of the window before scaling: only the kept frames are
        # scaled and converted (sample_decode_video, one filter graph per frame, cost ~40%
        # more CPU here)
        desc = (
            f"trim=start={t0}:end={t1},select='not(mod(n\\,{STRIDE}))',"
            f"scale=w={OUT}:h={OUT}:flags=bilinear,format=pix_fmts=rgb24"
        )
        frames = spdl.io.decode_packets(packets, filter_desc=desc)
        arr = spdl.io.to_numpy(spdl.io.convert_frames(frames))
        return arr.transpose(0, 3, 1, 2), v

    load(0)  # a failing stage makes SPDL's pipeline wait 120 s: fail here at once instead
    pipeline = (
        PipelineBuilder()
        .add_source(order(sorted(src.index)))
        .pipe(load, concurrency=workers)
        .aggregate(BATCH, drop_last=True)
        .pipe(lambda items: (np.stack([a for a, _ in items]), [v for _, v in items]))
        .add_sink(2)
        .build(num_threads=workers)
    )
    pipeline.start()
    try:
        yield from pipeline.get_iterator(timeout=120)
    finally:
        pipeline.stop()


class EnergonClips:
    """A map-style dataset: video number -> (Energon-decoded clip, number)."""

    def __init__(self, root: str):
        self.src = Source(root)

    def __len__(self) -> int:
        return len(self.src.index)

    def __getitem__(self, v: int):
        import torch
        from megatron.energon.av import AVDecoder

        dec = AVDecoder(io.BytesIO(self.src(v)), suppress_warnings=True)
        ranges = [(int(i), int(i)) for i in clip_indices(v)]
        clips, _ = dec.get_video_clips(ranges, video_unit="frames", video_out_frame_size=(OUT, OUT))
        return torch.cat(clips), v


def energon_iter(root: str, workers: int) -> Iterator[tuple[np.ndarray, list[int]]]:
    from torch.utils.data import DataLoader

    ds = EnergonClips(root)
    loader = DataLoader(
        ds,
        batch_size=BATCH,
        sampler=order(sorted(ds.src.index)),
        num_workers=workers,
        prefetch_factor=2 if workers else None,
    )
    for clips, vs in loader:
        yield clips, vs.tolist()


# --------------------------------------------------------------------------------------------


def drain_buffered(it: Iterator, limit: int = 16) -> int:
    """Take the batches decoded ahead during warm-up (they would arrive for free in the timed
    window); returns how many."""
    for k in range(limit):
        t0 = time.perf_counter()
        next(it)
        if time.perf_counter() - t0 > BUFFERED_S:
            return k + 1
    return limit


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("loader", choices=["bare", "spdl", "energon"])
    ap.add_argument("--root", required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--warm", type=int, default=2)
    ap.add_argument("--n", type=int, default=6)
    ap.add_argument("--half", type=int, default=None, help="bare: the videos with v %% 2 == k")
    ap.add_argument("--wait", action="store_true", help="bare: start timing on a stdin line")
    a = ap.parse_args(argv)
    if a.loader == "bare":
        it = bare_iter(a.root, a.half)
    elif a.loader == "spdl":
        it = spdl_iter(a.root, a.workers)
    else:
        it = energon_iter(a.root, a.workers)
    checked = 0
    for _ in range(a.warm):
        clips, vs = next(it)
        checked += check_batch(clips, vs)
    if not a.wait:
        drain_buffered(it)
    else:
        print("ready", flush=True)
        sys.stdin.readline()
    c0, t0 = cpu_seconds(), time.perf_counter()
    for _ in range(a.n):
        next(it)
    dt, dc = time.perf_counter() - t0, cpu_seconds() - c0
    out = {"rate": a.n * BATCH / dt, "cpu_rate": a.n * BATCH / dc, "checked": checked}
    print(json.dumps(out), flush=True)
    sys.stdout.flush()
    os._exit(0)  # do not wait on the loader's threads / worker processes


if __name__ == "__main__":
    main()
