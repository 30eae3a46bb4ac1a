"""Look at a dataset: a grid picture of its first samples (``fpipe preview``).

Each cell shows one sample: its key, the picture (an image member scaled to fit, or a strip of
frames spread over a video), then its text members (captions, JSON) as wrapped excerpts, and a
line listing every member with its size. Samples are the first ``n`` of the split, in index
order (no shuffle), so two previews of one dataset are the same picture. Drawing needs Pillow
only; video frames come from PyAV through :mod:`fpipe.decode.av.decoder`.

Example::

    from fpipe.preview import save_preview
    save_preview("data/coco", "grid.png", n=16)       # the path of the PNG
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Mapping
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from fpipe.core.errors import BadSampleError, ConfigError, FpipeError
from fpipe.decode.extensions import ext_kind, last_part
from fpipe.decode.image import decode_image
from fpipe.storage import Dataset, open_dataset

__all__ = ["render_preview", "save_preview"]

#: Audio-only containers among the audio/video extensions (no frames to show).
_AUDIO_ONLY = ("flac", "m4a", "mp3", "ogg", "wav")
_BG, _FG, _DIM, _PANEL = (250, 250, 250), (20, 20, 20), (110, 110, 110), (225, 225, 225)
_PAD = 6


def _font(size: int = 12) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)  # a scalable font (Pillow >= 10.1, FreeType)
    except TypeError:
        return ImageFont.load_default()


def _text_excerpt(data: bytes, limit: int = 160) -> str:
    """The start of a text member on one line (whitespace collapsed), ``…`` when cut.

    >>> _text_excerpt(b"a  red\\n fox", 5)
    'a red…'
    """
    text = " ".join(data.decode("utf-8", "replace").split())
    return text if len(text) <= limit else text[:limit] + "…"


def _kind(ext: str) -> str:
    """``image``, ``video``, ``text`` (text members and JSON) or ``""``."""
    kind, last = ext_kind(ext), last_part(ext)
    if kind == "av":
        return "" if last in _AUDIO_ONLY else "video"
    return "text" if kind == "text" or last == "json" else kind


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} kB" if n < 1 << 20 else f"{n / 2**20:.1f} MB"


def _names(config_field_map: Mapping[str, str]) -> dict[str, str]:
    """Member extension -> sample field that reads it (for labels)."""
    out: dict[str, str] = {}
    for field, spec in config_field_map.items():
        for option in str(spec).split(","):
            out.setdefault(option.split("[", 1)[0].strip(), field)
    return out


def _picture(raw: Mapping[str, bytes], width: int, height: int, where: tuple[str, str]):
    """An image, or a strip of frames of a video, scaled to fit ``width x height``."""
    for ext, data in raw.items():
        if _kind(ext) == "image":
            img = decode_image(data, out="pil", path=where[0], key=where[1])
            img.thumbnail((width, height))
            return img
    for ext, data in raw.items():
        if _kind(ext) == "video":
            return _frame_strip(data, width, height, where)
    return None


def _frame_strip(data: bytes, width: int, height: int, where: tuple[str, str]) -> Image.Image:
    from fpipe.decode.av.decoder import AVDecoder  # PyAV (and torch) only for videos

    frames = AVDecoder(data, path=where[0], key=where[1]).get_single_frames_uniform(4)
    clip = frames.video_clips[0].permute(0, 2, 3, 1).numpy()  # [T, H, W, 3] uint8
    tiles = [Image.fromarray(f) for f in clip]
    tw = max(1, (width - _PAD * (len(tiles) - 1)) // len(tiles))
    for t in tiles:
        t.thumbnail((tw, height))
    strip = Image.new("RGB", (width, max(t.height for t in tiles)), _BG)
    for j, t in enumerate(tiles):
        strip.paste(t, (j * (tw + _PAD), 0))
    return strip


def _cell(ds: Dataset, i: int, width: int, pic_h: int, lines: int, font) -> Image.Image:
    key = ds.key(i)
    line_h = font.getbbox("Ag")[3] + 3
    cell = Image.new("RGB", (width, line_h * (lines + 2) + pic_h + 2 * _PAD), _BG)
    draw = ImageDraw.Draw(cell)
    chars = max(8, int(width / max(font.getlength("n"), 1)))
    draw.text((_PAD, _PAD), _cut(key, chars), font=font, fill=_FG)
    y = _PAD + line_h
    try:
        raw = ds.read(i)
        pic = _picture(raw, width - 2 * _PAD, pic_h, (ds.path, key)) if pic_h else None
    except (FpipeError, OSError) as e:
        raw, pic = {}, None
        draw.text((_PAD, y), _cut(f"unreadable: {e}", chars), font=font, fill=_DIM)
    if pic_h:
        draw.rectangle((_PAD, y, width - _PAD, y + pic_h), fill=_PANEL)
        if pic is not None:
            cell.paste(
                pic, (_PAD + (width - 2 * _PAD - pic.width) // 2, y + (pic_h - pic.height) // 2)
            )
        y += pic_h + 3
    names = _names(ds.config.field_map)
    text: list[str] = []
    # members the field map reads first (the caption), then the other text members
    for ext in sorted(raw, key=lambda e: (e not in names, e)):
        if _kind(ext) == "text":
            label = names.get(ext, ext)
            text += textwrap.wrap(f"{label}: {_text_excerpt(raw[ext], chars * lines)}", chars - 1)
    for row in text[: lines - 1]:
        draw.text((_PAD, y), row, font=font, fill=_FG)
        y += line_h
    members = " · ".join(f"{e} {_size(len(d))}" for e, d in raw.items())
    draw.text((_PAD, cell.height - _PAD - line_h), _cut(members, chars), font=font, fill=_DIM)
    return cell


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def render_preview(
    dataset: str | os.PathLike | Dataset,
    *,
    split: str = "train",
    n: int = 16,
    cell_size: int = 192,
    text_lines: int = 4,
) -> Image.Image:
    """A grid picture of the first ``n`` samples of ``split``.

    Args:
      dataset: a prepared folder, an Energon folder or a table (see
        :func:`fpipe.storage.open_dataset`), or an opened dataset.
      split: split name; a dataset without ``split.yaml`` shows all samples.
      n: number of samples (at most the split's size).
      cell_size: picture width and height of a cell in pixels (videos get two cells' width).
      text_lines: lines of text excerpt under each picture.

    Returns:
      An RGB ``PIL.Image``.

    Raises:
      ConfigError: the dataset cannot be opened, or the split is missing or empty.
    """
    ds = dataset if isinstance(dataset, Dataset) else open_dataset(dataset)
    indices = [int(i) for i in ds.split_indices(split)[: max(n, 0)]]
    if not indices:
        raise ConfigError(f"{ds.path}: split {split!r} has no samples to preview")
    font = _font()
    kinds = {_kind(e) for i in indices[:1] for e in _safe_read(ds, i)}
    video = "video" in kinds
    has_pic = video or "image" in kinds
    width = cell_size * (2 if video or not has_pic else 1)
    pic_h = (cell_size // 2 if video else cell_size) if has_pic else 0
    lines = text_lines if has_pic else text_lines * 3
    cells = [_cell(ds, i, width, pic_h, lines, font) for i in indices]
    cols = max(
        1, min(len(cells), round(math.sqrt(len(cells) * (1 if width == cell_size else 0.5))))
    )
    rows = max(1, math.ceil(len(cells) / cols))
    ch = cells[0].height if cells else cell_size
    grid = Image.new("RGB", (cols * (width + 2) + 2, rows * (ch + 2) + 2), (180, 180, 180))
    for j, c in enumerate(cells):
        grid.paste(c, (2 + (j % cols) * (width + 2), 2 + (j // cols) * (ch + 2)))
    return grid


def _safe_read(ds: Dataset, i: int) -> dict[str, bytes]:
    try:
        return ds.read(i)
    except (BadSampleError, OSError):
        return {}


def save_preview(
    dataset: str | os.PathLike | Dataset, out: str | os.PathLike, **kwargs: int | str
) -> Path:
    """Render :func:`render_preview` and write it as a PNG to ``out``; returns the path.

    Example:
      >>> save_preview("data/coco", "grid.png", n=8)  # doctest: +SKIP
      PosixPath('grid.png')
    """
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    render_preview(dataset, **kwargs).save(path, format="PNG")  # type: ignore[arg-type]
    return path
