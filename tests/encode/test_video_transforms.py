"""Tests of the OpenSora-style transform chain in fpipe.encode.video (no decoding needed)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fpipe.core.errors import ConfigError
from fpipe.encode.video import (
    VideoTransformConfig,
    center_crop,
    normalize,
    random_crop,
    resize_short_side,
    sample_frame_indices,
    stack_videos,
    take_frames,
    to_cthw,
    video_transform,
    whole_clip_indices,
)


def _video(t: int = 20, h: int = 36, w: int = 48) -> torch.Tensor:
    """uint8 [T, 3, H, W] whose frame i is filled with the value i."""
    return torch.arange(t, dtype=torch.uint8).view(t, 1, 1, 1).expand(t, 3, h, w).contiguous()


def test_fixed_stride_indices():
    assert sample_frame_indices(20, 4, stride=3).tolist() == [0, 3, 6, 9]
    assert sample_frame_indices(10, 10).tolist() == list(range(10))
    assert sample_frame_indices(20, 4).dtype == np.int64


def test_random_start_uses_the_given_rng_only():
    np.random.seed(0)
    a = sample_frame_indices(100, 8, stride=2, rng=np.random.default_rng(5))
    np.random.seed(1)
    torch.manual_seed(1)
    b = sample_frame_indices(100, 8, stride=2, rng=np.random.default_rng(5))
    assert a.tolist() == b.tolist()
    assert np.all(np.diff(a) == 2) and a[0] >= 0 and a[-1] < 100
    starts = {int(sample_frame_indices(100, 8, rng=np.random.default_rng(s))[0]) for s in range(20)}
    assert len(starts) > 5


def test_short_video_spreads_and_repeats():
    idx = sample_frame_indices(5, 8, stride=2)
    assert idx[0] == 0 and idx[-1] == 4 and len(idx) == 8
    assert np.all(np.diff(idx) >= 0)


def test_bad_sampling_arguments():
    with pytest.raises(ValueError):
        sample_frame_indices(0, 4)
    with pytest.raises(ValueError):
        sample_frame_indices(10, 4, stride=0)


def test_resize_covers_target_and_keeps_aspect():
    v = _video(2, 36, 48)
    assert resize_short_side(v, 18).shape == (2, 3, 18, 24)
    assert resize_short_side(v, (24, 48)).shape == (2, 3, 36, 48)  # already covers: unchanged
    assert resize_short_side(v, (40, 80)).shape == (2, 3, 60, 80)  # width decides the scale
    out = resize_short_side(v, 18)
    assert out.dtype == torch.float32
    assert torch.allclose(out[1], torch.ones_like(out[1]))  # flat frames stay flat


def test_center_and_random_crop():
    v = torch.arange(6 * 8, dtype=torch.float32).view(1, 1, 6, 8)
    c = center_crop(v, (2, 4))
    assert c.shape == (1, 1, 2, 4) and c[0, 0, 0, 0] == 2 * 8 + 2
    r1 = random_crop(v, (2, 4), np.random.default_rng(3))
    r2 = random_crop(v, (2, 4), np.random.default_rng(3))
    assert torch.equal(r1, r2)
    crops = [random_crop(v, (2, 4), np.random.default_rng(s)) for s in range(30)]
    corners = {float(c[0, 0, 0, 0]) for c in crops}
    assert len(corners) > 3
    with pytest.raises(ValueError):
        center_crop(v, (7, 4))


def test_normalize_and_layout():
    x = torch.tensor([0, 255, 127.5])
    assert normalize(x).tolist() == pytest.approx([-1.0, 1.0, 0.0])
    assert normalize(torch.tensor([0, 255], dtype=torch.uint8)).dtype == torch.float32
    v = _video(4, 6, 8)
    c = to_cthw(v)
    assert c.shape == (3, 4, 6, 8) and c.is_contiguous()
    assert torch.equal(c[:, 2], v[2])


def test_take_frames():
    assert take_frames(_video(10), np.array([1, 1, 7]))[:, 0, 0, 0].tolist() == [1, 1, 7]


def test_chain_shapes_and_frames():
    cfg = VideoTransformConfig(num_frames=4, height=16, width=16, stride=3, temporal="first")
    out = video_transform(cfg, _video(20, 36, 48))
    assert out.shape == (3, 4, 16, 16) and out.dtype == torch.float32
    # frame i is flat with value i: after the chain, value i / 127.5 - 1
    assert out[0, :, 8, 8].tolist() == pytest.approx([i / 127.5 - 1 for i in (0, 3, 6, 9)])
    assert out.min() >= -1.0 and out.max() <= 1.0


def test_random_chain_is_a_function_of_the_rng():
    cfg = VideoTransformConfig(num_frames=4, height=16, width=16, temporal="random", crop="random")
    v = torch.randint(0, 256, (30, 3, 24, 40), dtype=torch.uint8, generator=torch.Generator())
    a = video_transform(cfg, v, np.random.default_rng(11))
    b = video_transform(cfg, v, np.random.default_rng(11))
    c = video_transform(cfg, v, np.random.default_rng(12))
    assert torch.equal(a, b) and not torch.equal(a, c)
    with pytest.raises(ValueError, match="rng"):
        video_transform(cfg, v)


def test_stack_videos():
    cfg = VideoTransformConfig(num_frames=4, height=8, width=8, temporal="first")
    batch = stack_videos([video_transform(cfg, _video(10, 12, 16)) for _ in range(3)])
    assert batch.shape == (3, 3, 4, 8, 8)
    with pytest.raises(ValueError, match="shape"):
        stack_videos([torch.zeros(3, 4, 8, 8), torch.zeros(3, 5, 8, 8)])
    with pytest.raises(ValueError):
        stack_videos([])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_frames": 0, "height": 8, "width": 8},
        {"num_frames": 4, "height": -1, "width": 8},
        {"num_frames": 4, "height": 8, "width": 8, "stride": 0},
        {"num_frames": 4, "height": 8, "width": 8, "crop": "left"},
        {"num_frames": 4, "height": 8, "width": 8, "temporal": "middle"},
        {"num_frames": 4, "height": 8, "width": 8, "temporal": "whole", "stride": 2},
    ],
)
def test_config_is_checked_when_built(kwargs):
    with pytest.raises(ConfigError):
        VideoTransformConfig(**kwargs)


def test_whole_clip_indices_spread_over_the_clip():
    # OpenSora's whole-video sampling: linspace(0, n - 1, T), truncated, first and last kept
    assert whole_clip_indices(100, 4).tolist() == [0, 33, 66, 99]
    assert whole_clip_indices(30, 4).tolist() == [0, 9, 19, 29]
    assert whole_clip_indices(7, 1).tolist() == [0]
    assert whole_clip_indices(2, 5).tolist() == [0, 0, 0, 0, 1]  # a short clip repeats frames
    for n in range(1, 80):
        for t in (1, 2, 3, 5, 8, 16):
            idx = whole_clip_indices(n, t)
            exact = [(n - 1) * i // (t - 1) if t > 1 else 0 for i in range(t)]
            assert idx.tolist() == exact and idx.dtype == np.int64
            assert np.allclose(idx, np.linspace(0, n - 1, t), atol=1 - 1e-9)  # truncation only
    with pytest.raises(ValueError):
        whole_clip_indices(0, 4)


def test_whole_clip_chain_uses_every_part_of_the_clip():
    cfg = VideoTransformConfig(num_frames=4, height=16, width=16, temporal="whole")
    out = video_transform(cfg, _video(31, 36, 48))  # no rng needed: nothing is drawn
    assert out[0, :, 8, 8].tolist() == pytest.approx([i / 127.5 - 1 for i in (0, 10, 20, 30)])
