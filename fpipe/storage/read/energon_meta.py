"""What an Energon folder's ``.nv-meta`` holds, read: its configs, shard counts and the arrays
the ``"energon"`` layout is read through.

``dataset.yaml`` and ``split.yaml`` (:func:`read_energon_yaml`), ``.info.yaml`` / ``.info.json``
(:func:`read_energon_meta`, or :func:`walk_energon_meta` counting the samples of a folder
without it from the shards' tar headers), turned into an index record (:func:`energon_record`)
and the arrays it is read from (:func:`energon_arrays`: each ``<shard>.tar.idx``'s sample
offsets). Nothing under ``.nv-meta`` or next to the shards is written.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fpipe.core.errors import ConfigError
from fpipe.storage.config.dataset_yaml import (
    DatasetConfig,
    SplitConfig,
    dataset_config_from_obj,
    split_config_from_obj,
)
from fpipe.storage.config.safe_yaml import safe_load
from fpipe.storage.read.record import IndexRecord, ShardEntry
from fpipe.storage.read.webdataset import open_shard, split_name

__all__ = [
    "EnergonMeta",
    "IDX_SUFFIX",
    "META_DIR",
    "energon_arrays",
    "energon_record",
    "has_shard_counts",
    "is_energon",
    "read_energon_meta",
    "read_energon_yaml",
    "walk_energon_meta",
]

META_DIR = ".nv-meta"
IDX_SUFFIX = ".idx"  # "<shard>.tar" -> "<shard>.tar.idx"


def is_energon(root: str | Path) -> bool:
    """True if ``root`` has an Energon ``.nv-meta`` folder."""
    return (Path(root) / META_DIR).is_dir()


class EnergonMeta:
    """The parts of ``.nv-meta`` fpipe uses."""

    def __init__(self, config: DatasetConfig, split: SplitConfig | None, counts: dict[str, int]):
        self.config = config  #: parsed dataset.yaml
        self.split = split  #: parsed split.yaml (braces expanded), None if absent
        self.shard_counts = counts  #: shard name -> sample count, in file order


def _load(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f) if path.suffix == ".json" else safe_load(f)
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: cannot read: {e}") from None


def _first(meta: Path, names: tuple[str, ...]) -> Path | None:
    return next((meta / n for n in names if (meta / n).exists()), None)


def read_energon_yaml(root: str | Path) -> tuple[DatasetConfig, SplitConfig | None]:
    """``dataset.yaml`` and ``split.yaml`` of ``.nv-meta`` (a default config and no split when
    absent): all that a folder holds before ``energon prepare`` wrote ``.info.yaml``, the
    layout Energon's guide shows."""
    meta = Path(root) / META_DIR
    ds_yaml = meta / "dataset.yaml"
    config = (
        dataset_config_from_obj(_load(ds_yaml), str(ds_yaml)) if ds_yaml.exists() else None
    ) or DatasetConfig()
    split_path = _first(meta, ("split.yaml", "split.json"))
    split = None if split_path is None else split_config_from_obj(_load(split_path), split_path)
    return config, split


def has_shard_counts(root: str | Path) -> bool:
    """True if ``.nv-meta`` has the ``.info.yaml`` (or ``.info.json``) of ``energon prepare``:
    the folder can be read without ``fpipe prepare``."""
    return _first(Path(root) / META_DIR, _INFO_NAMES) is not None


_INFO_NAMES = (".info.yaml", ".info.json")


def read_energon_meta(root: str | Path) -> EnergonMeta:
    """Parse ``.nv-meta`` of an Energon WebDataset folder.

    Raises:
      ConfigError: no ``.info.yaml``; the message gives the ``fpipe prepare`` command that
        indexes the folder (reading its ``dataset.yaml`` and ``split.yaml`` as they are).
    """
    meta = Path(root) / META_DIR
    config, split = read_energon_yaml(root)
    info_path = _first(meta, _INFO_NAMES)
    if info_path is None:
        have = ", ".join(sorted(p.name for p in meta.iterdir())) or "nothing"
        raise ConfigError(
            f"{meta}: holds {have} but no .info.yaml (the shard counts `energon prepare` "
            f"writes); index the shards once with `fpipe prepare {shlex.quote(str(root))}`: it "
            f"reads .nv-meta/dataset.yaml and split.yaml as they are (nothing in .nv-meta is "
            f"changed) and writes {Path(root) / '.fpipe'}, which is opened from then on"
        )
    info = _load(info_path) or {}
    counts = info.get("shard_counts") if isinstance(info, dict) else None
    if not isinstance(counts, dict):
        raise ConfigError(f"{info_path}: no shard_counts mapping")
    return EnergonMeta(config, split, {str(k): int(v) for k, v in counts.items()})


