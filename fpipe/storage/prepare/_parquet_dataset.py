"""``fpipe prepare`` of a folder, glob or object-storage prefix of Parquet files.

Finds the files, indexes them in place (:mod:`._parquet`), and writes ``.fpipe/`` with
``dataset.yaml`` (a field map from the column names unless one is given) and ``split.yaml``
(from the Hugging Face Hub's file naming unless a split is given).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fpipe.core.errors import ConfigError
from fpipe.decode.extensions import ext_kind
from fpipe.storage.config.dataset_yaml import SplitConfig
from fpipe.storage.prepare._parquet import (
    ParquetIndex,
    index_parquet,
    open_table_file,
    schema_layout,
)
from fpipe.storage.read.parquet import PARQUET_SUFFIX
from fpipe.storage.read.record import ParquetLayout
from fpipe.storage.read.webdataset import list_shards

__all__ = [
    "field_map_from_columns",
    "glob_root",
    "hub_split",
    "list_parquet",
    "parquet_info",
    "remote_parquet",
    "scan_parquet",
]

#: a Hub split name at the start of a file or folder name: ``train-00000-of-00042.parquet``,
#: ``validation/0000.parquet``, ``test.parquet``
_SPLIT_RE = re.compile(
    r"^(train|training|validation|valid|val|dev|test|testing|eval)(?=[-_.]|$)", re.IGNORECASE
)
#: the Hub's split names -> fpipe's (``get_val_dataset`` reads ``val``)
_CANON = {"training": "train", "validation": "val", "valid": "val", "dev": "val",
          "eval": "val", "testing": "test"}  # fmt: skip
_IMAGE_NAMES = ("image", "img", "jpg", "png", "picture", "photo")
_TEXT_NAMES = ("caption", "text", "txt", "sentence", "description", "prompt", "question")
_LABEL_NAMES = ("label", "labels", "class", "target")


def list_parquet(root: str | Path, patterns: tuple[str, ...] | list[str] = ()) -> list[str]:
    """``*.parquet`` files below ``root`` (hidden folders skipped), or those matching
    ``patterns``, relative and sorted."""
    return list_shards(root, list(patterns), suffixes=(PARQUET_SUFFIX,))


def glob_root(path: str) -> tuple[str, str] | None:
    """``("data", "train-*.parquet")`` for a path with glob characters (``data/train-*``);
    None for a plain path."""
    parts = path.replace("\\", "/").split("/")
    for k, part in enumerate(parts):
        if any(c in part for c in "*?[{"):
            return "/".join(parts[:k]) or ".", "/".join(parts[k:])
    return None


def _split_of(name: str) -> str | None:
    """The Hub split a file belongs to by its name (file name first, then its folders)."""
    for part in reversed(name.split("/")):
        m = _SPLIT_RE.match(part)
        if m:
            return m.group(1).lower()
    return None


def named_split(parts: Mapping[str, list[str]]) -> SplitConfig | None:
    """split.yaml from files grouped by split name (a ``DatasetDict``'s splits): the Hub's
    names are also given under fpipe's (``validation`` -> ``val`` too); None when empty."""
    out: dict[str, list[str]] = {}
    for split, files in parts.items():
        canon = _CANON.get(split.lower(), split)
        out.setdefault(canon, []).extend(files)
        if canon != split:
            out.setdefault(split, []).extend(files)
    return SplitConfig(split_parts=out) if out else None


def hub_split(names: list[str]) -> SplitConfig | None:
    """split.yaml from the Hub's file naming: ``data/train-00000-of-00002.parquet`` is in
    ``train``, ``validation-…`` in ``val`` (and, under the Hub's own name, ``validation``),
    ``test-…`` in ``test``. None unless every file is named so (every sample is then in
    every split, as without a split.yaml)."""
    groups: dict[str, list[str]] = {}
    for n in names:
        split = _split_of(n)
        if split is None:
            return None
        groups.setdefault(split, []).append(n)
    return named_split(groups)


def _first(candidates: list[str], names: tuple[str, ...]) -> str | None:
    for want in names:
        for c in candidates:
            if c.lower() == want:
                return c
    return None


def _kind_by_name(column: str) -> str:
    """A media column's kind by its name, when neither the schema nor a value told."""
    low = column.lower()
    if low in _IMAGE_NAMES:
        return "image"
    return "av" if any(w in low for w in ("audio", "speech", "video", "wav")) else ""


def field_map_from_columns(layout: ParquetLayout) -> dict[str, str]:
    """A field map from column names: an image (or audio, video) struct column, a caption or
    text column, a label; empty when nothing is recognised (crude samples)."""
    kinds = {
        c: ext_kind(layout.media_exts.get(c, "")) or _kind_by_name(c) for c in layout.media_columns
    }
    images = [c for c, k in kinds.items() if k == "image"]
    avs = [c for c, k in kinds.items() if k == "av"]
    fmap: dict[str, str] = {}
    image = _first(images, _IMAGE_NAMES) or (images[0] if images else None)
    if image:
        fmap["image"] = image
    elif avs:
        kind = "audio" if any(n in avs[0].lower() for n in ("audio", "speech", "wav")) else "video"
        fmap[kind] = avs[0]
    text = _first(list(layout.strings), _TEXT_NAMES)
    if text:
        fmap["caption" if fmap else "text"] = text
    label = _first([*layout.numeric, *layout.strings], _LABEL_NAMES)
    if label and image and not text:
        fmap["label"] = label
    return fmap


def parquet_info(index: ParquetIndex, field_map: Mapping[str, Any]) -> tuple[dict, dict]:
    """(``.npy`` files, ``info.yaml`` contents) of an index."""
    arrays, dtypes = index.arrays()
    layout = index.layout or ParquetLayout()
    info = {
        "kind": "parquet",
        "num_samples": int(len(arrays["shard_id.npy"])),
        "shards": index.shards,
        "columns": dtypes,
        "source": "parquet",
        "field_map": dict(field_map),
        "parquet": {
            **({"format": layout.format} if layout.format != "parquet" else {}),
            "columns": list(layout.columns),
            "media_columns": list(layout.media_columns),
            "media_exts": dict(layout.media_exts),
            "strings": list(layout.strings),
            "binary": list(layout.binary),
            "numeric": list(layout.numeric),
        },
    }
    return arrays, info


def scan_parquet(
    root: str,
    names: list[str],
    *,
    storage=None,
    field_map: Callable[[ParquetLayout], Mapping[str, Any]],
    progress: bool = False,
    arrow: bool = False,
    columns: tuple = (),
) -> tuple[ParquetIndex, dict[str, Any]]:
    """Index files ``names`` under ``root`` (a folder or a URL): (index, field map), the field
    map given by ``field_map(layout)`` for the first readable file's columns before the rows
    are checked against it. ``arrow``: local Arrow stream files (``save_to_disk``);
    ``columns``: the user's ``--column`` specs (:mod:`._parquet_columns`)."""
    if "://" in root:
        from fpipe.storage.read.remote import RemoteFiles, list_objects

        files: Any = RemoteFiles(root, storage)
        listed = dict(list_objects(root, storage))
        sizes = {n: (int(listed[n]), -1) for n in names}
    else:
        from fpipe.storage.read.reader import FileCache

        files = FileCache(8)
        sizes = {}
        for n in names:
            st = os.stat(os.path.join(root, n))
            sizes[n] = (int(st.st_size), int(st.st_mtime_ns))
    fmap: dict[str, Any] = {}
    try:
        for n in names:  # the first readable file's schema (its footer only)
            try:
                path = os.path.join(root, n)
                pf = open_table_file(files, path, sizes[n][0], arrow=arrow, scan=False)
            except Exception:  # noqa: BLE001 - unreadable: reported by the scan
                continue
            fmap = dict(field_map(schema_layout(pf.schema_arrow, arrow=arrow)))
            if arrow:
                pf.close()
            break
        return index_parquet(root, names, files, sizes, fmap, progress, arrow, columns), fmap
    finally:
        files.close()


def remote_parquet(url: str, patterns, storage) -> list[str]:
    """``.parquet`` objects under ``url`` (or those matching ``patterns``), sorted."""
    from fpipe.storage.read.remote_index import matching_objects

    names = matching_objects(url, PARQUET_SUFFIX, patterns, storage)
    if not names:
        raise ConfigError(f"{url}: no .parquet files found")
    return names
