"""Header-only image sizes: struct parsers agree with PIL; garbage is refused."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from fpipe.storage.prepare._image_header import image_size, parse_image_size


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "GIF", "BMP", "WEBP", "TIFF"])
@pytest.mark.parametrize("size", [(1, 1), (37, 19), (300, 17)])
def test_sizes_match_pil(fmt, size):
    buf = io.BytesIO()
    mode = "RGB" if fmt != "GIF" else "P"
    Image.new(mode, size).save(buf, format=fmt)
    assert image_size(buf.getvalue()) == size
    if fmt != "TIFF":
        assert tuple(parse_image_size(buf.getvalue()[:4096])) == size


def test_progressive_jpeg_with_exif():
    buf = io.BytesIO()
    exif = Image.Exif()
    exif[0x010E] = "x" * 3000  # ImageDescription: pushes SOF past the first kilobytes
    Image.new("RGB", (64, 48)).save(buf, format="JPEG", progressive=True, exif=exif)
    assert image_size(buf.getvalue()) == (64, 48)


@pytest.mark.parametrize("data", [b"", b"not an image at all", b"\xff\xd8\xff" + b"\x00" * 50])
def test_garbage_raises_value_error(data):
    with pytest.raises(ValueError, match="undecodable image header"):
        image_size(data)
