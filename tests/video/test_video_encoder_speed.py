"""The stock video encoder's faster paths: the default output unchanged, bit for bit; the
FFmpeg resize and uint8 options; FFmpeg frame threads giving the same frames; thread, process
and in-process loaders giving the same batches.

The reference for the default output is independent of fpipe's decoder and transform code:
every frame decoded by a plain PyAV loop (``to_ndarray(format="rgb24")``), then the chain as
fpipe computed it before (torch's antialiased bilinear on the float frames, crop, clamp,
``x / 127.5 - 1``, ``[C, T, H, W]``), copied below. Videos are textured (random blocks), so
any change of resampling, crop position or frame would show.
"""

from __future__ import annotations

import io
import itertools
from fractions import Fraction

import av
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fpipe
from fpipe.core.errors import ConfigError
from fpipe.decode.av import _threads
from fpipe.decode.av.decoder import AVDecoder, av_open
from fpipe.encode.video import (
    VideoTransformConfig,
    clip_frame_indices,
    normalize,
    video_transform,
)
from fpipe.encode.video_task import VideoTaskEncoder
from fpipe.samples import CaptionedVideoSample
from fpipe.storage import prepare_dataset
from tests.storage.helpers import write_tar


def _textured(num_frames: int, width: int, height: int, seed: int, block: int = 4) -> bytes:
    """An H.264 MP4 of random ``block``-pixel squares that drift a little every frame."""
    rng = np.random.default_rng(seed)
    shape = (height // block + 1, width // block + 2, 3)
    base = rng.integers(0, 256, shape, dtype=np.uint8).repeat(block, 0).repeat(block, 1)
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        opts = {"g": "8", "keyint_min": "8", "sc_threshold": "0", "preset": "ultrafast"}
        stream = out.add_stream("libx264", rate=12, options=opts)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(num_frames):
            img = np.ascontiguousarray(base[:height, i % 4 : i % 4 + width])
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, 12)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


VIDEOS = {  # (frames, width, height): 4:3 and 16:9, sizes that are no multiple of 16
    "a": (40, 96, 72),
    "b": (30, 112, 62),
}


@pytest.fixture(scope="module")
def videos() -> dict[str, bytes]:
    return {k: _textured(*v, seed=i) for i, (k, v) in enumerate(VIDEOS.items())}


def _all_frames(data: bytes) -> torch.Tensor:
    """Every frame, ``uint8 [N, 3, H, W]``, decoded by PyAV alone."""
    with av.open(io.BytesIO(data)) as c:
        arrays = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2)


def _old_chain(cfg: VideoTransformConfig, video: torch.Tensor, rng) -> torch.Tensor:
    """``video_transform`` as it was: whole-clip float copy, resize, crop, clamp, normalize."""
    idx = clip_frame_indices(cfg, video.shape[0], rng)
    x = video[torch.as_tensor(idx)]
    th, tw = cfg.height, cfg.width
    h, w = x.shape[-2:]
    scale = max(th / h, tw / w)
    nh, nw = max(th, round(h * scale)), max(tw, round(w * scale))
    x = x.float()
    if (nh, nw) != (h, w):
        x = F.interpolate(x, size=(nh, nw), mode="bilinear", align_corners=False, antialias=True)
    if cfg.crop == "center":
        top, left = (nh - th) // 2, (nw - tw) // 2
    else:
        top, left = int(rng.integers(0, nh - th + 1)), int(rng.integers(0, nw - tw + 1))
    x = x[..., top : top + th, left : left + tw]
    if video.dtype == torch.uint8:
        x = x.clamp_(0.0, 255.0)
    return x.float().div(127.5).sub(1.0).permute(1, 0, 2, 3).contiguous()


CONFIGS = [
    VideoTransformConfig(num_frames=6, height=32, width=32, stride=3),  # random start
    VideoTransformConfig(num_frames=4, height=24, width=40, stride=2, crop="random"),
    VideoTransformConfig(num_frames=5, height=50, width=30, temporal="whole"),
    VideoTransformConfig(num_frames=3, height=128, width=96, temporal="first"),  # upscale
]


