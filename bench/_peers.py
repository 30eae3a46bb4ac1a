"""Peer loaders for ``bench/loader.py`` run as subprocesses (not collected by pytest).

Grain and SPDL live in their own virtual environment (no torch, no fpipe there), so
``bench/loader.py`` runs them as ``python bench/_peers.py LOADER ...`` with that environment's
Python, interleaved with its in-process loaders. Each run prints ONE JSON line:
``{"rate": samples/s, "cpu_rate": samples per CPU-second of the process and its children}``.

Loaders (all read the same ``.tar`` files, yield uint8 ``[bs, 3, 224, 224]`` numpy batches plus
captions, ``--workers`` threads or processes):

- ``grain-threads``: ``grain.MapDataset.source(...).shuffle().repeat().map(decode)``
  ``.to_iter_dataset(ReadOptions(num_threads=W))`` ``.batch(bs, drop_remainder=True)``.
- ``grain-procs``: the same with one thread per process and ``.mp_prefetch(W workers)``.
- ``spdl``: ``spdl.pipeline.PipelineBuilder``: source -> decode (``concurrency=W``) ->
  ``aggregate(bs)`` -> collate, ``build(num_threads=W)``.
- ``--decode``: the user-written decode of ``grain-*``, ``spdl`` and ``bare``: ``fpipe``
  (:func:`decode_fpipe`, fpipe's own public decode function: the same decoder as fpipe,
  simplejpeg or Pillow per image as fpipe picks) or ``pillow`` (``Image.open`` + the same
  ``resize_crop``).
- ``spdl-ffmpeg``: the same pipeline with SPDL's own decode, ``spdl.io.load_image`` and the
  FFmpeg filter ``scale=224:224:flags=bilinear`` in crop mode (cover, then center crop); it
  scales in YUV with swscale's bilinear and converts to RGB at 224x224, so pixels differ
  from Pillow's (``psnr`` reports by how much).
- ``bare``: the practical single-core ceiling: ``tarfile`` sequential read + decode + stack,
  batches continuing across shards, nothing else; with ``--wait`` it warms up, prints
  ``ready`` and starts timing when a line arrives on stdin (``loader.py`` runs two at once on
  separate shards: the practical 2-core ceiling).
- ``psnr``: PSNR of ``spdl-ffmpeg``'s output against the shared Pillow transform.

Random-access readers (Grain, SPDL) read members through an index of ``(path, offset, size)``
built from the tar headers, and shuffle globally with a seeded permutation per epoch (Grain's
idiom; the page cache is warm, so the read order costs nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from PIL import Image

TARGET = 224
SEED = 1

__all__ = ["bare_batches", "drain_buffered", "resize_crop_np", "tar_index"]

#: a batch that arrives faster than this was decoded before it was asked for: 32 images take
#: >= 29 ms on 2 cores even at 1,100 images/s; handing over a ready batch takes a few ms (up to
#: ~10 under load)
BUFFERED_S = 0.015


def resize_crop_np(img: Image.Image, size: int = TARGET) -> np.ndarray:
    """Full-size PIL image -> uint8 CHW array: the geometry of torchvision's
    ``Resize(size) + CenterCrop(size)`` (scale so the short side is ``size``, center crop),
    bilinear, resampling only the kept box (``Image.resize(box=...)``): the transform every
    peer shares, bit-identical to fpipe's ``ImageDecodeOptions(target_size=size, draft=False)``.
    """
    if img.mode != "RGB":
        img = img.convert("RGB")
    w, h = img.size
    s = max(size / h, size / w)
    sw, sh = w * s, h * s
    x0, y0 = max(sw - size, 0.0) / 2, max(sh - size, 0.0) / 2
    box = (x0 / sw * w, y0 / sh * h, (x0 + size) / sw * w, (y0 + size) / sh * h)
    img = img.resize((size, size), Image.Resampling.BILINEAR, box=box)
    return np.ascontiguousarray(np.asarray(img).transpose(2, 0, 1))


def resize_then_crop_np(img: Image.Image, size: int = TARGET) -> np.ndarray:
    """The same geometry written the common way (resize the whole image to integer sides,
    then an integer center crop); differs from :func:`resize_crop_np` by sub-pixel offsets."""
    if img.mode != "RGB":
        img = img.convert("RGB")
    w, h = img.size
    s = size / min(w, h)
    nw, nh = max(size, round(w * s)), max(size, round(h * s))
    img = img.resize((nw, nh), Image.Resampling.BILINEAR)
    left, top = (nw - size) // 2, (nh - size) // 2
    img = img.crop((left, top, left + size, top + size))
    return np.ascontiguousarray(np.asarray(img).transpose(2, 0, 1))


def decode_pillow(data: bytes, size: int = TARGET) -> np.ndarray:
    return resize_crop_np(Image.open(io.BytesIO(data)), size)


#: the repository root: fpipe's decode is imported from there (the peers' Python needs
#: fpipe's own dependencies, numpy, Pillow, msgspec, simplejpeg; torch is optional)
ROOT = str(Path(__file__).resolve().parent.parent)


@functools.cache
def _fpipe_decoder(size: int = TARGET) -> Callable[[bytes], np.ndarray]:
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from fpipe.decode.image import ImageDecodeOptions, decode_image_with

    try:  # fpipe's loader asks for torch CHW: the very same work, then a zero-copy view
        import torch  # noqa: F401

        opts = ImageDecodeOptions(target_size=size, draft=False, out="torch")
        return lambda data: decode_image_with(data, opts).numpy()
    except ImportError:  # a peers' Python without torch: HWC, then one copy to CHW
        opts = ImageDecodeOptions(target_size=size, draft=False, out="numpy")
        return lambda data: np.ascontiguousarray(decode_image_with(data, opts).transpose(2, 0, 1))


def decode_fpipe(data: bytes, size: int = TARGET) -> np.ndarray:
    """fpipe's own decode through its public ``decode_image_with`` (``target_size=224,
    draft=False``): libjpeg-turbo through simplejpeg for the plain JPEGs fpipe takes that way,
    Pillow for the others, image by image, then the same resize + crop. A Grain, SPDL or
    ``datasets`` user writes this decode function: the peers then do fpipe's decode work."""
    return _fpipe_decoder(size)(data)


