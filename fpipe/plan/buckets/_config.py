"""An OpenSora-style ``bucket_config``, parsed into a table of buckets (plain data, fingerprinted).

The nested mapping (OpenSora's shape, with sizes written out instead of OpenSora's resolution
names; docs/buckets.md says what differs)::

    bucket_config = {
        "1:1": {256: {1: (1.0, 64), 17: (1.0, 16), 65: (0.5, 4)}},
        "16:9": {"240x426": {17: (1.0, 8), 65: (0.5, 2)}},
    }

aspect ratio ``"W:H"`` -> resolution -> number of frames -> ``(probability, batch size)``.
A resolution is an ``"HxW"`` string (height first, ``"240x426"`` under ``"16:9"``) or an int
side: under ``"1:1"`` the side of the square, under another ratio the
short side (the long side follows from the ratio, rounded to an even number of pixels). The
value is a tuple or, from YAML, a list; a batch size may be ``None`` only where the probability
is 0 (OpenSora writes ``(0.0, None)`` for a bucket that is never used).

YAML reads an unquoted ``1:1`` as the base-60 integer 61, so aspect ratio keys must be quoted
there; :func:`parse_bucket_config` says so when it meets an integer aspect ratio.

Example:
    >>> t = parse_bucket_config({"1:1": {256: {1: (1.0, 64), 17: (0.5, 16)}}})
    >>> [(b.label, b.height, b.width, b.frames, b.batch_size) for b in t.buckets]
    [('1:1/256/1', 256, 256, 1, 64), ('1:1/256/17', 256, 256, 17, 16)]
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import msgspec
import yaml

from fpipe.core.errors import ConfigError
from fpipe.core.records import Config

__all__ = [
    "Bucket",
    "BucketTable",
    "aspect_ratio",
    "load_bucket_config",
    "parse_bucket_config",
]

#: Largest relative difference between an ``"HxW"`` resolution's shape and its aspect ratio.
RATIO_TOLERANCE = 0.05

_RATIO = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*:\s*(\d+(?:\.\d+)?)\s*$")
_HXW = re.compile(r"^\s*(\d+)\s*[xX*]\s*(\d+)\s*$")


class Bucket(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One bucket: every sample in it is resized and cropped to ``frames x height x width``.

    ``aspect``: the aspect ratio key as written (``"16:9"``); ``resolution``: the resolution
    key as written (``"240x426"``, ``"256"``); ``height``, ``width``: pixels; ``frames``: frames
    per sample (1 for images); ``probability``: chance that a sample that fits is kept here
    (else it tries the next smaller resolution); ``batch_size``: samples per rank and step
    (0 where the config says ``None``, allowed only with probability 0).
    """

    aspect: str
    resolution: str
    height: int
    width: int
    frames: int
    probability: float
    batch_size: int

    @property
    def label(self) -> str:
        """``"aspect/resolution/frames"``, e.g. ``"16:9/240x426/17"``."""
        return f"{self.aspect}/{self.resolution}/{self.frames}"

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(frames, height, width)``: the shape of every sample of the bucket."""
        return (self.frames, self.height, self.width)


class BucketTable(Config, frozen=True):
    """The parsed ``bucket_config``: buckets in a canonical order (bucket id = position).

    The order is by aspect ratio (width / height, ascending), then pixel area, then frames, so
    two configs that differ only in the order of their keys have the same ids and fingerprint.
    """

    buckets: tuple[Bucket, ...]

    def __len__(self) -> int:
        return len(self.buckets)

    def label(self, bucket_id: int) -> str:
        """The label of a bucket id (``"-"`` for -1, no bucket)."""
        return self.buckets[bucket_id].label if bucket_id >= 0 else "-"


def aspect_ratio(name: Any) -> float:
    """Width / height of an aspect ratio key ``"W:H"`` (ConfigError if it is not one).

    >>> aspect_ratio("16:9") > 1 > aspect_ratio("9:16")
    True
    """
    if isinstance(name, int) and not isinstance(name, bool):
        raise ConfigError(
            f"bucket_config: aspect ratio key {name!r} is a number, not a 'W:H' string. In YAML "
            'quote the ratio ("1:1", "16:9"): unquoted, YAML reads 1:1 as the base-60 number '
            "61 and 16:9 as 969"
        )
    m = _RATIO.match(str(name)) if isinstance(name, str) else None
    if not m or float(m.group(1)) <= 0 or float(m.group(2)) <= 0:
        hint = ""
        if isinstance(name, str) and re.fullmatch(r"\d+(p|px)", name.strip()):
            hint = (
                f". {name!r} is an OpenSora resolution name: fpipe's bucket_config is keyed by "
                "aspect ratio first, then the size of each bucket ({'16:9': {'240x426': {...}}}); "
                "see docs/buckets.md, 'What differs from OpenSora'"
            )
        raise ConfigError(
            f"bucket_config: aspect ratio key {name!r} is not of the form 'W:H' with positive "
            f"numbers (e.g. '1:1', '16:9', '9:16'){hint}"
        )
    return float(m.group(1)) / float(m.group(2))


def _even(x: float) -> int:
    return max(2, 2 * round(x / 2))


def _resolution(aspect: str, ratio: float, res: Any) -> tuple[str, int, int]:
    where = f"bucket_config[{aspect!r}][{res!r}]"
    if isinstance(res, bool):
        raise ConfigError(f"{where}: a resolution is an int side or an 'HxW' string, not a bool")
    if isinstance(res, str) and res.strip().isdigit():
        res = int(res)
    if isinstance(res, int):
        if res < 1:
            raise ConfigError(f"{where}: the resolution side must be >= 1")
        if ratio >= 1:  # landscape or square: the side is the height
            return str(res), res, res if ratio == 1 else _even(res * ratio)
        return str(res), _even(res / ratio), res
    m = _HXW.match(res) if isinstance(res, str) else None
    if not m:
        raise ConfigError(
            f"{where}: resolution {res!r} is neither an int side (256) nor an 'HxW' string "
            "('240x426', height first). OpenSora's resolution names such as '240p' stand for "
            "its built-in aspect tables; write the size of each bucket instead"
        )
    h, w = int(m.group(1)), int(m.group(2))
    if h < 1 or w < 1:
        raise ConfigError(f"{where}: height and width must be >= 1")
    if abs(math.log((w / h) / ratio)) > math.log1p(RATIO_TOLERANCE):
        raise ConfigError(
            f"{where}: {h}x{w} (height x width) has aspect ratio {w / h:.3f} (W/H), not "
            f"{aspect} ({ratio:.3f}); resolutions are written 'HxW', height first"
        )
    return f"{h}x{w}", h, w


def _frames(where: str, t: Any) -> int:
    if isinstance(t, str) and t.strip().isdigit():
        t = int(t)
    if not isinstance(t, int) or isinstance(t, bool) or t < 1:
        raise ConfigError(f"{where}: number of frames {t!r} must be an int >= 1")
    return t


def _value(where: str, v: Any) -> tuple[float, int]:
    if not isinstance(v, (tuple, list)) or len(v) != 2:
        raise ConfigError(f"{where}: expected (probability, batch_size), e.g. (1.0, 16), got {v!r}")
    p, bs = v
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= float(p) <= 1.0:
        raise ConfigError(f"{where}: probability {p!r} must be a number in [0, 1]")
    if bs is None:
        if float(p) != 0.0:
            raise ConfigError(
                f"{where}: batch size None is only allowed with probability 0 (a bucket never "
                f"used); got probability {p}"
            )
        return 0.0, 0
    if isinstance(bs, bool) or not isinstance(bs, int) or bs < 1:
        raise ConfigError(f"{where}: batch size {bs!r} must be an int >= 1 (or None with 0.0)")
    return float(p), bs


def parse_bucket_config(config: Mapping | BucketTable) -> BucketTable:
    """Parse and check an OpenSora ``bucket_config`` (see the module docstring).

    Raises :class:`~fpipe.core.errors.ConfigError` naming the key path of the first problem.
    """
    if isinstance(config, BucketTable):
        return config
    if not isinstance(config, Mapping) or not config:
        raise ConfigError(
            "bucket_config must be a non-empty mapping: aspect ratio -> resolution -> frames -> "
            f"(probability, batch_size); got {type(config).__name__}"
        )
    found: dict[tuple[float, int, int, int], Bucket] = {}
    order: dict[tuple[float, int, int, int], tuple] = {}
    for aspect, resolutions in config.items():
        ratio = aspect_ratio(aspect)
        if not isinstance(resolutions, Mapping) or not resolutions:
            raise ConfigError(
                f"bucket_config[{aspect!r}] must be a non-empty mapping resolution -> frames"
            )
        for res, frames in resolutions.items():
            label, h, w = _resolution(aspect, ratio, res)
            where = f"bucket_config[{aspect!r}][{res!r}]"
            if not isinstance(frames, Mapping) or not frames:
                raise ConfigError(f"{where} must be a non-empty mapping frames -> (p, bs)")
            for t, v in frames.items():
                t = _frames(where, t)
                p, bs = _value(f"{where}[{t}]", v)
                b = Bucket(
                    aspect=str(aspect).strip(),
                    resolution=label,
                    height=h,
                    width=w,
                    frames=t,
                    probability=p,
                    batch_size=bs,
                )
                k = (round(ratio, 9), h, w, t)
                if k in found:
                    raise ConfigError(
                        f"bucket_config: {b.label} and {found[k].label} are the same bucket "
                        f"({t} frames of {h}x{w})"
                    )
                found[k] = b
                order[k] = (ratio, h * w, h, t)
    keys = sorted(found, key=lambda k: order[k])
    return BucketTable(buckets=tuple(found[k] for k in keys))


def load_bucket_config(source: str | Mapping | BucketTable) -> BucketTable:
    """A :class:`BucketTable` from a mapping, a YAML string, or a YAML file path.

    YAML is read with ``yaml.safe_load``; a file may hold the mapping itself or under a
    ``bucket_config`` key. Lists stand for tuples.

    Example:
        >>> load_bucket_config('"16:9": {"240x426": {17: [1.0, 8]}}').buckets[0].width
        426
    """
    if isinstance(source, (Mapping, BucketTable)):
        return parse_bucket_config(source)
    text = source
    if "\n" not in source and not source.lstrip().startswith(("{", '"')):
        try:
            with open(source, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ConfigError(f"bucket_config: cannot read {source!r}: {e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"bucket_config: not valid YAML: {e}") from None
    if isinstance(data, Mapping) and set(data) == {"bucket_config"}:
        data = data["bucket_config"]
    return parse_bucket_config(data)