def _encode(enc: VideoTaskEncoder, data: bytes, seed: int):
    sample = CaptionedVideoSample(
        __key__="k", __restore_key__=(), video=AVDecoder(data, key="k"), caption="c"
    )
    return enc.encode_sample(sample, np.random.default_rng(seed))


@pytest.mark.parametrize("cfg", CONFIGS, ids=range(len(CONFIGS)))
def test_default_output_is_the_old_chain_bit_for_bit(videos, cfg):
    enc = VideoTaskEncoder(cfg)
    for name, data in videos.items():
        frames = _all_frames(data)
        for seed in range(2):
            out = _encode(enc, data, seed)
            rng = np.random.default_rng(seed)
            idx = clip_frame_indices(cfg, frames.shape[0], rng)
            spatial = VideoTransformConfig(
                num_frames=cfg.num_frames,
                height=cfg.height,
                width=cfg.width,
                temporal="first",
                crop=cfg.crop,
            )
            ref = _old_chain(spatial, frames[torch.as_tensor(idx)], rng)
            assert out.video.dtype == torch.float32
            assert torch.equal(out.video, ref), (name, seed)
            assert out.frame_indices.tolist() == idx.tolist()
        # the pure function on tensors, uint8 and float input
        for video in (frames, frames.float() * 0.5):
            a = video_transform(cfg, video, np.random.default_rng(7))
            assert torch.equal(a, _old_chain(cfg, video, np.random.default_rng(7)))


def test_ffmpeg_resize_and_uint8_output(videos):
    cfg = VideoTransformConfig(num_frames=4, height=40, width=40, stride=2, crop="random")
    default = VideoTaskEncoder(cfg)
    fast = VideoTaskEncoder(cfg, resize="ffmpeg")
    fast_u8 = VideoTaskEncoder(cfg, resize="ffmpeg", normalize=False)
    torch_u8 = VideoTaskEncoder(cfg, normalize=False)
    for data in videos.values():
        for seed in range(3):
            ref = _encode(default, data, seed)
            f, f8, t8 = (_encode(e, data, seed) for e in (fast, fast_u8, torch_u8))
            for o in (f, f8, t8):
                assert o.video.shape == ref.video.shape
                assert torch.equal(o.frame_indices, ref.frame_indices)
                assert torch.equal(o.frame_times, ref.frame_times)
            assert f8.video.dtype == t8.video.dtype == torch.uint8
            assert torch.equal(normalize(f8.video), f.video)  # uint8 out, normalized later
            assert (normalize(t8.video) - ref.video).abs().max() <= 1.01 / 127.5
            # FFmpeg's bilinear, at the same crop of the same frames: the luma within a level
            # of torch's on average (a crop one pixel off is ~25 levels away on these random
            # blocks); colour edges differ more (FFmpeg scales chroma at its half resolution)
            luma = torch.tensor([0.299, 0.587, 0.114]).view(3, 1, 1, 1) * 127.5
            y, y_ref = (f.video * luma).sum(0), (ref.video * luma).sum(0)
            assert (y - y_ref).abs().mean() < 1.5
            assert (y[..., 1:] - y_ref[..., :-1]).abs().mean() > 10


def test_encoder_options_are_checked_and_kept_by_buckets():
    cfg = VideoTransformConfig(num_frames=2, height=8, width=8)
    for bad in (dict(resize="pil"), dict(normalize=1), dict(codec_threads=0)):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            VideoTaskEncoder(cfg, **bad)
    enc = VideoTaskEncoder(cfg, resize="ffmpeg", normalize=False, codec_threads=2)
    b = enc.for_bucket((3, 16, 16))
    assert (b.resize, b.normalize, b.codec_threads) == ("ffmpeg", False, 2)
    assert "resize='ffmpeg'" in repr(enc)


