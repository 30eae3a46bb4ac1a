"""Megatron-Energon datasets: load an ``energon prepare``-d folder as is, or convert it.

What is read (see ``docs/energon_migration.md``):

- ``.nv-meta/dataset.yaml``: ``sample_type`` (``__class__`` name), ``field_map``,
  ``subflavors``; ``sample_loader`` / ``part_filter`` are recorded, never executed;
- ``.nv-meta/split.yaml``: ``split_parts`` and ``exclude``;
- ``.nv-meta/.info.yaml`` (or ``.info.json``): ``shard_counts`` (shard name -> samples);
- ``<shard>.tar.idx`` next to each shard: little-endian uint64 byte offsets of the first tar
  header of every sample, plus one final offset (the end of the last sample).

Nothing under ``.nv-meta`` or next to the shards is written.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.storage.config import (
    DatasetConfig,
    SplitConfig,
    dataset_config_from_obj,
    load_split_config,
)
from fpipe.storage.dataset import members_to_dict, resolve_split
from fpipe.storage.reader import FileCache
from fpipe.storage.webdataset import ShardError, iter_samples, shard_stem

__all__ = ["EnergonDataset", "EnergonMeta", "is_energon", "read_energon_meta"]

META_DIR = ".nv-meta"
IDX_SUFFIX = ".idx"  # "<shard>.tar" -> "<shard>.tar.idx"


def is_energon(root: str | Path) -> bool:
    """True if ``root`` has an Energon ``.nv-meta`` folder."""
    return (Path(root) / META_DIR).is_dir()


class EnergonMeta:
    """The parts of ``.nv-meta`` fpipe uses."""

    def __init__(self, config: DatasetConfig, split: SplitConfig | None, counts: dict[str, int]):
        self.config = config  #: parsed dataset.yaml
        self.split = split  #: parsed split.yaml, None if absent
        self.shard_counts = counts  #: shard name -> sample count, in file order


def _load(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f) if path.suffix == ".json" else yaml.safe_load(f)
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: cannot read: {e}") from None


def read_energon_meta(root: str | Path) -> EnergonMeta:
    """Parse ``.nv-meta`` of an Energon WebDataset folder."""
    meta = Path(root) / META_DIR
    ds_yaml = meta / "dataset.yaml"
    config = (
        dataset_config_from_obj(_load(ds_yaml), str(ds_yaml))
        if ds_yaml.exists()
        else (DatasetConfig())
    )
    for name in ("split.yaml", "split.json"):
        if (meta / name).exists():
            split = (
                load_split_config(meta / name)
                if name.endswith("yaml")
                else SplitConfig(**_load(meta / name))
            )
            break
    else:
        split = None
    for name in (".info.yaml", ".info.json"):
        if (meta / name).exists():
            info = _load(meta / name) or {}
            break
    else:
        raise ConfigError(
            f"{meta}: no .info.yaml or .info.json (needed for shard counts); "
            f"run `fpipe prepare {root}` to index the shards instead"
        )
    counts = info.get("shard_counts") if isinstance(info, dict) else None
    if not isinstance(counts, dict):
        raise ConfigError(f"{meta}: .info file has no shard_counts mapping")
    return EnergonMeta(config, split, {str(k): int(v) for k, v in counts.items()})


def read_tar_idx(shard_path: str, count: int) -> np.ndarray:
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


def parse_sample(buf: bytes) -> tuple[str, list[tuple[str, bytes]]]:
    """(key, [(ext, bytes)]) of the first sample in a byte range of a tar file."""
    f = io.BytesIO(buf)
    for key, exts, _offs, _sizes, content in iter_samples(f, len(buf), lambda e: -1):
        return key, [(e, content[e]) for e in exts]
    raise ShardError("no tar member in the sample's byte range")


class EnergonDataset:
    """An Energon-prepared folder read through its ``.tar.idx`` files, with no fpipe index.

    Columns: ``shard_id`` and ``bytes`` (tar bytes of each sample, from the offsets). Sample
    indices, keys and splits match Energon's (``exclude`` entries ``"<shard>/<index>"``
    use Energon's per-shard sample index). Run ``fpipe prepare`` on the folder for image
    sizes, text lengths and other metadata columns.
    """

    def __init__(self, path: str | os.PathLike, *, max_open_files: int = 64):
        self.path = str(path)
        self._max_open = max_open_files
        meta = read_energon_meta(self.path)
        self.config: DatasetConfig = meta.config
        self._split = meta.split
        self._shards = list(meta.shard_counts)
        self._counts = np.asarray(list(meta.shard_counts.values()), dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(self._counts)]).astype(np.int64)
        self._n = int(self._starts[-1])
        self._idx: dict[int, np.ndarray] = {}
        self._cols: dict[str, np.ndarray] = {}
        self._key_index: dict[str, int] | None = None
        self._files = FileCache(max_open_files)

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "max_open_files": self._max_open}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], max_open_files=state["max_open_files"])

    def __repr__(self) -> str:
        return f"EnergonDataset({self.path!r}, samples={self._n}, shards={len(self._shards)})"

    def __len__(self) -> int:
        return self._n

    @property
    def shards(self) -> tuple[str, ...]:
        """Shard names as in ``.info.yaml``, in shard-id order."""
        return tuple(self._shards)

    @property
    def column_names(self) -> tuple[str, ...]:
        """``("shard_id", "bytes")``."""
        return ("shard_id", "bytes")

    def _offsets(self, sid: int) -> np.ndarray:
        arr = self._idx.get(sid)
        if arr is None:
            path = os.path.join(self.path, self._shards[sid])
            arr = self._idx[sid] = read_tar_idx(path, int(self._counts[sid]))
        return arr

    def column(self, name: str) -> np.ndarray:
        """``shard_id`` (int32) or ``bytes`` (int64, reads every ``.tar.idx``)."""
        if name not in self._cols:
            if name == "shard_id":
                ids = np.repeat(np.arange(len(self._shards), dtype=np.int32), self._counts)
                self._cols[name] = ids
            elif name == "bytes":
                parts = [np.diff(self._offsets(s)) for s in range(len(self._shards))]
                self._cols[name] = np.concatenate(parts) if parts else np.zeros(0, np.int64)
            else:
                raise KeyError(
                    f"{self.path}: no column {name!r}; columns: {self.column_names}"
                    " (run `fpipe prepare` for metadata columns)"
                )
        return self._cols[name]

    @property
    def split_names(self) -> tuple[str, ...]:
        """Split names from ``.nv-meta/split.yaml``."""
        return tuple(self._split.split_parts) if self._split else ()

    def split_indices(self, name: str) -> np.ndarray:
        """Sample indices of split ``name`` after Energon's excludes."""
        return resolve_split(
            self._split,
            name,
            self._shards,
            self._starts,
            self.column("shard_id"),
            self.index_of_key,
            os.path.join(self.path, META_DIR, "split.yaml"),
        )

    def _locate(self, i: int) -> tuple[int, str, int, int]:
        i = int(i)
        if not 0 <= i < self._n:
            raise IndexError(f"sample index {i} out of range for {self._n} samples")
        sid = int(np.searchsorted(self._starts, i, side="right") - 1)
        offs = self._offsets(sid)
        j = i - int(self._starts[sid])
        return sid, os.path.join(self.path, self._shards[sid]), int(offs[j]), int(offs[j + 1])

    def _sample(self, i: int) -> tuple[str, str, list[tuple[str, bytes]]]:
        sid, path, lo, hi = self._locate(i)
        where = f"{shard_stem(self._shards[sid])}/#{i - int(self._starts[sid])}"
        try:
            buf = self._files.pread(path, lo, hi - lo)
        except OSError as e:
            raise BadSampleError(path, where, f"read failed: {e}") from None
        if len(buf) < hi - lo:
            raise BadSampleError(path, where, f"shard truncated: bytes {lo}..{hi} not there")
        try:
            key, parts = parse_sample(buf)
        except ShardError as e:
            raise BadSampleError(path, where, f"bytes {lo}..{hi}: {e.reason}") from None
        return path, f"{shard_stem(self._shards[sid])}/{key}", parts

    def key(self, i: int) -> str:
        """``"<shard stem>/<member key>"`` (reads the sample's tar headers)."""
        return self._sample(i)[1]

    def index_of_key(self, key: str) -> int | None:
        """Index of the sample with this key (reads every sample's headers on first use)."""
        if self._key_index is None:
            self._key_index = {self.key(i): i for i in range(self._n)}
        return self._key_index.get(key)

    def read(self, i: int) -> dict[str, bytes]:
        """Raw member bytes of sample ``i`` by extension (``.gz`` members decompressed)."""
        path, key, parts = self._sample(i)
        return members_to_dict(path, lambda: key, parts)

    def close(self) -> None:
        """Close open shard files of this process."""
        self._files.close()


def exclude_to_keys(root: str | Path, meta: EnergonMeta) -> list[str]:
    """Energon ``exclude`` entries with sample indices rewritten as sample keys.

    fpipe's own index may leave bad samples out, so Energon's per-shard indices would point
    at other samples there; keys do not move.
    """
    if meta.split is None:
        return []
    out = []
    ds = None
    for entry in meta.split.exclude:
        head, _, tail = entry.rpartition("/")
        if head in meta.shard_counts and tail.isdigit():
            if ds is None:
                ds = EnergonDataset(root)
            sid = ds.shards.index(head)
            try:
                out.append(ds.key(int(ds._starts[sid]) + int(tail)))
            except (BadSampleError, IndexError, ConfigError):
                out.append(entry)
        else:
            out.append(entry)
    return out
