"""The Arrow files of a Hugging Face ``datasets`` folder, and their splits.

Two kinds of folder hold a dataset as Arrow IPC stream files (``.arrow``):

- what ``Dataset.save_to_disk`` writes: ``state.json`` lists the files
  (``data-00000-of-00003.arrow``...); a ``DatasetDict`` writes ``dataset_dict.json`` naming its
  splits and one such folder per split (``train/``, ``validation/``);
- a ``datasets`` cache folder (``load_dataset(..., cache_dir=...)``): ``dataset_info.json``
  beside ``<builder>-<split>-00000-of-00002.arrow`` (or ``<builder>-<split>.arrow``) files;
  ``cache-*.arrow`` files (results of ``map``, ``filter``) are not the dataset and are skipped.

:func:`hf_arrow_files` gives the files and the split each belongs to; they are indexed as
Parquet files are (:mod:`._parquet`), with record batches in the part of row groups. Names
these files give are data: a file entry leading out of the folder is refused here, a file that
is a symbolic link out of it is refused (and reported) by the indexer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from fpipe.core.errors import ConfigError
from fpipe.storage.paths import contained
from fpipe.storage.read.arrow_stream import ARROW_SUFFIX

__all__ = ["hf_arrow_files"]

#: a cache folder's file: ``<builder>-<split>[-00000-of-00002].arrow``
_CACHE_FILE = re.compile(r"^.+?-(?P<split>[^-]+)(?:-\d{5}-of-\d{5})?\.arrow$")


def _json(path: Path) -> dict:
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: unreadable ({e})") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return obj


def _state_files(folder: Path, prefix: str) -> list[str]:
    """The data files ``folder/state.json`` lists, as ``prefix + name``; each must exist."""
    state = _json(folder / "state.json")
    entries = state.get("_data_files")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{folder / 'state.json'}: no `_data_files` listed")
    names = []
    for e in entries:
        name = e.get("filename") if isinstance(e, dict) else None
        if not isinstance(name, str) or "/" in name or name.startswith("."):
            raise ConfigError(f"{folder / 'state.json'}: bad data file entry {e!r}")
        if not (folder / name).is_file():
            raise ConfigError(f"{folder / name}: listed in state.json but missing")
        names.append(prefix + name)
    return names


def hf_arrow_files(folder: Path) -> tuple[list[str], dict[str, list[str]]] | None:
    """(Arrow files relative to ``folder``, split name -> its files) when ``folder`` is a
    ``save_to_disk`` folder (a ``Dataset``: no splits; a ``DatasetDict``: its splits) or a
    ``datasets`` cache folder; None when it is neither."""
    if (folder / "dataset_dict.json").is_file():
        splits = _json(folder / "dataset_dict.json").get("splits")
        if not isinstance(splits, list) or not all(isinstance(x, str) for x in splits):
            raise ConfigError(f"{folder / 'dataset_dict.json'}: `splits` must list names")
        by_split: dict[str, list[str]] = {}
        for split in splits:
            if "/" in split or split.startswith(".") or not (folder / split).is_dir():
                raise ConfigError(f"{folder}: split {split!r} has no folder")
            # a split folder linking out of the dataset folder: its state.json is not read
            contained(folder, split, where=str(folder / "dataset_dict.json"), what="split")
            by_split[split] = _state_files(folder / split, f"{split}/")
        return [n for files in by_split.values() for n in files], by_split
    if (folder / "state.json").is_file() and "_data_files" in _json(folder / "state.json"):
        return _state_files(folder, ""), {}  # (another tool's state.json is not one)
    if (folder / "dataset_info.json").is_file():
        names = sorted(
            p.name
            for p in folder.iterdir()
            if p.name.endswith(ARROW_SUFFIX) and not p.name.startswith(("cache-", "."))
        )
        if not names:
            return None
        parts: dict[str, list[str]] = {}
        for n in names:
            m = _CACHE_FILE.match(n)
            if m is None:
                return names, {}
            parts.setdefault(m.group("split"), []).append(n)
        return names, parts
    return None