def decode_spdl_ffmpeg(data: bytes, size: int = TARGET) -> np.ndarray:
    import spdl.io

    desc = spdl.io.get_video_filter_desc(
        scale_width=size, scale_height=size, scale_algo="bilinear", scale_mode="crop"
    )
    arr = spdl.io.to_numpy(spdl.io.load_image(data, filter_desc=desc))
    return np.ascontiguousarray(arr.reshape(size, size, 3).transpose(2, 0, 1))


def collate_np(samples: list) -> dict:
    return {"image": np.stack([s[0] for s in samples]), "caption": [s[1] for s in samples]}


# --------------------------------------------------------------------------------------------
# Sources
# --------------------------------------------------------------------------------------------


def tar_index(root: Path) -> list[tuple[str, int, int, int, int]]:
    """``(shard, jpg offset, jpg size, txt offset, txt size)`` per sample, in shard order."""
    out = []
    for shard in sorted(root.glob("*.tar")):
        members: dict[str, dict[str, tuple[int, int]]] = {}
        with tarfile.open(shard, "r:") as tf:
            for m in tf:
                if m.isfile():
                    key, ext = m.name.split(".", 1)
                    members.setdefault(key, {})[ext] = (m.offset_data, m.size)
        for parts in members.values():
            out.append((str(shard), *parts["jpg"], *parts["txt"]))
    return out


class TarSource:
    """Random access to the samples of a folder of shards (Grain's ``RandomAccessDataSource``)."""

    def __init__(self, root: str):
        self.index = tar_index(Path(root))
        self._fds: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> tuple[bytes, str]:
        path, jo, js, to, ts = self.index[i]
        fd = self._fds.get(path)
        if fd is None:
            fd = self._fds[path] = os.open(path, os.O_RDONLY)
        return os.pread(fd, js, jo), os.pread(fd, ts, to).decode()

    def __getstate__(self) -> dict:  # file descriptors do not cross processes
        return {"index": self.index, "_fds": {}}


class ArrayTarSource(TarSource):
    """:class:`TarSource` over the index :func:`cached_tar_index` saved beside the shards (the
    peers' prepare step, as fpipe and Energon read their prepared index): numpy columns, so
    opening a large set costs a file read, not a scan of every tar header."""

    def __init__(self, root: str):
        self.shards, rows = cached_tar_index(Path(root))
        self.index = rows  # (shard id, jpg offset, jpg size, txt offset, txt size) per sample
        self._fds = {}

    def __getitem__(self, i: int) -> tuple[bytes, str]:
        s, jo, js, to, ts = self.index[i].tolist()
        fd = self._fds.get(s)
        if fd is None:
            fd = self._fds[s] = os.open(self.shards[s], os.O_RDONLY)
        return os.pread(fd, js, jo), os.pread(fd, ts, to).decode()

    def __getstate__(self) -> dict:
        return {"shards": self.shards, "index": self.index, "_fds": {}}


