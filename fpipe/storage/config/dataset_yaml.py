"""``dataset.yaml`` and ``split.yaml``: what a dataset holds and how its shards split.

Both files are read with ``yaml.safe_load`` only and parsed into frozen msgspec Structs. The
formats are a superset of Megatron-Energon's ``.nv-meta`` files, so an Energon ``dataset.yaml``
or ``split.yaml`` parses as is (``sample_type: {__module__, __class__}`` becomes the class name).
Nothing named in these files is imported or executed here: the sample type is a plain string
that :mod:`fpipe.samples` resolves against its own allow-list.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import yaml

from fpipe.core.errors import ConfigError
from fpipe.samples.field_spec import field_spec_value
from fpipe.storage.config.yaml_record import load_yaml_file
from fpipe.storage.paths import expand_braces

__all__ = [
    "DatasetConfig",
    "SplitConfig",
    "dump_yaml",
    "is_config_file_name",
    "is_crude",
    "load_dataset_config",
    "load_split_config",
    "parse_split_ratios",
    "split_config_from_obj",
]

#: sample type used when none was given: raw fields, cooked by the user.
CRUDE = "CrudeSample"


def is_crude(sample_type: str) -> bool:
    """Whether ``sample_type`` names crude samples (raw members for a cooker): ``"CrudeSample"``
    or its short form ``"crude"``.

    Example:
      >>> is_crude("crude"), is_crude("CaptioningSample")
      (True, False)
    """
    return sample_type in (CRUDE, "crude")


class DatasetConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Parsed ``dataset.yaml``."""

    #: name of the typed sample, e.g. ``"CaptioningSample"``; ``"CrudeSample"`` for raw fields.
    sample_type: str = CRUDE
    #: sample field -> source: ``"jpg"``, ``"json[a][0]"``, or alternatives ``["jpg", "png"]``
    #: (first present wins; see :mod:`fpipe.samples.field_spec`).
    field_map: dict[str, str | list[str]] = msgspec.field(default_factory=dict)
    #: free-form labels handed to the sample (Energon's ``subflavors``).
    subflavors: dict[str, Any] = msgspec.field(default_factory=dict)
    #: Energon ``sample_loader`` reference, recorded but never executed by storage.
    sample_loader: str | None = None
    #: the split file of the dataset's index folder to read instead of ``split.yaml``
    #: (Energon's ``split_config:`` key; it wins over one a caller or metadataset names).
    split_config: str | None = None


class SplitConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Parsed ``split.yaml`` (same schema as Energon's). An unknown key is refused (a typo such
    as ``excludes:`` would otherwise train on the shards it meant to exclude)."""

    #: split name -> shard names (paths relative to the dataset folder, with ``.tar``).
    split_parts: dict[str, list[str]] = msgspec.field(default_factory=dict)
    #: shard names, ``"<shard name>/<index in shard>"`` or sample keys (``"<shard stem>/<key>"``).
    exclude: list[str] = msgspec.field(default_factory=list)


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


def _load_yaml(path: Path, data: bytes | None = None) -> Any:
    try:
        return load_yaml_file(path, data)  # the value prepare recorded for these bytes, or parsed
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
    try:
        field_map = {str(k): field_spec_value(v) for k, v in field_map.items()}
    except ConfigError as e:
        raise ConfigError(f"{where}: field_map: {e}") from None
    subflavors = obj.get("subflavors") or {}
    if not isinstance(subflavors, dict):
        raise ConfigError(f"{where}: subflavors must be a mapping")
    loader = obj.get("sample_loader")
    split_config = obj.get("split_config")
    if split_config is not None and not is_config_file_name(split_config):
        raise ConfigError(f"{where}: split_config must be a file name, got {split_config!r}")
    return DatasetConfig(
        sample_type=st,
        field_map=field_map,
        subflavors=subflavors,
        sample_loader=None if loader is None else str(loader),
        split_config=split_config,
    )


def is_config_file_name(name: Any) -> bool:
    """Whether ``name`` is a plain file name (no folder part), as ``dataset_config`` /
    ``split_config`` name a file of a dataset's index folder."""
    return isinstance(name, str) and bool(name) and Path(name).name == name and name != ".."


def load_dataset_config(path: str | Path, data: bytes | None = None) -> DatasetConfig:
    """Read a ``dataset.yaml`` (fpipe or Energon form; ``data``: its bytes, read already); a
    missing file gives the crude default."""
    path = Path(path)
    if data is None and not path.exists():
        return DatasetConfig()
    return dataset_config_from_obj(_load_yaml(path, data), str(path))


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


def load_split_config(path: str | Path, data: bytes | None = None) -> SplitConfig | None:
    """Read a ``split.yaml`` (fpipe or Energon form; ``data``: its bytes, read already);
    ``None`` when the file does not exist."""
    path = Path(path)
    if data is None and not path.exists():
        return None
    return split_config_from_obj(_load_yaml(path, data), path)


def dump_yaml(path: str | Path, obj: msgspec.Struct | dict) -> None:
    """Write a Struct or mapping as YAML (plain types only, stable key order)."""
    data = msgspec.to_builtins(obj) if isinstance(obj, msgspec.Struct) else obj
    tmp = Path(f"{path}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        yaml.safe_dump(data, f, sort_keys=False, allow_unicode=True)
    tmp.replace(path)
