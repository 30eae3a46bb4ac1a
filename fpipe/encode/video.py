"""OpenSora-style video transforms as pure functions: frames in, training tensor out.

The chain, in the order :func:`video_transform` applies it:

1. temporal sampling: :func:`clip_frame_indices` picks ``num_frames`` indices at a fixed
   stride (:func:`sample_frame_indices`), from the first frame or from a start drawn from the
   sample's ``rng``, or spread evenly over the whole clip (:func:`whole_clip_indices`);
2. :func:`resize_short_side` scales the frames so that they cover the target size (for a
   square target: the short side becomes the target side), keeping the aspect ratio;
3. :func:`center_crop` or :func:`random_crop` (``rng``) cuts the target size out;
4. :func:`normalize` maps ``uint8`` ``[0, 255]`` to ``float32`` ``[-1, 1]``;
5. :func:`to_cthw` changes the layout from ``[T, C, H, W]`` (what
   :class:`fpipe.decode.av.AVDecoder` returns) to ``[C, T, H, W]``.

:func:`stack_videos` makes a batch ``[B, 3, T, H, W]``. Randomness comes only from a passed
``numpy.random.Generator`` (built from the sample's key), so a sample re-materialized after a
restore gets the same crop and the same frames. :class:`VideoTransformConfig` holds the
settings as a frozen record, so a pipeline that uses it can be printed and fingerprinted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec
import numpy as np
import torch
import torch.nn.functional as F

from fpipe.core.errors import ConfigError

__all__ = [
    "VideoTransformConfig",
    "center_crop",
    "clip_frame_indices",
    "cover_size",
    "crop_origin",
    "normalize",
    "random_crop",
    "resize_crop",
    "resize_short_side",
    "sample_frame_indices",
    "stack_videos",
    "take_frames",
    "to_cthw",
    "video_transform",
    "whole_clip_indices",
]


def sample_frame_indices(
    num_available: int,
    num_frames: int,
    *,
    stride: int = 1,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Indices of ``num_frames`` frames taken every ``stride`` frames.

    The window spans ``(num_frames - 1) * stride + 1`` frames. With ``rng`` its start is drawn
    uniformly from the valid starts (OpenSora's ``TemporalRandomCrop``); without, it starts at
    frame 0. A video shorter than the window gets ``num_frames`` indices spread evenly over
    all its frames (``linspace``, repeating frames when it has fewer than ``num_frames``).

    Returns:
      ``int64`` array ``[num_frames]``, non-decreasing, each in ``[0, num_available)``.

    >>> sample_frame_indices(10, 3, stride=2).tolist()
    [0, 2, 4]
    >>> sample_frame_indices(2, 4).tolist()
    [0, 0, 1, 1]
    """
    if num_available < 1 or num_frames < 1 or stride < 1:
        raise ValueError(
            f"need num_available, num_frames and stride >= 1, got "
            f"{num_available}, {num_frames}, {stride}"
        )
    span = (num_frames - 1) * stride + 1
    if span > num_available:
        return np.floor(np.linspace(0, num_available - 1, num_frames) + 0.5).astype(np.int64)
    start = 0 if rng is None else int(rng.integers(0, num_available - span + 1))
    return start + stride * np.arange(num_frames, dtype=np.int64)


def whole_clip_indices(num_available: int, num_frames: int) -> np.ndarray:
    """Indices of ``num_frames`` frames spread evenly over all ``num_available`` frames, first
    and last included: ``linspace(0, num_available - 1, num_frames)`` truncated to ints, as
    OpenSora samples a whole video (``frame_interval=-1``). Consecutive indices are about
    ``(num_available - 1) / (num_frames - 1)`` apart; a clip with fewer frames than
    ``num_frames`` repeats frames.

    >>> whole_clip_indices(100, 4).tolist()
    [0, 33, 66, 99]
    >>> whole_clip_indices(2, 3).tolist()
    [0, 0, 1]
    """
    if num_available < 1 or num_frames < 1:
        raise ValueError(
            f"need num_available and num_frames >= 1, got {num_available}, {num_frames}"
        )
    if num_frames == 1:
        return np.zeros(1, dtype=np.int64)
    # exact floor((n - 1) * i / (T - 1)): no float step that lands just below an integer
    return np.arange(num_frames, dtype=np.int64) * (num_available - 1) // (num_frames - 1)


def clip_frame_indices(
    config: VideoTransformConfig, num_available: int, rng: np.random.Generator | None = None
) -> np.ndarray:
    """The ``config.num_frames`` frame indices ``config.temporal`` asks for, out of
    ``num_available`` frames: :func:`whole_clip_indices` for ``"whole"``, else
    :func:`sample_frame_indices` at ``config.stride`` (its start from ``rng`` for
    ``"random"``)."""
    if config.temporal == "whole":
        return whole_clip_indices(num_available, config.num_frames)
    return sample_frame_indices(
        num_available,
        config.num_frames,
        stride=config.stride,
        rng=rng if config.temporal == "random" else None,
    )