#: where :func:`cached_tar_index` keeps a folder's index
PEERS_INDEX = ".peers-index.npz"


def cached_tar_index(root: Path) -> tuple[list[str], np.ndarray]:
    """``(shard paths, int64 rows of (shard id, jpg offset, jpg size, txt offset, txt
    size))`` of a folder, from ``PEERS_INDEX`` (written from :func:`tar_index` on first use)."""
    f = root / PEERS_INDEX
    if not f.exists():
        rows = tar_index(root)
        shards = sorted({r[0] for r in rows})
        ids = {s: i for i, s in enumerate(shards)}
        table = np.array([(ids[r[0]], *r[1:]) for r in rows], np.int64).reshape(-1, 5)
        tmp = root / (PEERS_INDEX + ".tmp.npz")
        np.savez(tmp, shards=np.array([Path(s).name for s in shards]), rows=table)
        os.replace(tmp, f)
    with np.load(f, allow_pickle=False) as z:
        return [str(root / s) for s in z["shards"].tolist()], z["rows"]


class Decode:
    """``(jpg bytes, caption) -> (CHW uint8, caption)`` with a named decode (picklable), to
    ``size`` pixels a side."""

    def __init__(self, name: str, size: int = TARGET):
        self.name, self.size = name, size

    def __call__(self, sample: tuple[bytes, str]) -> tuple[np.ndarray, str]:
        return DECODERS[self.name](sample[0], self.size), sample[1]


DECODERS: dict[str, Callable[[bytes], np.ndarray]] = {
    "pillow": decode_pillow,
    "fpipe": decode_fpipe,
    "spdl-ffmpeg": decode_spdl_ffmpeg,
}


def shuffled_forever(n: int) -> Iterator[int]:
    rng = np.random.default_rng(SEED)
    while True:
        yield from rng.permutation(n).tolist()


# --------------------------------------------------------------------------------------------
# Loaders
# --------------------------------------------------------------------------------------------


def grain_iter(root: str, bs: int, workers: int, procs: bool, decode: str) -> Iterator:
    import grain

    ds = grain.MapDataset.source(TarSource(root)).shuffle(seed=SEED).repeat().map(Decode(decode))
    return grain_batches(ds, bs, workers, procs)


def grain_batches(ds, bs: int, workers: int, procs: bool) -> Iterator:
    """Batches of a decoding ``grain.MapDataset``: ``workers`` threads, or processes."""
    import grain

    threads = 1 if procs else workers
    it = ds.to_iter_dataset(grain.ReadOptions(num_threads=threads, prefetch_buffer_size=2 * bs))
    it = it.batch(bs, drop_remainder=True, batch_fn=collate_np)
    if procs:
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return iter(it)


def spdl_iter(root: str, bs: int, workers: int, decode: str) -> Iterator:
    src = TarSource(root)
    decode_one = Decode(decode)
    # SPDL's pipeline turns a failing stage into a 120 s wait for the next item: decode one
    # sample first, so a missing FFmpeg library fails at once with its own error
    decode_one(src[0])
    return spdl_batches((src[i] for i in shuffled_forever(len(src))), decode_one, bs, workers)


def spdl_batches(samples: Iterator, decode_one: Callable, bs: int, workers: int) -> Iterator:
    """Batches of an SPDL pipeline: ``samples`` -> ``decode_one`` (``workers`` at once) ->
    ``aggregate(bs)`` -> collate, on ``workers`` threads."""
    from spdl.pipeline import PipelineBuilder

    pipeline = (
        PipelineBuilder()
        .add_source(samples)
        .pipe(decode_one, concurrency=workers)
        .aggregate(bs, drop_last=True)
        .pipe(collate_np)
        .add_sink(2)
        .build(num_threads=workers)
    )
    pipeline.start()

    def gen() -> Iterator:
        try:
            yield from pipeline.get_iterator(timeout=120)
        finally:
            pipeline.stop()

    return gen()


