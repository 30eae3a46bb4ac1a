"""Image decoding: output types, bomb limit, corrupt data, target size, draft mode, rng."""

from __future__ import annotations

import io
import struct
import warnings
import zlib

import numpy as np
import pytest
from PIL import Image, JpegImagePlugin

from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.decode.image import ImageDecodeOptions, decode_image, image_size, psnr
from fpipe.decode.limits import DecodeLimits


def smooth_rgb(w: int, h: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack([128 + 100 * np.sin(xx / 37.0), 128 + 100 * np.cos(yy / 23.0), xx * 0 + 90], -1)
    img = img + rng.normal(0, 3, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def encode(arr: np.ndarray | Image.Image, fmt: str = "JPEG", **kw) -> bytes:
    img = arr if isinstance(arr, Image.Image) else Image.fromarray(arr)
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def png_header_only(w: int, h: int) -> bytes:
    """A PNG claiming w x h with (almost) no pixel data: a few hundred bytes."""

    def chunk(tag: bytes, body: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(tag + body) & 0xFFFFFFFF)
        return struct.pack(">I", len(body)) + tag + body + crc

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 64)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


JPEG = encode(smooth_rgb(640, 480), quality=92)


def test_output_types():
    pil = decode_image(JPEG, out="pil")
    assert isinstance(pil, Image.Image) and pil.mode == "RGB" and pil.size == (640, 480)
    arr = decode_image(JPEG, out="numpy")
    assert arr.shape == (480, 640, 3) and arr.dtype == np.uint8 and arr.flags.writeable
    t = decode_image(JPEG, out="torch")
    assert tuple(t.shape) == (3, 480, 640) and str(t.dtype) == "torch.uint8"
    assert t.is_contiguous()
    np.testing.assert_array_equal(t.permute(1, 2, 0).numpy(), arr)


@pytest.mark.parametrize("mode", ["L", "RGBA", "P", "CMYK"])
def test_other_modes_become_rgb(mode):
    img = Image.fromarray(smooth_rgb(64, 48)).convert(mode)
    data = encode(img, "JPEG" if mode in ("L", "CMYK") else "PNG")
    assert decode_image(data, out="numpy").shape == (48, 64, 3)
    assert decode_image(data, out="numpy", target_size=32).shape == (32, 32, 3)


def test_bomb_refused_from_header_before_decoding():
    # 12000 x 9000 = 108 MP: above the default 100 MP limit, only a header on disk.
    data = png_header_only(12000, 9000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Pillow's own bomb warning must not leak
        with pytest.raises(BadSampleError) as ei:
            decode_image(data, path="shard-3.tar", key="shard-3/000042")
    e = ei.value
    assert e.path == "shard-3.tar" and e.key == "shard-3/000042"
    assert "max_image_pixels" in e.reason and "12000x9000" in e.reason
    assert "DecodeLimits(max_image_pixels=" in e.reason  # how to raise it


def test_bomb_limit_configurable_and_checked_before_decode():
    data = JPEG[: len(JPEG) // 3]  # truncated: decoding would fail differently
    with pytest.raises(BadSampleError, match="max_image_pixels=1000"):
        decode_image(data, limits=DecodeLimits(max_image_pixels=1000), key="k")
    # a large limit lets a normal image through; None disables the limit
    no_limit = DecodeLimits(max_image_pixels=None)
    assert decode_image(JPEG, out="numpy", limits=no_limit).shape == (480, 640, 3)


def test_pillow_hard_bomb_error_becomes_bad_sample():
    data = png_header_only(20000, 20000)  # 400 MP, above Pillow's own hard limit
    with pytest.raises(BadSampleError, match="bomb") as ei:
        decode_image(data, limits=DecodeLimits(max_image_pixels=None), key="k1")
    assert ei.value.key == "k1"


@pytest.mark.parametrize(
    "data", [b"not an image at all", b"", JPEG[: len(JPEG) // 2]], ids=["junk", "empty", "trunc"]
)
def test_corrupt_image_names_key(data):
    with pytest.raises(BadSampleError) as ei:
        decode_image(data, path="a.tar", key="a/007", target_size=64)
    assert ei.value.key == "a/007" and ei.value.path == "a.tar"
    assert "a/007" in str(ei.value)


def test_image_size_from_header():
    assert image_size(JPEG) == (640, 480)
    assert image_size(png_header_only(300, 200)) == (300, 200)


def test_short_side_center_crop():
    out = decode_image(JPEG, out="numpy", target_size=224)
    assert out.shape == (224, 224, 3)
    ref = np.asarray(
        Image.open(io.BytesIO(JPEG))
        .convert("RGB")
        .resize((299, 224), Image.Resampling.BILINEAR)
        .crop((37, 0, 261, 224))
    )
    assert psnr(out, ref) > 30


@pytest.mark.parametrize(
    ("kw", "shape"),
    [
        ({"target_size": 224, "crop": "none"}, (224, 299, 3)),
        ({"target_size": 200, "resize": "long_side"}, (150, 200, 3)),
        ({"target_size": (100, 50), "resize": "exact"}, (100, 50, 3)),
        ({"target_size": (100, 300)}, (100, 300, 3)),
        ({"target_size": 1000}, (1000, 1000, 3)),  # upscaling works too
    ],
)
def test_resize_modes(kw, shape):
    assert decode_image(JPEG, out="numpy", **kw).shape == shape


def test_draft_used_and_close_to_full_decode(monkeypatch):
    big = encode(smooth_rgb(1600, 1200, seed=1), quality=90)
    calls = []
    orig = JpegImagePlugin.JpegImageFile.draft

    def spy(self, mode, size):
        calls.append(size)
        return orig(self, mode, size)

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft", spy)
    full = decode_image(big, out="numpy", target_size=224, draft=False)
    assert calls == []
    drafted = decode_image(big, out="numpy", target_size=224)
    assert calls == [(299, 224)]
    assert drafted.shape == full.shape == (224, 224, 3)
    assert psnr(drafted, full) > 30


def test_draft_not_used_when_no_reduction_possible(monkeypatch):
    calls = []
    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft", lambda *a: calls.append(a))
    decode_image(JPEG, out="numpy", target_size=1000)
    decode_image(JPEG, out="numpy")
    assert calls == []


def test_random_crop_needs_rng_and_is_reproducible():
    with pytest.raises(ConfigError, match="rng"):
        decode_image(JPEG, target_size=128, crop="random")
    a = decode_image(
        JPEG, out="numpy", target_size=128, crop="random", rng=np.random.default_rng(5)
    )
    b = decode_image(
        JPEG, out="numpy", target_size=128, crop="random", rng=np.random.default_rng(5)
    )
    np.testing.assert_array_equal(a, b)
    outs = {
        decode_image(
            JPEG, out="numpy", target_size=128, crop="random", rng=np.random.default_rng(s)
        ).tobytes()
        for s in range(6)
    }
    assert len(outs) > 1


def test_random_crop_same_region_with_and_without_draft():
    big = encode(smooth_rgb(1400, 900, seed=2), quality=92)
    kw = dict(out="numpy", target_size=160, crop="random")
    a = decode_image(big, draft=True, rng=np.random.default_rng(9), **kw)
    b = decode_image(big, draft=False, rng=np.random.default_rng(9), **kw)
    assert psnr(a, b) > 30


def test_global_rngs_not_used():
    np.random.seed(0)
    a = decode_image(JPEG, out="numpy", target_size=96, crop="random", rng=np.random.default_rng(1))
    np.random.seed(123)
    b = decode_image(JPEG, out="numpy", target_size=96, crop="random", rng=np.random.default_rng(1))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "kw",
    [
        {"out": "tensor"},
        {"resize": "fit"},
        {"crop": "left"},
        {"resample": "cubic"},
        {"target_size": 0},
        {"target_size": (1, 2, 3)},
        {"reducing_gap": 0.5},
    ],
)
def test_bad_options(kw):
    with pytest.raises(ConfigError):
        ImageDecodeOptions(**kw)
    with pytest.raises(ConfigError):
        decode_image(JPEG, **kw)


def test_options_record_is_data():
    import msgspec

    o = ImageDecodeOptions(target_size=(224, 224), out="pil")
    assert msgspec.json.decode(msgspec.json.encode(o), type=ImageDecodeOptions) == o


def test_reducing_gap_and_other_filters():
    for kw in ({"reducing_gap": 2.0}, {"resample": "lanczos"}, {"resample": "box"}):
        out = decode_image(JPEG, out="numpy", target_size=100, **kw)
        ref = decode_image(JPEG, out="numpy", target_size=100, draft=False)
        assert psnr(out, ref) > 30


def test_psnr():
    a = np.zeros((4, 4, 3), np.uint8)
    assert psnr(a, a) == float("inf")
    b = a.copy()
    b[0, 0, 0] = 255
    assert psnr(a, b) == pytest.approx(10 * np.log10(255**2 / (255**2 / 48)))
    assert psnr(Image.fromarray(a), a) == float("inf")
    with pytest.raises(ValueError):
        psnr(a, a[:2])
