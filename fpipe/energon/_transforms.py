"""Energon's image transforms (``megatron.energon.transforms``) on fpipe.

:class:`MergeTransform` applies a list of transforms to an image (PIL image or ``[C, H, W]``
tensor). Consecutive :class:`CustomTransform` steps (geometric transforms written as a 3x3
matrix on pixel coordinates, Energon's ``apply_transform(matrix, dst_size)``) are merged into
one warp, as Energon merges its steps; any other transform (a torchvision transform, or any
callable) is applied as it is, so its result is exactly what the transform alone gives (Energon
re-implements torchvision's geometry as matrices, to within a grey level or two).

Randomness: inside a task-encoder hook run by the loader, the steps run with torch's, numpy's
and Python's global generators seeded from the sample's generator (a draw from
:func:`fpipe.sample_rng`), so a random crop or flip is the same for any number of workers and
after a restore. Outside a hook they draw from the global generators, as in Energon.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "CenterCropMapper",
    "CustomTransform",
    "MergeTransform",
    "RandomCropMapper",
    "RandomHorizontalFlipMapper",
    "RandomPerspectiveMapper",
    "RandomResizedCropMapper",
    "RandomRotationMapper",
    "RandomVerticalFlipMapper",
    "ResizeMapper",
    "TransformMapper",
]


class TransformMapper:
    """A step of a :class:`MergeTransform` (Energon's base): ``transform`` is the wrapped
    transform, applied when the step is called; the static helpers give the 3x3 matrices a
    :class:`CustomTransform` composes (pixel coordinates, y pointing down)."""

    def __init__(self, transform: Any = None):
        self.transform = transform

    def __call__(self, sample: Any) -> Any:
        return self.transform(sample)

    @staticmethod
    def translate(x: float, y: float) -> np.ndarray:
        m = np.eye(3)
        m[0, 2], m[1, 2] = x, y
        return m

    @staticmethod
    def rotate(angle: float) -> np.ndarray:
        """Counter-clockwise by ``angle`` radians (the y axis points down)."""
        m = np.eye(3)
        c, s = np.cos(angle), np.sin(angle)
        m[:2, :2] = [[c, s], [-s, c]]
        return m

    @staticmethod
    def scale(x: float, y: float) -> np.ndarray:
        return np.diag([x, y, 1.0])

    @staticmethod
    def shear(x: float, y: float) -> np.ndarray:
        m = np.eye(3)
        m[0, 1], m[1, 0] = x, y
        return m

    @staticmethod
    def hflip() -> np.ndarray:
        return np.diag([-1.0, 1.0, 1.0])

    @staticmethod
    def vflip() -> np.ndarray:
        return np.diag([1.0, -1.0, 1.0])

    def apply_transform(self, matrix: np.ndarray, dst_size: np.ndarray) -> tuple[Any, Any, Any]:
        """``(matrix, dst_size, params)`` after this step: the step's matrix applied after
        ``matrix``, the output size ``(height, width)``, and what was drawn."""
        raise NotImplementedError(f"{type(self).__name__} is applied as its transform")

    def fill(self) -> Any:
        """The fill value of pixels outside the source (None: black)."""
        return None

    def interpolation(self) -> Any:
        """The interpolation (None: bilinear)."""
        return None


class CustomTransform(TransformMapper):
    """A geometric transform written as a matrix: override :meth:`apply_transform`."""


# Energon's names for the steps it maps torchvision transforms to; here the wrapped transform
# is applied as it is.
class ResizeMapper(TransformMapper):
    pass


class RandomResizedCropMapper(TransformMapper):
    pass


class CenterCropMapper(TransformMapper):
    pass


class RandomCropMapper(TransformMapper):
    pass


class RandomHorizontalFlipMapper(TransformMapper):
    pass


class RandomVerticalFlipMapper(TransformMapper):
    pass


class RandomRotationMapper(TransformMapper):
    pass


class RandomPerspectiveMapper(TransformMapper):
    pass


class MergeTransform:
    """Applies ``transforms`` in order (see the module docstring)."""

    def __init__(self, transforms: list[Any]):
        self.transforms = list(transforms)
        for t in self.transforms:
            if not callable(t) and not isinstance(t, CustomTransform):
                raise TypeError(f"MergeTransform: {t!r} is not a transform")

    def __call__(self, x: Any) -> Any:
        from fpipe.core.errors import ConfigError
        from fpipe.encode.hooks import sample_rng, seeded_global_rngs

        try:
            rng = sample_rng()
        except ConfigError:  # outside the loader: the global generators, as in Energon
            return self._apply(x)
        with seeded_global_rngs(int(rng.integers(2**31 - 1))):
            return self._apply(x)

    forward = __call__

    def _apply(self, x: Any) -> Any:
        i, steps = 0, self.transforms
        while i < len(steps):
            if not isinstance(steps[i], CustomTransform):
                x = steps[i](x)
                i += 1
                continue
            j = i
            while j < len(steps) and isinstance(steps[j], CustomTransform):
                j += 1
            x = _warp(x, steps[i:j])
            i = j
        return x


def _warp(x: Any, steps: list[CustomTransform]) -> Any:
    """``x`` warped by the composed matrices of ``steps``, one resampling."""
    size = (x.height, x.width) if hasattr(x, "getbands") else tuple(x.shape[-2:])
    matrix, dst = np.eye(3), np.array(size, dtype=np.int64)
    for step in steps:
        matrix, dst, _params = step.apply_transform(matrix, dst)
    fills = {step.fill() for step in steps} - {None}
    if len(fills) > 1:
        raise ValueError(f"MergeTransform: the merged steps' fill values differ: {fills}")
    fill = fills.pop() if fills else None
    inverse = np.linalg.inv(matrix)
    inverse /= inverse[2, 2]
    out_h, out_w = int(dst[0]), int(dst[1])
    if hasattr(x, "getbands"):
        from PIL import Image

        method = Image.NEAREST if _nearest(steps) else Image.BILINEAR
        color = (fill,) * len(x.getbands()) if isinstance(fill, (int, float)) else fill
        if np.allclose(inverse[2, :2], 0):
            coeffs = tuple(inverse.flatten()[:6])
            return x.transform((out_w, out_h), Image.AFFINE, coeffs, method, fillcolor=color)
        coeffs = tuple(inverse.flatten()[:8])
        return x.transform((out_w, out_h), Image.PERSPECTIVE, coeffs, method, fillcolor=color)
    return _warp_tensor(x, inverse, out_h, out_w, "nearest" if _nearest(steps) else "bilinear")


def _nearest(steps: list[CustomTransform]) -> bool:
    return any(str(step.interpolation()).lower().endswith("nearest") for step in steps)


def _warp_tensor(x: Any, inverse: np.ndarray, out_h: int, out_w: int, mode: str) -> Any:
    """A ``[C, H, W]`` tensor sampled at ``inverse`` of each output pixel's centre."""
    import torch

    ys, xs = torch.meshgrid(
        torch.arange(out_h, dtype=torch.float64) + 0.5,
        torch.arange(out_w, dtype=torch.float64) + 0.5,
        indexing="ij",
    )
    pts = torch.stack([xs, ys, torch.ones_like(xs)], -1) @ torch.as_tensor(inverse).T
    src = pts[..., :2] / pts[..., 2:3]
    h, w = x.shape[-2:]
    grid = torch.stack([src[..., 0] / w * 2 - 1, src[..., 1] / h * 2 - 1], -1)
    out = torch.nn.functional.grid_sample(
        x[None].to(torch.float32), grid[None].to(torch.float32), mode=mode, align_corners=False
    )[0]
    if x.dtype.is_floating_point:
        return out.to(x.dtype)
    info = torch.iinfo(x.dtype)
    return out.round().clamp(info.min, info.max).to(x.dtype)
