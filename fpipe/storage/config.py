"""``dataset.yaml`` and ``split.yaml``: what a dataset holds and how its shards split.

Both files are read with ``yaml.safe_load`` only and parsed into frozen msgspec Structs. The
formats are a superset of Megatron-Energon's ``.nv-meta`` files, so an Energon ``dataset.yaml``
or ``split.yaml`` parses as is (``sample_type: {__module__, __class__}`` becomes the class name).
Nothing named in these files is imported or executed here: the sample type is a plain string
that :mod:`fpipe.samples` resolves against its own allow-list.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import yaml

from fpipe.core.errors import ConfigError

__all__ = [
    "DatasetConfig",
    "FieldSpec",
    "SplitConfig",
    "dump_yaml",
    "load_dataset_config",
    "load_split_config",
    "parse_field_spec",
    "parse_split_ratios",
]

#: sample type used when none was given: raw fields, cooked by the user.
CRUDE = "CrudeSample"
_FIELD_RE = re.compile(r"^(?P<ext>[^\[\],]+)(?P<path>(?:\[[^\[\]]+\])*)$")
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


class SplitConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Parsed ``split.yaml`` (same schema as Energon's)."""

    #: split name -> shard names (paths relative to the dataset folder, with ``.tar``).
    split_parts: dict[str, list[str]] = msgspec.field(default_factory=dict)
    #: shard names, ``"<shard name>/<index in shard>"`` or sample keys (``"<shard stem>/<key>"``).
    exclude: list[str] = msgspec.field(default_factory=list)


class FieldSpec(msgspec.Struct, frozen=True):
    """One alternative of a field spec: member extension plus a JSON path inside it."""

    ext: str  #: member extension, e.g. ``"jpg"`` or ``"json"``
    path: tuple[str, ...] = ()  #: keys / list indices into the decoded JSON, empty for raw bytes


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
    elif obj.get("__class__"):  # Energon crude dataset: {__module__, __class__: CrudeWebdataset}
        st = CRUDE
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


def load_split_config(path: str | Path) -> SplitConfig | None:
    """Read a ``split.yaml`` (fpipe or Energon form); ``None`` when the file does not exist."""
    path = Path(path)
    if not path.exists():
        return None
    obj = _load_yaml(path) or {}
    try:
        return msgspec.convert(obj, SplitConfig, strict=False)
    except msgspec.ValidationError as e:
        raise ConfigError(f"{path}: bad split file: {e}") from None


def dump_yaml(path: str | Path, obj: msgspec.Struct | dict) -> None:
    """Write a Struct or mapping as YAML (plain types only, stable key order)."""
    data = msgspec.to_builtins(obj) if isinstance(obj, msgspec.Struct) else obj
    tmp = Path(f"{path}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        yaml.safe_dump(data, f, sort_keys=False, allow_unicode=True)
    tmp.replace(path)
