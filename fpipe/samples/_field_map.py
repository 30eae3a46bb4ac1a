"""``field_map`` of dataset.yaml: which member (and which part of it) fills each sample field.

Syntax of one entry ``field: spec``:

- ``jpg`` — the member with that extension, decoded by its extension;
- ``json[caption]``, ``json[a][0][b]`` — a path into the decoded member (dict keys, or list
  indexes when the value is a list); keys may be quoted: ``json["a b"]``;
- ``[jpg, png]`` (a YAML list) or ``jpg,png`` (the command line's form, same meaning) —
  alternatives: the first member that is present (and whose path resolves) is used.

A field_map is checked when compiled (:func:`compile_field_map`), against the sample type: each
name must be a field of it, and each field without a default must be mapped.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from fpipe.core.errors import ConfigError
from fpipe.samples.base import BASE_FIELDS
from fpipe.samples.field_spec import parse_field_spec

__all__ = ["FieldMap", "FieldSource", "FieldSpec", "compile_field_map", "parse_source"]

_SPEC = re.compile(r"^([^\[\]]+)((?:\[[^\[\]]*\])*)$")
_PART = re.compile(r"\[([^\[\]]*)\]")


@dataclasses.dataclass(frozen=True)
class FieldSource:
    """One place a field's value can come from."""

    #: Member extension (``"jpg"``, ``"json"``, ``"seg.png"``).
    ext: str
    #: Path into the decoded member, as strings (``("a", "0", "b")``); empty: the whole value.
    path: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.ext + "".join(f"[{p}]" for p in self.path)


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    """How one sample field is filled."""

    #: The sample field's name.
    name: str
    #: Alternatives, first present wins.
    sources: tuple[FieldSource, ...]
    #: ``False`` when the sample field has a default (used if no source is present).
    required: bool
    #: The sample field is declared ``str`` (or ``str | None``): its value is made text.
    text: bool = False


@dataclasses.dataclass(frozen=True)
class FieldMap:
    """A field_map checked against a sample type; build it with :func:`compile_field_map`."""

    #: The sample class.
    sample_type: type
    #: One spec per mapped field, in field_map order.
    fields: tuple[FieldSpec, ...]

    @functools.cached_property  # asked for each sample read
    def extensions(self) -> frozenset[str]:
        """The member extensions this map may read (nothing else is decoded)."""
        return frozenset(s.ext for f in self.fields for s in f.sources)


def parse_source(spec: str) -> FieldSource:
    """Parse one source such as ``"json[a][0][b]"`` (see :mod:`fpipe.samples.field_spec`).

    Examples:
      >>> parse_source("json[a][0][b]")
      FieldSource(ext='json', path=('a', '0', 'b'))
    """
    alts = parse_field_spec(spec) if isinstance(spec, str) else ()
    if len(alts) != 1:
        raise ConfigError(
            f"bad field_map source {spec!r}; expected one source like 'jpg' or 'json[caption]'"
        )
    return FieldSource(ext=alts[0].ext, path=alts[0].path)


def compile_field_map(
    sample_type: type, field_map: Mapping[str, str | Sequence[str]] | FieldMap
) -> FieldMap:
    """Check ``field_map`` against ``sample_type`` and parse it (cached for equal inputs).

    Raises:
      ConfigError: unknown field name, a required field not mapped, or a bad source.
    """
    if isinstance(field_map, FieldMap):
        if field_map.sample_type is not sample_type:
            raise ConfigError(
                f"field_map was compiled for {field_map.sample_type.__name__}, "
                f"not {sample_type.__name__}"
            )
        return field_map
    if not isinstance(field_map, Mapping):
        raise ConfigError(f"field_map must be a mapping field -> source, got {field_map!r}")
    frozen = tuple((str(k), v if isinstance(v, str) else tuple(v)) for k, v in field_map.items())
    return _compile(sample_type, frozen)


def _is_text(tp: Any) -> bool:
    """True for ``str``, ``str | None`` and ``Optional[str]`` (or those names as strings)."""
    if isinstance(tp, str):
        return tp.replace(" ", "") in ("str", "str|None", "None|str", "Optional[str]")
    if tp is str:
        return True
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return set(typing.get_args(tp)) == {str, type(None)}
    return False


@functools.lru_cache(maxsize=256)
def _compile(sample_type: type, items: tuple[tuple[str, Any], ...]) -> FieldMap:
    if not dataclasses.is_dataclass(sample_type):
        raise ConfigError(f"sample type {sample_type!r} is not a dataclass")
    sfields = {f.name: f for f in dataclasses.fields(sample_type) if f.init}
    try:
        hints = typing.get_type_hints(sample_type)
    except Exception:  # noqa: BLE001 - unresolvable annotations: read them as written
        hints = {}
    user = {n for n in sfields if n not in BASE_FIELDS}
    specs = []
    for name, value in items:
        if name not in user:
            raise ConfigError(
                f"field_map names {name!r}, which {sample_type.__name__} does not have; "
                f"its fields: {', '.join(sorted(user))}"
            )
        if not value:
            raise ConfigError(f"field_map entry {name!r} has an empty list of alternatives")
        try:
            alts = parse_field_spec(value)
        except ConfigError as e:
            raise ConfigError(f"field_map entry {name!r}: {e}") from None
        f = sfields[name]
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        sources = tuple(FieldSource(ext=a.ext, path=a.path) for a in alts)
        specs.append(FieldSpec(name, sources, required, _is_text(hints.get(name, f.type))))
    mapped = {s.name for s in specs}
    missing = [
        n
        for n in sorted(user)
        if n not in mapped
        and sfields[n].default is dataclasses.MISSING
        and sfields[n].default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(
            f"field_map for {sample_type.__name__} does not map required field(s) "
            f"{', '.join(missing)}; add e.g. {missing[0]}: <extension>"
        )
    return FieldMap(sample_type=sample_type, fields=tuple(specs))
