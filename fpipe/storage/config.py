"""``dataset.yaml`` and ``split.yaml``: what a dataset holds and how its shards split.

Both files are read with ``yaml.safe_load`` only and parsed into frozen msgspec Structs. The
formats are a superset of Megatron-Energon's ``.nv-meta`` files, so an Energon ``dataset.yaml``
or ``split.yaml`` parses as is (``sample_type: {__module__, __class__}`` becomes the class name).
Nothing named in these files is imported or executed here: the sample type is a plain string
that :mod:`fpipe.samples` resolves against its own allow-list.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import yaml

from fpipe.core.errors import ConfigError
from fpipe.decode.extensions import strip_gz
from fpipe.storage.webdataset import expand_braces

__all__ = [
    "ColumnSpec",
    "DatasetConfig",
    "FieldSpec",
    "SplitConfig",
    "build_split_config",
    "dump_yaml",
    "load_dataset_config",
    "load_split_config",
    "parse_column",
    "parse_field_spec",
    "parse_split_ratios",
    "split_config_from_obj",
]

#: sample type used when none was given: raw fields, cooked by the user.
CRUDE = "CrudeSample"
_FIELD_RE = re.compile(r"^(?P<ext>[^\[\],]+)(?P<path>(?:\[[^\[\]]+\])*)$")
_LEN_RE = re.compile(r"^len\((.*)\)$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


class DatasetConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Parsed ``dataset.yaml``."""

    #: name of the typed sample, e.g. ``"CaptioningSample"``; ``"CrudeSample"`` for raw fields.
    sample_type: str = CRUDE
    #: sample field -> member spec: ``"jpg"``, ``"jpg,png"`` (first present), ``"json[a][0]"``.
    field_map: dict[str, str] = msgspec.field(default_factory=dict)
    #: free-form labels handed to the sample (Energon's ``subflavors``).
    subflavors: dict[str, Any] = msgspec.field(default_factory=dict)
    #: Energon ``sample_loader`` reference, recorded but never executed by storage.
    sample_loader: str | None = None


class SplitConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Parsed ``split.yaml`` (same schema as Energon's). An unknown key is refused (a typo such
    as ``excludes:`` would otherwise train on the shards it meant to exclude)."""

    #: split name -> shard names (paths relative to the dataset folder, with ``.tar``).
    split_parts: dict[str, list[str]] = msgspec.field(default_factory=dict)
    #: shard names, ``"<shard name>/<index in shard>"`` or sample keys (``"<shard stem>/<key>"``).
    exclude: list[str] = msgspec.field(default_factory=list)


class FieldSpec(msgspec.Struct, frozen=True):
    """One alternative of a field spec: member extension plus a JSON path inside it."""

    ext: str  #: member extension, e.g. ``"jpg"`` or ``"json"``
    path: tuple[str, ...] = ()  #: keys / list indices into the decoded JSON, empty for raw bytes

    @property
    def base_ext(self) -> str:
        """The extension without ``.gz``: the key the member is read under."""
        return strip_gz(self.ext)


def parse_field_spec(spec: str) -> tuple[FieldSpec, ...]:
    """Parse ``"jpg,png"`` or ``"json[caption][0]"`` into alternatives (first present wins).

    >>> parse_field_spec("json[meta][w],txt")
    (FieldSpec(ext='json', path=('meta', 'w')), FieldSpec(ext='txt', path=()))
    """
    out = []
    for option in str(spec).split(","):
        option = option.strip()
        m = _FIELD_RE.match(option)
        if not option or m is None:
            raise ConfigError(
                f"bad field spec {spec!r}: use 'ext', 'ext1,ext2' or 'json[key][0]', e.g. "
                "--field caption=json[caption]"
            )
        path = tuple(p for p in m.group("path")[1:-1].split("][") if p) if m.group("path") else ()
        out.append(FieldSpec(m.group("ext"), path))
    return tuple(out)


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
        check_name(name, "column"), parse_field_spec(m.group(1) if m else spec), bool(m)
    )


def check_name(name: str, what: str) -> str:
    """Return ``name`` if it is usable as a file-name part of the index, else raise."""
    if not _NAME_RE.match(name):
        raise ConfigError(f"bad {what} name {name!r}: use letters, digits, '_', '.', '-'")
    return name


def parse_split_ratios(text: str | tuple[float, ...] | list[float]) -> dict[str, float]:
    """``"8,1,1"`` -> ``{"train": 0.8, "val": 0.1, "test": 0.1}``; also ``"train=8,val=2"``."""
    items = text.split(",") if isinstance(text, str) else list(text)
    names = ("train", "val", "test")
    ratios: dict[str, float] = {}
    try:
        for i, item in enumerate(items):
            if isinstance(item, str) and "=" in item:
                name, value = item.split("=", 1)
                ratios[name.strip()] = float(value)
            elif i < len(names):
                ratios[names[i]] = float(item)
            else:
                raise ValueError("more than 3 unnamed ratios")
    except ValueError as e:
        raise ConfigError(f"bad split {text!r} ({e}): use e.g. --split 8,1,1") from None
    total = sum(ratios.values())
    if total <= 0 or any(v < 0 for v in ratios.values()):
        raise ConfigError(f"bad split {text!r}: ratios must be >= 0 and not all 0")
    return {k: v / total for k, v in ratios.items()}


def _load_yaml(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None


def _sample_type_of_dataset_class(cls: str) -> str:
    """Energon's dataset class in a top-level ``__class__``: ``CrudeWebdataset`` -> crude,
    ``CaptioningWebdataset`` (Energon's older form) -> ``CaptioningSample``."""
    if cls in ("CrudeWebdataset", "DefaultCrudeJsonlDatasetFactory") or not cls:
        return CRUDE
    if cls.endswith("Webdataset"):
        return cls[: -len("Webdataset")] + "Sample"
    return cls


def dataset_config_from_obj(obj: Any, where: str) -> DatasetConfig:
    """Build a :class:`DatasetConfig` from a parsed YAML mapping (fpipe or Energon form)."""
    if obj is None:
        obj = {}
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(obj).__name__}")
    obj = dict(obj)
    st = obj.get("sample_type", CRUDE)
    if isinstance(st, dict):  # Energon: {__module__: megatron.energon, __class__: CaptioningSample}
        st = st.get("__class__")
    elif obj.get("__class__"):  # Energon dataset class: {__module__, __class__: ...}
        st = _sample_type_of_dataset_class(str(obj["__class__"]))
    if not isinstance(st, str) or not st:
        raise ConfigError(f"{where}: sample_type must be a name such as CaptioningSample")
    field_map = obj.get("field_map") or {}
    if not isinstance(field_map, dict):
        raise ConfigError(f"{where}: field_map must map field names to member specs")
    field_map = {str(k): str(v) for k, v in field_map.items()}
    for spec in field_map.values():
        parse_field_spec(spec)
    subflavors = obj.get("subflavors") or {}
    if not isinstance(subflavors, dict):
        raise ConfigError(f"{where}: subflavors must be a mapping")
    loader = obj.get("sample_loader")
    return DatasetConfig(
        sample_type=st,
        field_map=field_map,
        subflavors=subflavors,
        sample_loader=None if loader is None else str(loader),
    )


