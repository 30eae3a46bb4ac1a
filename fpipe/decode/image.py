"""Image decoding with Pillow: RGB output as PIL, numpy HWC or torch CHW uint8, an optional
target size (resize + crop), JPEG reduced-scale ("draft") decoding and a pixel-count limit.

Design choices (see ``docs/samples.md``):

- **Bomb limits from the header.** ``Image.open`` only reads the header; the pixel count is
  checked against ``DecodeLimits.max_image_pixels`` (and, with a target size, against
  ``max_decode_ratio`` after the draft reduction) before any pixel is decoded. Pillow's own global
  ``Image.MAX_IMAGE_PIXELS`` is never modified; its warning is silenced inside the call
  because fpipe's limit replaces it (Pillow still refuses images above twice its limit).
- **Draft mode.** With a target size, a JPEG is decoded by libjpeg at the largest DCT scale
  (1/2, 1/4, 1/8) that keeps it at least as large as the region the final resize needs, then
  resized with a bilinear (antialiased) filter. ``bench/image_decode.py`` measures the speedup
  and the PSNR against a full decode with the same resize (above 30 dB).
- **Resize and crop in one step.** The crop box is mapped back into source pixels and passed as
  ``box=`` to ``Image.resize``, so only the kept region is resampled.
- **Randomness** (``crop="random"``) only from the ``rng`` argument. The crop offset is drawn on
  the geometry of the original image size, so draft on or off picks the same region.
"""

from __future__ import annotations

import io
import math
import warnings
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
from PIL import Image, UnidentifiedImageError

from fpipe.core.errors import BadSampleError, ConfigError, error_text
from fpipe.core.fork_locks import fork_safe_lock
from fpipe.decode import _jpeg
from fpipe.decode._pixels import pixel_view
from fpipe.decode.extensions import IMAGE_EXTENSIONS
from fpipe.decode.limits import DECODE_RATIO_FLOOR, DEFAULT_LIMITS, DecodeLimits, limit_hint

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "IMAGE_EXTENSIONS",
    "ImageDecodeOptions",
    "decode_image",
    "decode_image_with",
    "image_size",
    "psnr",
]


_OUTS = ("pil", "numpy", "torch")
#: ``warnings.catch_warnings`` swaps the process's filter list: one thread at a time (thread
#: workers), or two overlapping blocks would leave a filter behind or drop one.
_WARNINGS_LOCK = fork_safe_lock(globals(), "_WARNINGS_LOCK")

_MODES = ("RGB", "L", "RGBA")
_DTYPES = ("uint8", "float32")
_RESIZES = ("short_side", "long_side", "exact")
_CROPS = ("center", "random", "none")
_RESAMPLE = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "box": Image.Resampling.BOX,
    "hamming": Image.Resampling.HAMMING,
    "lanczos": Image.Resampling.LANCZOS,
}


class ImageDecodeOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How to decode an image member; a data record, so a pipeline config can hold it.

    Checked when built: an unknown name raises :class:`ConfigError` listing the valid ones.
    The size limits (pixels, decode ratio) are in :class:`~fpipe.decode.limits.DecodeLimits`.
    """

    #: Output type: ``"pil"`` (RGB ``PIL.Image``), ``"numpy"`` (HWC uint8) or ``"torch"``
    #: (CHW uint8 tensor).
    out: str = "torch"
    #: ``None`` keeps the decoded size; an int ``t`` or ``(height, width)`` is the output size.
    target_size: int | tuple[int, int] | None = None
    #: ``"short_side"``: scale so the image covers the target (short side = ``t``), then crop;
    #: ``"long_side"``: scale so the image fits in the target (long side = ``t``), no crop;
    #: ``"exact"``: scale both sides to the target, aspect ratio not kept, no crop.
    resize: str = "short_side"
    #: For ``"short_side"``: ``"center"``, ``"random"`` (needs ``rng``) or ``"none"`` (keep
    #: the whole scaled image).
    crop: str = "center"
    #: Decode JPEGs at a reduced DCT scale (1/2, 1/4, 1/8) when a target size allows it.
    draft: bool = True
    #: Resampling filter name (``bilinear``, ``bicubic``, ``lanczos``, ``box``, ...).
    resample: str = "bilinear"
    #: Pillow's ``reducing_gap`` for the final resize (``None``: exact filter on all pixels).
    reducing_gap: float | None = None
    #: Channels: ``"RGB"`` (3), ``"L"`` (grey: a 2-D array / tensor) or ``"RGBA"`` (4).
    mode: str = "RGB"
    #: ``"uint8"`` (0..255) or ``"float32"`` (0..1, WebDataset's and Energon's ``torchrgb``);
    #: ignored for ``out="pil"``.
    dtype: str = "uint8"

    def __post_init__(self) -> None:
        _check_choice("out", self.out, _OUTS)
        _check_choice("resize", self.resize, _RESIZES)
        _check_choice("crop", self.crop, _CROPS)
        _check_choice("resample", self.resample, tuple(_RESAMPLE))
        _check_choice("mode", self.mode, _MODES)
        _check_choice("dtype", self.dtype, _DTYPES)
        ts = self.target_size
        sizes = (ts,) if isinstance(ts, int) else (() if ts is None else tuple(ts))
        if ts is not None and (len(sizes) not in (1, 2) or any(int(s) < 1 for s in sizes)):
            raise ConfigError(
                f"image target_size must be a positive int or (height, width), got {ts!r}"
            )
        if self.reducing_gap is not None and self.reducing_gap < 1.0:
            raise ConfigError(f"image reducing_gap must be >= 1.0 or None, got {self.reducing_gap}")


def _check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ConfigError(f"image option {name}={value!r} is not one of {', '.join(choices)}")


def decode_image(
    data: bytes,
    *,
    out: str = "torch",
    target_size: int | tuple[int, int] | None = None,
    resize: str = "short_side",
    crop: str = "center",
    draft: bool = True,
    resample: str = "bilinear",
    reducing_gap: float | None = None,
    limits: DecodeLimits = DEFAULT_LIMITS,
    rng: np.random.Generator | None = None,
    path: str = "",
    key: str = "",
) -> Any:
    """Decode image bytes to RGB, optionally resized and cropped to ``target_size``.

    Args:
      data: encoded image (any format Pillow reads).
      out, target_size, resize, crop, draft, resample, reducing_gap: see
        :class:`ImageDecodeOptions`.
      limits: :class:`~fpipe.decode.limits.DecodeLimits`; ``max_image_pixels`` and
        ``max_decode_ratio`` apply.
      rng: the only source of randomness, needed for ``crop="random"``.
      path, key: where the bytes came from; named in errors.

    Returns:
      ``PIL.Image.Image`` (RGB), ``numpy.ndarray`` (H, W, 3) uint8 or ``torch.Tensor``
      (3, H, W) uint8, depending on ``out``.

    Raises:
      BadSampleError: undecodable or truncated data, more pixels than ``max_image_pixels``,
        or more pixels to decode than ``max_decode_ratio`` allows for the target size.
      ConfigError: invalid options.

    Examples:
      >>> import io
      >>> from PIL import Image
      >>> buf = io.BytesIO(); Image.new("RGB", (640, 480)).save(buf, "JPEG")
      >>> decode_image(buf.getvalue(), out="numpy", target_size=224).shape
      (224, 224, 3)
    """
    options = ImageDecodeOptions(
        out=out,
        target_size=target_size,
        resize=resize,
        crop=crop,
        draft=draft,
        resample=resample,
        reducing_gap=reducing_gap,
    )
    return decode_image_with(data, options, limits=limits, rng=rng, path=path, key=key)


def decode_image_with(
    data: bytes,
    options: ImageDecodeOptions,
    *,
    limits: DecodeLimits = DEFAULT_LIMITS,
    rng: np.random.Generator | None = None,
    path: str = "",
    key: str = "",
) -> Any:
    """Decode image bytes as :func:`decode_image` does, with the options given as one record."""
    if options.crop == "random" and options.target_size is not None and rng is None:
        raise ConfigError("crop='random' needs an explicit rng (numpy.random.Generator)")
    head = _jpeg.header(data) if options.out != "pil" else None  # a PIL out keeps Pillow's info
    if head is None:
        img = _open(data, limits.max_image_pixels, path, key)
        full = img.size
    else:
        full = head[:2]
        _check_pixels(full, limits.max_image_pixels, path, key)
    geometry = _geometry(full, options, rng)
    if head is not None:
        # Pillow's reduced-scale decode, a stream libjpeg-turbo warns about: Pillow, as before
        fast = None if _reduces(full, geometry, options) else _jpeg.decode(data, head[2])
        img = fast if fast is not None else _open(data, limits.max_image_pixels, path, key)
    try:
        img = _resize(img, options, geometry, limits.max_decode_ratio, path, key)
        if img.mode != options.mode:
            img = img.convert(options.mode)
        img.load()  # Pillow decodes lazily: a truncated stream fails here, not in the caller
    except ConfigError:
        raise
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise BadSampleError(path, key, f"cannot decode image: {error_text(e)}") from e
    return _to_out(img, options.out, options.dtype)


def image_size(data: bytes, *, path: str = "", key: str = "") -> tuple[int, int]:
    """Read ``(width, height)`` of an encoded image from its header only (no pixel decode)."""
    img = _open(data, None, path, key)
    return img.size


def _open(data: bytes, max_pixels: int | None, path: str, key: str) -> Image.Image:
    try:
        with _WARNINGS_LOCK, warnings.catch_warnings():
            # fpipe's max_pixels replaces Pillow's global limit (whose warning fires at 89 MP).
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as e:
        raise BadSampleError(path, key, f"image refused as a decompression bomb: {e}") from e
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        raise BadSampleError(path, key, f"cannot decode image: {error_text(e)}") from e
    _check_pixels(img.size, max_pixels, path, key)
    return img


def _check_pixels(size: tuple[int, int], max_pixels: int | None, path: str, key: str) -> None:
    w, h = size
    if max_pixels is not None and w * h > max_pixels:
        raise BadSampleError(
            path,
            key,
            f"image of {w}x{h} = {w * h} pixels exceeds max_image_pixels={max_pixels} "
            f"(decompression-bomb limit; {limit_hint('max_image_pixels')})",
        )


def _target_hw(target_size: int | tuple[int, int]) -> tuple[int, int]:
    if isinstance(target_size, int):
        return target_size, target_size
    th, tw = target_size
    return int(th), int(tw)


#: Output size and the kept region of the source, in coordinates normalized to [0, 1].
_Geometry = tuple[int, int, tuple[float, float, float, float]]


def _geometry(
    full: tuple[int, int], o: ImageDecodeOptions, rng: np.random.Generator | None
) -> _Geometry | None:
    """Where the output comes from, on the original size (None: no target size). A random crop
    draws its offset here, once per image."""
    if o.target_size is None:
        return None
    th, tw = _target_hw(o.target_size)
    full_w, full_h = full
    if o.resize == "exact":
        return tw, th, (0.0, 0.0, 1.0, 1.0)
    if o.resize == "long_side":
        s = min(th / full_h, tw / full_w)
        return max(1, round(full_w * s)), max(1, round(full_h * s)), (0.0, 0.0, 1.0, 1.0)
    s = max(th / full_h, tw / full_w)
    sw, sh = full_w * s, full_h * s
    if o.crop == "none":
        return max(1, round(sw)), max(1, round(sh)), (0.0, 0.0, 1.0, 1.0)
    extra_w, extra_h = max(sw - tw, 0.0), max(sh - th, 0.0)
    if o.crop == "center":
        x0, y0 = extra_w / 2, extra_h / 2
    else:
        assert rng is not None  # checked by decode_image_with
        x0 = float(rng.integers(0, math.floor(extra_w) + 1))
        y0 = float(rng.integers(0, math.floor(extra_h) + 1))
    return tw, th, (x0 / sw, y0 / sh, (x0 + tw) / sw, (y0 + th) / sh)


def _draft_size(geometry: _Geometry) -> tuple[int, int]:
    """The smallest decode whose kept region is still >= the output size in both directions."""
    out_w, out_h, box = geometry
    return math.ceil(out_w / (box[2] - box[0])), math.ceil(out_h / (box[3] - box[1]))


def _reduces(full: tuple[int, int], geometry: _Geometry | None, o: ImageDecodeOptions) -> bool:
    """Whether Pillow's ``draft`` decodes this JPEG at a reduced scale (1/2 or less: it takes
    the largest of 1/8, 1/4, 1/2 that keeps :func:`_draft_size`, else decodes it whole). The
    one test of it: :func:`_resize` drafts only then, and the simplejpeg path is left then."""
    if not o.draft or geometry is None:
        return False
    need_w, need_h = _draft_size(geometry)
    return full[0] // need_w >= 2 and full[1] // need_h >= 2


def _resize(
    img: Image.Image,
    o: ImageDecodeOptions,
    geometry: _Geometry | None,
    max_ratio: float | None,
    path: str,
    key: str,
) -> Any:
    if geometry is None:
        return img
    out_w, out_h, box = geometry
    if img.format == "JPEG" and _reduces(img.size, geometry, o):
        img.draft("RGB", _draft_size(geometry))
    w, h = img.size  # may be reduced by draft
    if max_ratio is not None:
        budget = max(DECODE_RATIO_FLOOR, max_ratio * out_w * out_h)
        if w * h > budget:
            raise BadSampleError(
                path,
                key,
                f"image of {w}x{h} pixels to decode for a {out_w}x{out_h} output: over "
                f"max_decode_ratio={max_ratio:g} pixels per output pixel (floor "
                f"{DECODE_RATIO_FLOOR}); {limit_hint('max_decode_ratio')}",
            )
    src_box = (box[0] * w, box[1] * h, box[2] * w, box[3] * h)
    if img.mode not in ("RGB", "L", "RGBA"):
        img = img.convert("RGBA" if o.mode == "RGBA" else "RGB")
    if (out_w, out_h) == (w, h) and src_box == (0.0, 0.0, float(w), float(h)):
        return img
    return img.resize(
        (out_w, out_h), _RESAMPLE[o.resample], box=src_box, reducing_gap=o.reducing_gap
    )


def _to_out(img: Image.Image, out: str, dtype: str = "uint8") -> Any:
    if out == "pil":
        return img
    view = pixel_view(img) if out == "torch" else None
    # np.asarray copies (Image.tobytes); a view is Pillow's own memory, copied once below
    arr = np.asarray(img) if view is None else view
    if out == "torch" and arr.ndim == 3:
        arr = arr.transpose(2, 0, 1)
    if dtype == "float32":
        arr = np.ascontiguousarray(arr, dtype=np.float32) / np.float32(255.0)
    # the output is always memory of its own: neither Pillow's nor a read-only buffer
    out_arr = np.ascontiguousarray(arr)
    if not out_arr.flags.owndata:
        out_arr = out_arr.copy()
    if out == "numpy":
        return out_arr
    import torch  # lazy: decode must not import torch at import time

    return torch.from_numpy(out_arr)


def psnr(a: Any, b: Any, *, max_value: float = 255.0) -> float:
    """Peak signal-to-noise ratio in dB between two images of the same shape.

    Accepts PIL images, numpy arrays or torch tensors; returns ``inf`` for identical inputs.

    Examples:
      >>> import numpy as np
      >>> round(psnr(np.zeros((2, 2), np.uint8), np.full((2, 2), 255, np.uint8)), 1)
      0.0
    """
    x, y = _as_float(a), _as_float(b)
    if x.shape != y.shape:
        raise ValueError(f"psnr needs equal shapes, got {x.shape} and {y.shape}")
    mse = float(np.mean((x - y) ** 2))
    if mse == 0.0:
        return math.inf
    return 10.0 * math.log10(max_value**2 / mse)


def _as_float(x: Any) -> np.ndarray:
    if isinstance(x, Image.Image):
        return np.asarray(x, dtype=np.float64)
    if hasattr(x, "detach"):  # torch tensor, without importing torch
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)