def take_frames(video: torch.Tensor, indices: Sequence[int] | np.ndarray) -> torch.Tensor:
    """``video[indices]`` along the time axis of a ``[T, C, H, W]`` tensor."""
    return video[torch.as_tensor(np.asarray(indices, dtype=np.int64))]


def resize_short_side(
    video: torch.Tensor,
    size: int | tuple[int, int],
    *,
    mode: Literal["bilinear", "bicubic", "area", "nearest"] = "bilinear",
    antialias: bool = True,
) -> torch.Tensor:
    """Scale ``[T, C, H, W]`` frames, keeping the aspect ratio, to just cover ``size``.

    ``size`` is an int (the new short side) or ``(height, width)`` (the scale is
    ``max(height / H, width / W)``, so both sides reach at least the target, as needed before
    a crop). Returns ``float32`` with the input's value range (no normalization).
    """
    h, w = video.shape[-2:]
    nh, nw = cover_size((h, w), size)
    x = video.float()
    if (nh, nw) == (h, w):
        return x
    kwargs = {"antialias": antialias} if mode in ("bilinear", "bicubic") else {}
    align = {"align_corners": False} if mode in ("bilinear", "bicubic") else {}
    return F.interpolate(x, size=(nh, nw), mode=mode, **align, **kwargs)


def cover_size(shape: tuple[int, int], size: int | tuple[int, int]) -> tuple[int, int]:
    """``(height, width)`` that :func:`resize_short_side` scales frames of ``shape``
    ``(H, W)`` to: the aspect ratio kept, both sides at least ``size``.

    >>> cover_size((360, 640), 256)
    (256, 455)
    """
    th, tw = (size, size) if isinstance(size, int) else size
    h, w = int(shape[0]), int(shape[1])
    scale = max(th / h, tw / w)
    return max(th, round(h * scale)), max(tw, round(w * scale))


def crop_origin(
    crop: Literal["center", "random"],
    shape: tuple[int, int],
    size: tuple[int, int],
    rng: np.random.Generator | None = None,
) -> tuple[int, int]:
    """``(top, left)`` of the ``size`` window that :func:`center_crop` (``crop="center"``)
    or :func:`random_crop` (``"random"``: the same draws from ``rng``) cuts out of frames of
    ``shape`` ``(H, W)``."""
    (th, tw), (h, w) = size, shape
    if th > h or tw > w:
        raise ValueError(f"crop {size} is larger than the frames ({h}, {w})")
    if crop == "center":
        return (h - th) // 2, (w - tw) // 2
    if rng is None:
        raise ValueError("a random crop needs the sample's rng")
    top = int(rng.integers(0, h - th + 1))
    return top, int(rng.integers(0, w - tw + 1))


def resize_crop(
    video: torch.Tensor | Sequence[torch.Tensor],
    indices: Sequence[int] | np.ndarray,
    resized: tuple[int, int],
    origin: tuple[int, int],
    size: tuple[int, int],
    *,
    normalize: bool = True,
) -> torch.Tensor:
    """Frames ``indices`` of ``[T, C, H, W]`` frames (or of a list of ``[C, H, W]`` frames),
    resized to ``resized`` (as :func:`resize_short_side`), cropped to ``size`` at ``origin``
    ``(top, left)``, as a contiguous ``[C, T', h, w]`` clip: with ``normalize``, ``float32``
    in ``[-1, 1]`` (uint8 input clamped to ``[0, 255]`` first), exactly what resize, crop,
    :func:`normalize` and :func:`to_cthw` give one after the other; without, in the input's
    dtype (uint8 input is scaled by torch's uint8 kernel: within 1 of the rounded float
    result).

    One frame at a time, straight into the output: no float copy of the whole clip at full
    size, and the resize runs on contiguous frames (its fastest kernel; the same values)."""
    (th, tw), (top, left) = size, origin
    first = video[0]
    uint8 = first.dtype == torch.uint8
    floats = normalize or not uint8
    scale = tuple(resized) != tuple(first.shape[-2:])
    out = torch.empty(
        (first.shape[0], len(indices), th, tw), dtype=torch.float32 if floats else first.dtype
    )
    for j, i in enumerate(np.asarray(indices, dtype=np.int64).tolist()):
        x = video[i][None]
        if scale:
            if floats:
                x = torch.empty(x.shape, dtype=torch.float32).copy_(x)
            kwargs = {"align_corners": False, "antialias": True}
            x = F.interpolate(x, size=tuple(resized), mode="bilinear", **kwargs)
        out[:, j].copy_(x[0, :, top : top + th, left : left + tw])
    if normalize:
        if uint8:
            out.clamp_(0.0, 255.0)  # bilinear/antialias can overshoot slightly
        out.div_(127.5).sub_(1.0)
    return out