def load_dataset_config(path: str | Path) -> DatasetConfig:
    """Read a ``dataset.yaml`` (fpipe or Energon form); a missing file gives the crude default."""
    path = Path(path)
    if not path.exists():
        return DatasetConfig()
    return dataset_config_from_obj(_load_yaml(path), str(path))


def split_config_from_obj(obj: Any, where: str | Path) -> SplitConfig:
    """Build a :class:`SplitConfig` from a parsed split.yaml / split.json (fpipe or Energon).

    Shard names may be brace patterns, as ``energon prepare`` writes them
    (``part-{00000..00007}.tar``, ``{a,b}.tar``): they are expanded in order, so split
    membership and order equal Energon's.
    """
    obj = obj or {}
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: a split file must be a mapping with split_parts")
    unknown = sorted(str(k) for k in obj if k not in SplitConfig.__struct_fields__)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {unknown[0]!r} in a split file (known keys: "
            f"{', '.join(SplitConfig.__struct_fields__)}); fix the typo, nothing was excluded"
        )
    try:
        raw = msgspec.convert(obj, SplitConfig, strict=False)
    except msgspec.ValidationError as e:
        raise ConfigError(f"{where}: bad split file: {e}") from None
    parts = {
        name: [s for entry in shards for s in expand_braces(entry)]
        for name, shards in raw.split_parts.items()
    }
    exclude = [s for entry in raw.exclude for s in expand_braces(entry)]
    return SplitConfig(split_parts=parts, exclude=exclude)


def load_split_config(path: str | Path) -> SplitConfig | None:
    """Read a ``split.yaml`` (fpipe or Energon form); ``None`` when the file does not exist."""
    path = Path(path)
    if not path.exists():
        return None
    return split_config_from_obj(_load_yaml(path), path)


def build_split_config(
    split: str | Mapping[str, Any] | SplitConfig | None,
    shards: list[str],
    exclude: Iterable[str],
    seed: int | None,
) -> SplitConfig | None:
    """The split.yaml ``fpipe prepare`` writes for ``shards``.

    ``split`` is ratios (``"8,1,1"``: train/val/test by shard counts, shards shuffled with
    ``seed`` first when given), a mapping split name -> shard names or globs (braces
    expanded), or a :class:`SplitConfig`; ``None`` with excludes puts every shard in train.
    """
    exclude = list(exclude)
    if split is None:
        if not exclude:
            return None
        return SplitConfig(split_parts={"train": list(shards)}, exclude=exclude)
    if isinstance(split, SplitConfig):
        return SplitConfig(split_parts=split.split_parts, exclude=list(split.exclude) + exclude)
    if isinstance(split, Mapping):
        parts = {}
        for name, pats in split.items():
            pats = [pats] if isinstance(pats, str) else list(pats)
            pats = [q for p in pats for q in expand_braces(p)]
            parts[str(name)] = [s for s in shards if any(fnmatch.fnmatch(s, p) for p in pats)]
        return SplitConfig(split_parts=parts, exclude=exclude)
    ratios = parse_split_ratios(split)
    order = list(shards)
    if seed is not None:
        perm = np.random.Generator(np.random.Philox(seed)).permutation(len(order))
        order = [order[i] for i in perm]
    parts, start, acc = {}, 0, 0.0
    for name, r in ratios.items():
        acc += r
        end = len(order) if name == list(ratios)[-1] else round(acc * len(order))
        parts[name] = sorted(order[start:end])
        start = end
    return SplitConfig(split_parts=parts, exclude=exclude)


def dump_yaml(path: str | Path, obj: msgspec.Struct | dict) -> None:
    """Write a Struct or mapping as YAML (plain types only, stable key order)."""
    data = msgspec.to_builtins(obj) if isinstance(obj, msgspec.Struct) else obj
    tmp = Path(f"{path}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        yaml.safe_dump(data, f, sort_keys=False, allow_unicode=True)
    tmp.replace(path)
