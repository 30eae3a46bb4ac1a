"""Pixels read from Pillow's own memory (``fpipe.decode._pixels``): the same values as
``np.asarray``, memory that outlives the image, and decode outputs that are unchanged and never
share memory with Pillow."""

import functools
import gc
import io

import numpy as np
import pytest
from PIL import Image

from fpipe.decode import _pixels
from fpipe.decode import image as image_mod
from fpipe.decode._pixels import pixel_view, rgb_image
from fpipe.decode.image import ImageDecodeOptions, decode_image_with

#: Pillow exports its pixels from 11.2 on; before that, every output takes ``np.asarray``.
exports = pytest.mark.skipif(
    not hasattr(Image.Image, "__arrow_c_array__"), reason="Pillow < 11.2 exports no pixels"
)


def _noise(mode: str, size=(37, 23)) -> Image.Image:
    return Image.effect_noise(size, 64).convert("RGB").convert(mode)


@exports
@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L"])
def test_view_equals_asarray(mode):
    img = _noise(mode)
    view = pixel_view(img)
    assert view is not None
    assert view.dtype == np.uint8 and view.shape == np.asarray(img).shape
    assert np.array_equal(view, np.asarray(img))


@pytest.mark.parametrize("mode", ["LA", "P", "1", "I", "F", "CMYK", "I;16"])
def test_other_modes_are_not_viewed(mode):
    img = Image.new(mode, (9, 7))
    assert pixel_view(img) is None


def test_image_over_one_memory_block_is_not_viewed():
    # Pillow keeps rows in 16 MB blocks; an image over one block cannot be exported
    assert pixel_view(Image.new("RGB", (2000, 2100))) is None


@exports
def test_view_keeps_the_pixels_alive():
    img = _noise("RGB", (64, 48))
    expected = np.asarray(img).copy()
    view = pixel_view(img)
    del img
    gc.collect()
    for _ in range(50):  # reuse of freed memory would show up here
        _noise("RGB", (64, 48)).load()
    assert np.array_equal(view, expected)


@functools.cache  # one noise picture per mode and format: encoding one takes ~35 ms
def _encoded(mode: str, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    _noise(mode, (300, 260)).save(buf, fmt)
    return buf.getvalue()


@pytest.mark.parametrize("source", ["RGB", "RGBA", "L", "P"])
@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L"])
@pytest.mark.parametrize("dtype", ["uint8", "float32"])
@pytest.mark.parametrize("target", [None, 224])
def test_torch_output_unchanged(monkeypatch, source, mode, dtype, target):
    """The torch output read through the view equals the one read through ``np.asarray``
    (the view turned off), is contiguous, writable and its own memory."""
    data = _encoded(source)
    options = ImageDecodeOptions(out="torch", target_size=target, mode=mode, dtype=dtype)
    fast = decode_image_with(data, options)
    monkeypatch.setattr(image_mod, "pixel_view", lambda img: None)
    plain = decode_image_with(data, options)
    assert fast.dtype == plain.dtype and fast.shape == plain.shape
    assert np.array_equal(fast.numpy(), plain.numpy())
    assert fast.is_contiguous() and fast.numpy().flags.writeable
    fast.fill_(0)  # writing the output touches no one else's memory
    assert np.array_equal(decode_image_with(data, options).numpy(), plain.numpy())


@exports
def test_torch_output_takes_the_view(monkeypatch):
    seen = []

    def spy(img):
        view = _pixels.pixel_view(img)
        seen.append(view is not None)
        return view

    monkeypatch.setattr(image_mod, "pixel_view", spy)
    decode_image_with(_encoded("RGB", "JPEG"), ImageDecodeOptions(out="torch", target_size=64))
    assert seen == [True]


mapped = pytest.mark.skipif(not _pixels.MAPS_RGB, reason="this Pillow maps no RGB buffer")


@mapped
def test_an_rgb_image_over_rgbx_pixels_holds_them():
    img = rgb_image(np.arange(5 * 7 * 4, dtype=np.uint8).reshape(5, 7, 4))  # its only holder
    expected = np.arange(5 * 7 * 4, dtype=np.uint8).reshape(5, 7, 4)[..., :3]
    assert img.mode == "RGB" and img.size == (7, 5)
    gc.collect()
    for _ in range(50):  # reuse of freed memory would show up here
        np.full((5, 7, 4), 255, np.uint8).sum()
    assert np.array_equal(np.asarray(img), expected)


@mapped
def test_an_edit_of_an_rgb_image_leaves_its_pixels_alone():
    px = np.arange(5 * 7 * 4, dtype=np.uint8).reshape(5, 7, 4)
    img = rgb_image(px)
    img.paste((9, 9, 9), (0, 0, 7, 5))  # read-only: Pillow copies before it writes
    assert np.asarray(img)[0, 0].tolist() == [9, 9, 9]
    assert np.array_equal(px, np.arange(5 * 7 * 4, dtype=np.uint8).reshape(5, 7, 4))


def test_rgb_image_takes_only_contiguous_rgbx_bytes():
    px = np.zeros((4, 6, 4), np.uint8)
    assert rgb_image(px[:, ::2]) is None
    assert rgb_image(px[..., :3].copy()) is None
    assert rgb_image(px.astype(np.uint16)) is None