def center_crop(video: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """The centered ``(height, width)`` window of ``[..., H, W]`` frames."""
    th, tw = size
    h, w = video.shape[-2:]
    if th > h or tw > w:
        raise ValueError(f"crop {size} is larger than the frames ({h}, {w})")
    top, left = (h - th) // 2, (w - tw) // 2
    return video[..., top : top + th, left : left + tw]


def random_crop(
    video: torch.Tensor, size: tuple[int, int], rng: np.random.Generator
) -> torch.Tensor:
    """A ``(height, width)`` window of ``[..., H, W]`` frames at a position drawn from ``rng``
    (the same window for every frame)."""
    th, tw = size
    h, w = video.shape[-2:]
    if th > h or tw > w:
        raise ValueError(f"crop {size} is larger than the frames ({h}, {w})")
    top = int(rng.integers(0, h - th + 1))
    left = int(rng.integers(0, w - tw + 1))
    return video[..., top : top + th, left : left + tw]


def normalize(video: torch.Tensor) -> torch.Tensor:
    """Map values in ``[0, 255]`` to ``float32`` in ``[-1, 1]`` (OpenSora's mean = std = 0.5
    on ``[0, 1]``): ``x / 127.5 - 1``."""
    return video.float().div(127.5).sub(1.0)


def to_cthw(video: torch.Tensor) -> torch.Tensor:
    """``[T, C, H, W]`` to a contiguous ``[C, T, H, W]``."""
    return video.permute(1, 0, 2, 3).contiguous()


class VideoTransformConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Settings of :func:`video_transform`, checked when built."""

    num_frames: int  #: frames per output clip (T)
    height: int  #: output height, pixels (H)
    width: int  #: output width, pixels (W)
    stride: int = 1  #: take every ``stride``-th decoded frame
    #: "first": the window starts at frame 0; "random": a start drawn from the sample's rng;
    #: "whole": ``num_frames`` spread evenly over the whole clip (no stride, no draw)
    temporal: Literal["first", "random", "whole"] = "random"
    #: "center": centered crop; "random": a crop position drawn from the sample's rng
    crop: Literal["center", "random"] = "center"

    def __post_init__(self):
        for name in ("num_frames", "height", "width", "stride"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"VideoTransformConfig.{name} must be an int >= 1, got {value!r}")
        if self.temporal not in ("first", "random", "whole"):
            raise ConfigError(
                "VideoTransformConfig.temporal must be 'first', 'random' or 'whole', got "
                f"{self.temporal!r}"
            )
        if self.temporal == "whole" and self.stride != 1:
            raise ConfigError(
                f"VideoTransformConfig(temporal='whole') spreads the frames over the whole clip "
                f"(the stride follows from the clip's length); stride={self.stride} would be "
                f"ignored: leave stride at 1, or use temporal='first' or 'random'"
            )
        if self.crop not in ("center", "random"):
            raise ConfigError(
                f"VideoTransformConfig.crop must be 'center' or 'random', got {self.crop!r}"
            )


def video_transform(
    config: VideoTransformConfig,
    video: torch.Tensor,
    rng: np.random.Generator | None = None,
    *,
    normalize: bool = True,
) -> torch.Tensor:
    """The OpenSora chain: ``uint8 [T_in, 3, H_in, W_in]`` to ``float32 [3, T, H, W]`` in
    ``[-1, 1]`` with ``(T, H, W) = (num_frames, height, width)``.

    ``rng`` (the sample's generator) is required when ``config`` asks for a random start or
    crop; the temporal draw comes first, then the crop. Frames are sampled before resizing,
    so only the kept frames are scaled (one at a time, see :func:`resize_crop`).
    ``normalize=False`` keeps the input's dtype: ``uint8 [3, T, H, W]`` in ``[0, 255]`` for
    decoded video, a quarter of the bytes to move; :func:`normalize` it where you like (on
    the GPU, after the copy).

    >>> cfg = VideoTransformConfig(num_frames=4, height=8, width=8, temporal="first")
    >>> video_transform(cfg, torch.zeros(10, 3, 12, 16, dtype=torch.uint8)).shape
    torch.Size([3, 4, 8, 8])
    """
    needs_rng = config.temporal == "random" or config.crop == "random"
    if needs_rng and rng is None:
        raise ValueError("this VideoTransformConfig is random: pass the sample's rng")
    if video.ndim != 4 or video.shape[0] < 1:
        raise ValueError(f"expected a [T, C, H, W] video with T >= 1, got {tuple(video.shape)}")
    idx = clip_frame_indices(config, video.shape[0], rng)
    size = (config.height, config.width)
    resized = cover_size(video.shape[-2:], size)
    origin = crop_origin(config.crop, resized, size, rng)
    return resize_crop(video, idx, resized, origin, size, normalize=normalize)


def stack_videos(videos: Sequence[torch.Tensor]) -> torch.Tensor:
    """Stack ``[3, T, H, W]`` clips into a batch ``[B, 3, T, H, W]``; all shapes must match."""
    if not videos:
        raise ValueError("stack_videos needs at least one video")
    shapes = {tuple(v.shape) for v in videos}
    if len(shapes) != 1:
        raise ValueError(
            f"videos differ in shape {sorted(shapes)}: use a fixed (T, H, W) in the transform "
            f"or bucket by resolution and frames"
        )
    return torch.stack(list(videos))