def test_codec_threads_give_the_same_frames(videos):
    data = _textured(60, 160, 96, seed=5)
    dec = AVDecoder(data)
    requests = [
        dict(video_clip_ranges=[(10, 10), (3, 7), (40, 44), (11, 11)], video_unit="frames"),
        dict(video_clip_ranges=[(2.0, 3.0), (0.0, 0.5)], video_out_frame_size=(50, 30)),
    ]
    for req in requests:
        ref = dec.get_clips(**req, codec_threads=1)
        for threads in (2, 3, "auto"):
            out = dec.get_clips(**req, codec_threads=threads)
            assert len(out.video_clips) == len(ref.video_clips)
            for a, b in zip(out.video_clips, ref.video_clips):
                assert torch.equal(a, b)
    with av_open(data, video_threads=3) as c:  # the setting really reaches FFmpeg
        ctx = c.streams.video[0].codec_context
        assert ctx.thread_count == 3 and ctx.thread_type.name != "NONE"
    for bad in (0, -1, 1.5, "all", True):
        with pytest.raises(ValueError, match="codec_threads"):
            dec.get_clips([(0, 0)], video_unit="frames", codec_threads=bad)


def test_scaled_frames_are_pyav_reformat_then_rgb(videos):
    """get_clips' reused scalers give what a fresh ``reformat`` + ``to_ndarray`` per frame
    gives (the decoder's output before it reused them)."""
    data = videos["b"]
    with av.open(io.BytesIO(data)) as c:
        ref = [
            f.reformat(width=50, height=30, interpolation="BILINEAR").to_ndarray(format="rgb24")
            for f in c.decode(video=0)
        ]
    out = AVDecoder(data).get_clips(
        [(2, 5), (20, 20)], video_unit="frames", video_out_frame_size=(50, 30)
    )
    got = torch.cat(out.video_clips).permute(0, 2, 3, 1).numpy()
    assert np.array_equal(got, np.stack([ref[i] for i in (2, 3, 4, 20)]))


def test_auto_codec_threads_only_with_spare_cores(monkeypatch):
    class Info:
        num_workers = 2

    monkeypatch.setattr(_threads, "_cores", lambda: 8)
    assert _threads.resolve_codec_threads("auto") == 1  # not a DataLoader worker
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: Info)
    assert _threads.resolve_codec_threads("auto") == 4
    Info.num_workers = 16
    assert _threads.resolve_codec_threads("auto") == 1
    assert _threads.resolve_codec_threads(3) == 3


@pytest.fixture(scope="module")
def shards(tmp_path_factory, videos):
    d = tmp_path_factory.mktemp("textured")
    data = list(videos.values())
    samples = [(f"{j:04d}", {"mp4": data[j % 2], "txt": f"clip {j}".encode()}) for j in range(6)]
    write_tar(d / "shard-0.tar", samples)
    rep = prepare_dataset(
        d, fields={"video": "mp4", "caption": "txt"}, sample_type="CaptionedVideoSample"
    )
    assert rep.num_samples == 6 and not rep.problems
    return d


@pytest.mark.parametrize("options", [{}, {"resize": "ffmpeg", "normalize": False}])
def test_thread_and_process_workers_give_the_same_batches(shards, options):
    cfg = VideoTransformConfig(num_frames=3, height=32, width=32, stride=2, crop="random")

    def batches(**kw):
        enc = VideoTaskEncoder(cfg, **options)
        ds = fpipe.get_train_dataset(shards, batch_size=2, task_encoder=enc, seed=3)
        return list(itertools.islice(fpipe.get_loader(ds, **kw), 3))

    ref = batches(num_workers=0)
    for kw in (dict(num_workers=2, worker_mode="thread"), dict(num_workers=2)):
        for a, b in zip(ref, batches(**kw), strict=True):
            assert a.__key__ == b.__key__
            assert torch.equal(a.video, b.video) and torch.equal(a.frame_indices, b.frame_indices)
