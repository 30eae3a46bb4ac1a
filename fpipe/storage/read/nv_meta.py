"""Energon's ``.nv-meta/`` files beside fpipe's index, and what edits to them mean on open.

A dataset prepared through ``fpipe.energon`` gets, besides ``.fpipe/``, the files Energon 7.4's
prepare writes: ``.info.json`` (the shards' sample counts), ``split.yaml`` (each split part's
shards, runs of numbered names collapsed to brace ranges as Energon does) and ``dataset.yaml``
(only where there is none yet: Energon users edit it, so an existing one is kept). The sha256 of
each is recorded in ``.fpipe/nv_meta.yaml``.

When the dataset is opened (:func:`edited_nv_meta`), an edited ``dataset.yaml`` (sample type,
field map, subflavors) or ``split.yaml`` is read in place of the index's copy; an edited or
removed ``.info.json`` means the shards changed, and the index is refused, naming the file.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from fpipe.core.errors import ConfigError
from fpipe.storage.config.dataset_yaml import CRUDE, DatasetConfig

__all__ = ["DIGESTS", "collapse_names", "edited_nv_meta", "write_nv_meta"]

META = ".nv-meta"
#: the record of the ``.nv-meta`` files' digests, in the index folder
DIGESTS = "nv_meta.yaml"
#: The Energon version whose file format is written (Energon reads ``energon_version``).
_FORMAT_VERSION = "7.4.0"
_NUM = re.compile(r"\d+")


def _split_numbers(name: str) -> tuple[list[str], list[str]]:
    return _NUM.split(name), _NUM.findall(name)


def collapse_names(names: Sequence[str]) -> list[str]:
    """Runs of consecutive names that differ in one number, counting up by one at the same
    width, as one brace range (``data-{1..2}.tar``); the order is kept (Energon's split.yaml)."""
    out: list[str] = []
    i = 0
    while i < len(names):
        lits, nums = _split_numbers(names[i])
        slot, end, prev = -1, i, nums
        for j in range(i + 1, len(names)):
            lits_j, nums_j = _split_numbers(names[j])
            if lits_j != lits or len(nums_j) != len(nums):
                break
            diff = [k for k, (a, b) in enumerate(zip(prev, nums_j)) if int(a) != int(b)]
            if len(diff) != 1 or (slot != -1 and diff[0] != slot):
                break
            k = diff[0]
            if len(nums_j[k]) != len(prev[k]) or int(nums_j[k]) != int(prev[k]) + 1:
                break
            slot, end, prev = k, j, nums_j
        if end == i:
            out.append(names[i])
            i += 1
            continue
        pieces = [lits[0]]
        for k, num in enumerate(nums):
            pieces.append(f"{{{num}..{prev[k]}}}" if k == slot else num)
            pieces.append(lits[k + 1])
        out.append("".join(pieces))
        i = end + 1
    return out


def _energon_dataset_yaml(config: DatasetConfig) -> dict:
    """``dataset.yaml`` as ``energon prepare --sample-type ... --field-map ...`` writes it."""
    if config.sample_type == CRUDE or not config.field_map:
        return {"__module__": "megatron.energon", "__class__": "CrudeWebdataset"}
    out: dict = {"sample_type": {"__module__": "megatron.energon", "__class__": config.sample_type}}
    out["field_map"] = dict(config.field_map)
    if config.subflavors:
        out["subflavors"] = dict(config.subflavors)
    return out


def _digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def write_nv_meta(
    root: str | Path,
    index_dir: str | Path,
    shard_counts: Mapping[str, int],
    split_parts: Mapping[str, Sequence[str]],
    config: DatasetConfig,
) -> None:
    """Write ``root/.nv-meta/`` as Energon 7.4's prepare does (see the module docstring) and
    record the files' digests in ``index_dir``."""
    meta = Path(root) / META
    meta.mkdir(exist_ok=True)
    info = {"energon_version": _FORMAT_VERSION, "shard_counts": dict(shard_counts)}
    (meta / ".info.json").write_text(json.dumps(info, indent=2))
    if (meta / ".info.yaml").is_file():  # Energon keeps a legacy .info.yaml in step too
        (meta / ".info.yaml").write_text(yaml.safe_dump(info))
    parts = {k: collapse_names(list(v)) for k, v in split_parts.items()}
    split: dict[str, Any] = {"split_parts": parts, "exclude": []}
    (meta / "split.yaml").write_text(yaml.safe_dump(split, sort_keys=False))
    if not (meta / "dataset.yaml").is_file():
        ds = _energon_dataset_yaml(config)
        (meta / "dataset.yaml").write_text(yaml.safe_dump(ds, sort_keys=False))
    names = (".info.json", "split.yaml", "dataset.yaml")
    digests = {name: _digest(meta / name) for name in names}
    (Path(index_dir) / DIGESTS).write_text(yaml.safe_dump(digests))


def edited_nv_meta(root: str | Path, index_dir: str | Path) -> set[str]:
    """The ``.nv-meta`` files edited since the index in ``index_dir`` recorded them
    (``dataset.yaml``, ``split.yaml``); empty where no digests were recorded. An edited or
    removed ``.info.json`` (other shards) is a ConfigError naming it."""
    record = Path(index_dir) / DIGESTS
    if not record.is_file():
        return set()
    recorded = yaml.safe_load(record.read_text()) or {}
    meta = Path(root) / META
    edited = {n for n, d in recorded.items() if _digest(meta / n) != d}
    if ".info.json" in edited:
        raise ConfigError(
            f"{meta / '.info.json'} changed since the index in {index_dir} was written (the "
            "shards or their sample counts changed): prepare the dataset again"
        )
    return edited