def bare_batches(
    shards: list[Path], bs: int, decode: Callable[[bytes], object], stack: Callable
) -> Iterator[dict]:
    """``tarfile`` sequential read + decode, one core, no shuffle; a batch continues across
    shards (no decoded sample is thrown away)."""
    images: list = []
    captions: list = []
    while True:
        for shard in shards:
            cur, sample = None, {}
            with tarfile.open(shard, "r|") as tf:
                for m in tf:
                    if not m.isfile():
                        continue
                    key, ext = m.name.split(".", 1)
                    if key != cur and sample:
                        images.append(decode(sample["jpg"]))
                        captions.append(sample["txt"].decode())
                        sample = {}
                    if len(images) == bs:
                        yield {"image": stack(images), "caption": captions}
                        images, captions = [], []
                    cur = key
                    sample[ext] = tf.extractfile(m).read()
            if sample:
                images.append(decode(sample["jpg"]))
                captions.append(sample["txt"].decode())


def drain_buffered(it: Iterator, limit: int = 64) -> int:
    """Take the batches a loader decoded ahead during its warm-up (they would arrive for free in
    the timed window and inflate the rate of whoever buffers most); returns how many."""
    for k in range(limit):
        t0 = time.perf_counter()
        next(it)
        if time.perf_counter() - t0 > BUFFERED_S:
            return k + 1
    return limit


# --------------------------------------------------------------------------------------------


LOADERS = ("grain-threads", "grain-procs", "spdl", "spdl-ffmpeg", "bare")


def ffmpeg_psnr(root: str, count: int) -> dict[str, float]:
    src = TarSource(root)
    vals = []
    for i in range(0, len(src), max(1, len(src) // count)):
        a = decode_pillow(src[i][0]).astype(np.float64)
        b = decode_spdl_ffmpeg(src[i][0]).astype(np.float64)
        mse = float(np.mean((a - b) ** 2))
        vals.append(99.0 if mse == 0 else 10 * np.log10(255.0**2 / mse))
    return {"mean": float(np.mean(vals)), "min": float(np.min(vals)), "images": len(vals)}


def cpu_seconds() -> float:
    """CPU time of this process and its live children (DataLoader workers)."""
    t = time.process_time()
    with contextlib.suppress(ImportError):
        import psutil

        for c in psutil.Process().children(recursive=True):
            with contextlib.suppress(Exception):
                ct = c.cpu_times()
                t += ct.user + ct.system
    return t


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("loader", choices=[*LOADERS, "psnr"])
    ap.add_argument("--root", required=True)
    ap.add_argument("--bs", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--warm", type=int, default=4)
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--decode", default="pillow", choices=sorted(DECODERS))
    ap.add_argument("--shards", default="", help="bare: comma-separated shard indices")
    ap.add_argument("--wait", action="store_true", help="bare: start timing on a stdin line")
    a = ap.parse_args(argv)
    if a.loader == "psnr":
        print(json.dumps(ffmpeg_psnr(a.root, a.n)), flush=True)
        return
    if a.loader.startswith("grain"):
        it = grain_iter(a.root, a.bs, a.workers, a.loader == "grain-procs", a.decode)
    elif a.loader.startswith("spdl"):
        it = spdl_iter(
            a.root, a.bs, a.workers, "spdl-ffmpeg" if a.loader == "spdl-ffmpeg" else a.decode
        )
    else:
        shards = sorted(Path(a.root).glob("*.tar"))
        if a.shards:
            shards = [shards[int(i)] for i in a.shards.split(",")]
        it = bare_batches(shards, a.bs, DECODERS[a.decode], np.stack)
    for i in range(a.warm):
        b = next(it)
        if i == 0:
            img = b["image"]
            assert img.shape == (a.bs, 3, TARGET, TARGET) and img.dtype == np.uint8, img.shape
            assert len(b["caption"]) == a.bs
    drain_buffered(it)
    if a.wait:
        print("ready", flush=True)
        sys.stdin.readline()
    c0, t0 = cpu_seconds(), time.perf_counter()
    for _ in range(a.n):
        next(it)
    dt, dc = time.perf_counter() - t0, cpu_seconds() - c0
    print(json.dumps({"rate": a.n * a.bs / dt, "cpu_rate": a.n * a.bs / dc}), flush=True)
    with contextlib.suppress(Exception):
        it.close()
    sys.stdout.flush()
    os._exit(0)  # do not wait on the loader's daemon threads / worker processes


if __name__ == "__main__":
    main()
