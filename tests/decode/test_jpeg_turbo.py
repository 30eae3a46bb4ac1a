"""Baseline JPEGs decoded by libjpeg-turbo through simplejpeg (``fpipe/decode/_jpeg.py``) give
the bytes Pillow's decoder gives, under every option, and everything else is left to Pillow."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from fpipe.core import BadSampleError
from fpipe.decode import ImageDecodeOptions, _jpeg, decode_image_with
from fpipe.decode.image import _open as pillow_open
from fpipe.decode.limits import DecodeLimits

pytest.importorskip("simplejpeg")


def _jpeg_of(w: int, h: int, mode: str = "RGB", seed: int = 0, **save) -> bytes:
    rng = np.random.default_rng(seed)
    # smooth gradients plus noise: every DCT coefficient and the chroma upsampling matter
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 // max(w, 1), yy * 255 // max(h, 1), (xx + yy) % 256], -1)
    pixels = np.clip(base + rng.integers(-40, 40, (h, w, 3)), 0, 255).astype(np.uint8)
    img = Image.fromarray(pixels).convert(mode)
    buf = io.BytesIO()
    img.save(buf, "JPEG", **save)
    return buf.getvalue()


def _both(data: bytes, options: ImageDecodeOptions, monkeypatch, seed: int = 7, **kw):
    """(the output with this path, the output with Pillow alone)."""
    fast = decode_image_with(data, options, rng=np.random.default_rng(seed), **kw)
    with monkeypatch.context() as m:
        m.setattr(_jpeg, "simplejpeg", None)
        slow = decode_image_with(data, options, rng=np.random.default_rng(seed), **kw)
    return fast, slow


IMAGES = [
    ("420", _jpeg_of(333, 251, quality=90)),
    ("422", _jpeg_of(320, 200, subsampling=1, quality=75)),
    ("444", _jpeg_of(97, 131, subsampling=0, quality=95)),
    ("progressive", _jpeg_of(300, 300, progressive=True)),
    ("restart markers", _jpeg_of(250, 180, restart_marker_blocks=2)),
    ("gray", _jpeg_of(211, 157, mode="L")),
    ("tiny", _jpeg_of(1, 1)),
]
OPTIONS = [
    ImageDecodeOptions(),
    ImageDecodeOptions(out="numpy"),
    ImageDecodeOptions(target_size=224, draft=False),
    ImageDecodeOptions(target_size=224),  # draft on: reduced (Pillow) or not (this path)
    ImageDecodeOptions(target_size=64),
    ImageDecodeOptions(target_size=(48, 80), crop="random", resample="bicubic"),
    ImageDecodeOptions(target_size=100, resize="long_side", out="numpy"),
    ImageDecodeOptions(target_size=100, crop="none", dtype="float32"),
    ImageDecodeOptions(target_size=120, mode="L"),
    ImageDecodeOptions(target_size=120, mode="RGBA", reducing_gap=2.0),
]


@pytest.mark.parametrize("name,data", IMAGES, ids=[n for n, _ in IMAGES])
def test_the_same_pixels_as_pillow_under_every_option(name, data, monkeypatch):
    assert _jpeg.header(data) is not None  # the path is taken
    for options in OPTIONS:
        fast, slow = _both(data, options, monkeypatch)
        assert fast.dtype == slow.dtype and fast.shape == slow.shape, options
        assert np.array_equal(np.asarray(fast), np.asarray(slow)), (name, options)


@pytest.mark.skipif(not _jpeg.MAPS_RGB, reason="this Pillow maps no RGB buffer")
def test_colour_pixels_are_not_copied_into_pillow(monkeypatch):
    # decoded as RGBX, Pillow's own layout of RGB, and mapped: Image.fromarray (a fill and an
    # unpack of every pixel) is not called for a colour JPEG
    data = _jpeg_of(333, 251)
    expected = decode_image_with(data, ImageDecodeOptions(target_size=224, draft=False))
    monkeypatch.setattr(Image, "fromarray", lambda *a, **k: pytest.fail("pixels copied"))
    img = _jpeg.decode(data, "YCbCr")
    assert img.mode == "RGB" and img.size == (333, 251)
    got = decode_image_with(data, ImageDecodeOptions(target_size=224, draft=False))
    assert np.array_equal(got, expected)


@pytest.mark.parametrize("name,data", IMAGES[:2] + IMAGES[-2:], ids=["420", "422", "gray", "tiny"])
def test_the_same_pixels_where_pillow_cannot_map_them(name, data, monkeypatch):
    # a Pillow without the mapping (MAPS_RGB false) takes Image.fromarray: the same pixels
    for options in OPTIONS:
        mapped = decode_image_with(data, options, rng=np.random.default_rng(3))
        with monkeypatch.context() as m:
            m.setattr(_jpeg, "MAPS_RGB", False)
            copied = decode_image_with(data, options, rng=np.random.default_rng(3))
        assert np.array_equal(np.asarray(mapped), np.asarray(copied)), (name, options)


def test_it_decodes_what_pillow_would_decode_without_a_reduction(monkeypatch):
    data = _jpeg_of(300, 240)
    calls = []
    monkeypatch.setattr(_jpeg, "decode", lambda *a: calls.append(a) or None)  # Pillow after it
    options = ImageDecodeOptions(target_size=224)  # 300 px: draft would not reduce
    decode_image_with(data, options)
    decode_image_with(_jpeg_of(900, 900), options)  # 900 px: Pillow reduces to 1/2
    decode_image_with(data, ImageDecodeOptions(out="pil"))  # a PIL image keeps Pillow's info
    assert len(calls) == 1


def test_what_it_does_not_take_goes_to_pillow(monkeypatch):
    cmyk = _jpeg_of(64, 48, mode="CMYK")
    png = io.BytesIO()
    Image.new("RGB", (8, 8)).save(png, "PNG")
    assert _jpeg.header(cmyk) is None and _jpeg.header(png.getvalue()) is None
    fast, slow = _both(cmyk, ImageDecodeOptions(target_size=32), monkeypatch)
    assert np.array_equal(fast, slow)


@pytest.mark.parametrize("cut", [0.5, 0.9])
def test_a_truncated_or_corrupt_stream_fails_as_pillow_says(cut, monkeypatch):
    good = _jpeg_of(200, 160)
    broken = good[: int(len(good) * cut)]
    corrupt = good[:400] + bytes(200) + good[600:]
    for data in (broken, corrupt):
        errors = []
        for fast in (True, False):
            with monkeypatch.context() as m:
                if not fast:
                    m.setattr(_jpeg, "simplejpeg", None)
                try:
                    out = decode_image_with(data, ImageDecodeOptions(), path="p.tar", key="k")
                    errors.append(("ok", np.asarray(out).tobytes()))
                except BadSampleError as err:
                    errors.append(("error", str(err)))
        assert errors[0] == errors[1]
    with pytest.raises(BadSampleError, match="cannot decode image"):  # was a raw OSError
        decode_image_with(broken, ImageDecodeOptions(out="pil"))


def _outcomes(data: bytes, monkeypatch) -> list[tuple[str, object]]:
    """(this path's outcome, Pillow's alone): ("ok", pixels) or ("error", the message)."""
    got = []
    for fast in (True, False):
        with monkeypatch.context() as m:
            if not fast:
                m.setattr(_jpeg, "simplejpeg", None)
            try:
                out = decode_image_with(data, ImageDecodeOptions(out="numpy"), path="p", key="k")
                got.append(("ok", np.asarray(out).tobytes()))
            except BadSampleError as err:
                got.append(("error", str(err)))
    return got


def _segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + (len(payload) + 2).to_bytes(2, "big") + payload


def _before_scan(data: bytes, extra: bytes) -> bytes:
    at = data.index(b"\xff\xda")  # SOS
    return data[:at] + extra + data[at:]


def test_a_tem_marker_before_the_scan_is_refused_as_pillow_refuses_it(monkeypatch):
    # libjpeg-turbo skips a standalone TEM marker (FF 01); Pillow's parser refuses it
    data = _before_scan(_jpeg_of(40, 30), b"\xff\x01")
    fast, slow = _outcomes(data, monkeypatch)
    assert slow[0] == "error" and "cannot identify image file" in str(slow[1])
    assert fast == slow


PLAIN = _jpeg_of(40, 30)
JFIF = PLAIN.index(b"\xff\xe0")  # APP0 JFIF, right after SOI
HEADERS = {  # headers libjpeg-turbo reads and Pillow refuses, or reads its own way
    "TEM after SOI": PLAIN[:2] + b"\xff\x01" + PLAIN[2:],
    "short JFIF": PLAIN[:JFIF] + _segment(0xE0, b"JFIF\x00") + PLAIN[JFIF + 18 :],
    "short Adobe": _before_scan(PLAIN, _segment(0xEE, b"Adobe\x00")),
    "ICC chunk without its number": PLAIN[:2] + _segment(0xE2, b"ICC_PROFILE\x00\x01") + PLAIN[2:],
    "Photoshop block cut": PLAIN[:2]
    + _segment(0xED, b"Photoshop 3.0\x00" + b"8BIM\x03\xed")
    + PLAIN[2:],
    "RST before the scan": _before_scan(PLAIN, b"\xff\xd0"),  # both decode it
    "fill bytes": _before_scan(PLAIN, b"\xff\xff"),
    "unknown marker": _before_scan(PLAIN, b"\xff\x02"),
}


@pytest.mark.parametrize("name", sorted(HEADERS))
def test_a_header_gives_one_outcome_on_either_path(name, monkeypatch):
    fast, slow = _outcomes(HEADERS[name], monkeypatch)
    assert fast == slow, name


def test_the_metadata_segments_of_photos_keep_this_path():
    exif = Image.Exif()
    exif[0x010F] = "camera"
    data = _jpeg_of(40, 30, exif=exif.tobytes(), icc_profile=b"\0" * 3000, comment=b"c")
    assert _jpeg.header(data) is not None


def test_the_pixel_limit_is_checked_from_its_header_before_decoding(monkeypatch):
    data = _jpeg_of(300, 200)
    monkeypatch.setattr(_jpeg, "decode", lambda *a: pytest.fail("decoded past the limit"))
    with pytest.raises(BadSampleError, match="exceeds max_image_pixels=1000") as info:
        decode_image_with(data, ImageDecodeOptions(), limits=DecodeLimits(max_image_pixels=1000))
    assert "300x200" in str(info.value)


def test_pillow_open_is_what_the_fallback_uses():
    # the fallback is the same function the non-JPEG path calls, not a copy of it
    img = pillow_open(_jpeg_of(20, 10), None, "", "")
    assert img.format == "JPEG" and img.size == (20, 10)
