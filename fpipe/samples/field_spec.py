"""The field-map syntax, one parser for prepare, dataset.yaml and the loader.

One source of a sample field is a member extension, optionally followed by a path into the
decoded (JSON) member: ``jpg``, ``seg.png``, ``txt.gz``, ``json[caption]``, ``json[a][0]``,
``json["a b"]``. A field may have alternatives, the first one present wins, written either way:

- a YAML list in ``dataset.yaml`` (or a Python list): ``image: [jpg, png]``;
- commas on the command line or in a string: ``--field image=jpg,png``.

Both mean the same everywhere. ``fpipe prepare`` writes alternatives as a YAML list. Anything
else (``jpg;png``, ``jpg|png``, ``jpg png``, empty parts, unbalanced brackets) is refused with
a :class:`~fpipe.core.errors.ConfigError` that shows both accepted forms.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec

from fpipe.core.errors import ConfigError
from fpipe.decode.extensions import strip_gz

__all__ = [
    "ColumnSpec",
    "FieldSpec",
    "field_spec_value",
    "parse_column",
    "parse_field_spec",
]

_SOURCE_RE = re.compile(r"^(?P<ext>[^\s\[\],;|'\"{}()]+)(?P<path>(?:\[[^\[\]]*\])*)$")
_PART_RE = re.compile(r"\[([^\[\]]*)\]")
_LEN_RE = re.compile(r"^len\((.*)\)$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_FORMS = "use 'jpg', 'json[caption]', alternatives as 'jpg,png' or a YAML list [jpg, png]"


class FieldSpec(msgspec.Struct, frozen=True):
    """One alternative of a field: member extension plus a JSON path inside it."""

    ext: str  #: member extension, e.g. ``"jpg"`` or ``"json"``
    path: tuple[str, ...] = ()  #: keys / list indices into the decoded JSON, empty for raw bytes

    @property
    def base_ext(self) -> str:
        """The extension without ``.gz``: the key the member is read under."""
        return strip_gz(self.ext)

    def __str__(self) -> str:
        return self.ext + "".join(f"[{p}]" for p in self.path)


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets (``json[a,b]`` keeps its comma)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


def _parse_one(option: str, spec: object) -> FieldSpec:
    option = option.strip()
    m = _SOURCE_RE.match(option)
    if m is None:
        raise ConfigError(f"bad field spec {spec!r}: {_FORMS}")
    path = []
    for p in _PART_RE.findall(m.group("path")):
        p = p.strip()
        if len(p) >= 2 and p[0] == p[-1] and p[0] in "'\"":
            p = p[1:-1]
        if not p:
            raise ConfigError(f"bad field spec {spec!r}: empty [] in the path")
        path.append(p)
    return FieldSpec(m.group("ext"), tuple(path))


def parse_field_spec(spec: str | Sequence[str]) -> tuple[FieldSpec, ...]:
    """Alternatives of one field (first present wins), from ``"jpg,png"`` or ``["jpg", "png"]``.

    >>> parse_field_spec("json[meta][w],txt")
    (FieldSpec(ext='json', path=('meta', 'w')), FieldSpec(ext='txt', path=()))
    >>> parse_field_spec(["jpg", "png"]) == parse_field_spec("jpg,png")
    True
    """
    if isinstance(spec, str):
        options = _split_top(spec)
    elif isinstance(spec, (list, tuple)) and all(isinstance(s, str) for s in spec):
        options = list(spec)
        if any(len(_split_top(s)) > 1 for s in options):
            raise ConfigError(f"bad field spec {spec!r}: a list item holds one source; {_FORMS}")
    else:
        raise ConfigError(f"bad field spec {spec!r}: {_FORMS}")
    if not options:
        raise ConfigError(f"bad field spec {spec!r}: no source; {_FORMS}")
    return tuple(_parse_one(o, spec) for o in options)


def field_spec_value(spec: str | Sequence[str]) -> str | list[str]:
    """The form dataset.yaml stores: one source as a string, alternatives as a list.

    >>> field_spec_value("jpg, png"), field_spec_value(["json[caption]"])
    (['jpg', 'png'], 'json[caption]')
    """
    alts = [str(a) for a in parse_field_spec(spec)]
    return alts[0] if len(alts) == 1 else alts


def _check_name(name: str, what: str) -> str:
    """Return ``name`` if it is usable as a file-name part of the index, else raise."""
    if not _NAME_RE.match(name):
        raise ConfigError(f"bad {what} name {name!r}: use letters, digits, '_', '.', '-'")
    return name


class ColumnSpec(msgspec.Struct, frozen=True):
    """A user column computed from a member (usually JSON) at prepare time."""

    name: str  #: column name
    alternatives: tuple[FieldSpec, ...]  #: where the value comes from (first present wins)
    length: bool = False  #: store ``len(value)`` instead of the value


def parse_column(text: str) -> ColumnSpec:
    """``"aesthetic=json[scores][aes]"`` or ``"caption_len=len(json[caption])"``."""
    if "=" not in text:
        raise ConfigError(f"bad column {text!r}: use NAME=json[path] or NAME=len(json[path])")
    name, spec = (s.strip() for s in text.split("=", 1))
    m = _LEN_RE.match(spec)
    return ColumnSpec(
        _check_name(name, "column"), parse_field_spec(m.group(1) if m else spec), bool(m)
    )