def energon_record(meta: EnergonMeta) -> IndexRecord:
    """The index record of an Energon folder: its shards and counts, a ``bytes`` column."""
    shards = tuple(ShardEntry(name, n) for name, n in meta.shard_counts.items())
    return IndexRecord(
        layout="energon",
        num_samples=sum(meta.shard_counts.values()),
        shards=shards,
        columns={"bytes": "int64"},
        source="energon",
    )


def _read_tar_idx(shard_path: str, count: int) -> np.ndarray:
    """Sample start offsets (count + 1 entries) from Energon's ``<shard>.tar.idx``."""
    path = shard_path + IDX_SUFFIX
    try:
        arr = np.fromfile(path, dtype="<u8").astype(np.int64)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read Energon tar index: {e}") from None
    if len(arr) != count + 1 or (len(arr) > 1 and np.any(np.diff(arr) <= 0)):
        raise ConfigError(
            f"{path}: has {len(arr)} offsets, .info says {count} samples (+1 end offset); "
            "the Energon index is stale: re-run `energon prepare` or `fpipe prepare`"
        )
    return arr


def energon_arrays(root: str, record: IndexRecord, offsets: dict[str, np.ndarray] | None = None):
    """``make(name)`` for :class:`~fpipe.storage.read.record.ArrayStore`: ``shard_id.npy`` from the
    counts, ``columns/bytes.npy`` from every ``.tar.idx``, ``idx/<shard id>`` offsets
    (``offsets``: shard name -> its offsets as :func:`walk_energon_meta` found them, for a
    folder without ``.tar.idx`` files)."""

    def make(name: str) -> np.ndarray:
        if name == "shard_id.npy":
            counts = [s.samples for s in record.shards]
            return np.repeat(np.arange(len(counts), dtype=np.int32), counts)
        if name.startswith("idx/"):
            s = record.shards[int(name[4:])]
            if offsets is not None:
                return offsets[s.name]
            return _read_tar_idx(os.path.join(root, s.name), s.samples)
        if name == "columns/bytes.npy":
            parts = [np.diff(make(f"idx/{s}")) for s in range(len(record.shards))]
            return np.concatenate(parts) if parts else np.zeros(0, np.int64)
        raise KeyError(name)

    return make


def _walk_offsets(root: str | Path, name: str) -> np.ndarray:
    """The offsets Energon's ``<shard>.tar.idx`` holds for shard ``name`` (each sample's first
    tar header, then the end of its last member), found by reading its tar headers."""
    import tarfile

    f, _size = open_shard(str(root), name)
    offsets: list[int] = []
    last = None
    try:
        with f, tarfile.open(fileobj=f, mode="r:") as tf:
            for member in tf:
                parts = split_name(member.name)
                if parts is None or not member.isfile():
                    continue
                if parts[0] != last:
                    offsets.append(member.offset)
                    last = parts[0]
            offsets.append(tf.offset)
    except (OSError, tarfile.TarError) as e:
        raise ConfigError(
            f"{Path(root) / name}: cannot read the shard's tar headers: {e}"
        ) from None
    return np.asarray(offsets, dtype=np.int64)


def walk_energon_meta(root: str | Path) -> tuple[EnergonMeta, dict[str, np.ndarray]]:
    """The meta of a ``.nv-meta`` holding ``dataset.yaml`` and ``split.yaml`` but no
    ``.info.yaml`` (the layout Energon's guide shows), and each shard's sample offsets: the
    shards are those ``split.yaml`` names (every split part, in file order), counted by reading
    their tar headers now (nothing is written; each process that opens the folder reads them).

    Raises:
      ConfigError: no split file, or a shard that cannot be read or leads out of ``root``.
    """
    meta_dir = Path(root) / META_DIR
    config, split = read_energon_yaml(root)
    if split is None:
        have = ", ".join(sorted(p.name for p in meta_dir.iterdir())) or "nothing"
        raise ConfigError(
            f"{meta_dir}: holds {have} but neither split.yaml nor .info.yaml: fpipe cannot tell "
            f"which shards make each split; index the shards with "
            f"`fpipe prepare {shlex.quote(str(root))}` (or `energon prepare`)"
        )
    names = list(dict.fromkeys(n for part in split.split_parts.values() for n in part))
    offsets = {n: _walk_offsets(root, n) for n in names}
    counts = {n: len(o) - 1 for n, o in offsets.items()}
    return EnergonMeta(config, split, counts), offsets
