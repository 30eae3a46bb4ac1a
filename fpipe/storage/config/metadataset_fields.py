"""The single fields of a metadataset entry, each checked: unknown keys, numbers (weights,
repetitions), subflavors, an entry's name, its ``shuffle_over_epochs_multiplier`` and the
names of its config files.

Shared by every kind of entry (:mod:`fpipe.storage.config.metadataset_entries` for a
``path:``, :mod:`fpipe.storage.config.metadataset_join` for a ``join:``, the blends of
:mod:`fpipe.storage.config.metadataset_walk`). Every error names the file and the entry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fpipe.core.errors import ConfigError
from fpipe.storage.config.dataset_yaml import is_config_file_name

__all__ = [
    "BLEND_ENTRY_KEYS",
    "CONFIG_FILE_KEYS",
    "EPOCH_ENTRY_KEYS",
    "config_name",
    "entry_name",
    "multiplier",
    "no_unknown",
    "number",
    "subflavors_of",
]

#: Keys an entry of a weighted / epochized blend may add to a reference.
BLEND_ENTRY_KEYS = {"weight"}
EPOCH_ENTRY_KEYS = {"repetitions"}


def no_unknown(obj: dict, allowed: set, where: str, entry: str) -> None:
    """Raise naming the file, the entry and the unknown keys, if any."""
    unknown = sorted(str(k) for k in obj if k not in allowed)
    if unknown:
        raise ConfigError(f"{where}: {entry}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")


def number(value: Any, where: str, entry: str, what: str) -> float:
    """A finite number >= 0 (weights, repetitions), else an error naming the entry."""
    if isinstance(value, dict):
        raise ConfigError(
            f"{where}: {entry}: {what} must be a number; to change weights over training, give "
            "the blend a 'schedule: [[position, {name: weight}], ...]' (see docs/metadataset.md)"
        )
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: {entry}: {what} must be a number, got {value!r}")
    value = float(value)
    if not value >= 0 or value == float("inf"):
        raise ConfigError(f"{where}: {entry}: {what} must be a finite number >= 0, got {value}")
    return value


def subflavors_of(node: dict, where: str, entry: str) -> dict:
    """The entry's own subflavors (Energon's legacy ``subflavor`` included)."""
    sub = node.get("subflavors") or {}
    if not isinstance(sub, dict):
        raise ConfigError(f"{where}: {entry}: subflavors must be a mapping")
    sub = {str(k): v for k, v in sub.items()}
    if node.get("subflavor") is not None:  # Energon's legacy single subflavor
        sub.setdefault("subflavor", node["subflavor"])
    return sub


def entry_name(item: dict) -> str:
    """The name of a blend entry: its ``name:``, else the last part of its (first) path."""
    if item.get("name"):
        return str(item["name"])
    if "path" in item:
        return _default_name(item, item.get("split_part"))
    parts = item["join"]
    first = (list(parts.values()) if isinstance(parts, dict) else parts)[0]
    return Path(str(first["path"])).name


def _default_name(ref: dict, split_part: str | None) -> str:
    """The last part of the path without .yaml, plus ``.split_part`` when given."""
    stem = Path(str(ref["path"])).name
    for suffix in (".yaml", ".yml"):
        stem = stem.removesuffix(suffix)
    return f"{stem}.{split_part}" if split_part else stem


def multiplier(node: dict, where: str, entry: str) -> int | None:
    """An entry's ``shuffle_over_epochs_multiplier``: an integer >= 1 (default 1) or None
    (slices in index order). -1 (slices drawn with replacement, forever) is refused."""
    m = node.get("shuffle_over_epochs_multiplier", 1)
    if m is None:
        return None
    if m == -1:
        raise ConfigError(
            f"{where}: {entry}: shuffle_over_epochs_multiplier: -1 draws slices with replacement "
            "forever, so an epoch no longer holds every sample once; fpipe keeps that "
            "guarantee. Use a large multiplier instead (e.g. 100)"
        )
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ConfigError(
            f"{where}: {entry}: shuffle_over_epochs_multiplier must be an integer >= 1 or null, "
            f"got {m!r}"
        )
    return m


#: The keys of an entry that name another config file of its dataset.
CONFIG_FILE_KEYS = ("dataset_config", "split_config")


def config_name(value: Any, where: str, entry: str, key: str) -> str | None:
    """A ``dataset_config`` / ``split_config`` file name (None when absent)."""
    if value is None:
        return None
    if not is_config_file_name(value):
        raise ConfigError(f"{where}: {entry}: {key} must be a file name, got {value!r}")
    return value
