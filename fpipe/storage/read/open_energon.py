"""The openers of datasets prepared by ``energon prepare`` (``.nv-meta/`` and ``.tar.idx``
files): a local folder, and one in a bucket whose index was copied to a local folder.

``reopen`` (the dispatching :func:`~fpipe.storage.read.layouts.open_dataset`, given by it) is
what the dataset is opened again with in a worker.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fpipe.storage.read._validate import ShardCheck, check_record, check_shards_unchanged
from fpipe.storage.read.dataset import Dataset
from fpipe.storage.read.energon import (
    EnergonMeta,
    EnergonReader,
    energon_arrays,
    energon_record,
    has_shard_counts,
    read_energon_meta,
    walk_energon_meta,
)
from fpipe.storage.read.reader import FileCache
from fpipe.storage.read.record import ArrayStore, IndexRecord
from fpipe.storage.read.remote import RemoteFiles, StorageOptions

__all__ = ["open_energon_folder", "open_energon_remote"]


def open_energon_folder(
    p: Path,
    max_open_files: int = 64,
    shard_check: ShardCheck = "mtime",
    *,
    reopen: Callable[..., Dataset],
) -> Dataset:
    """The dataset of the Energon folder ``p``; without the shards' sample counts in its
    ``.nv-meta/`` (dataset.yaml and split.yaml only), they are read from the shards now."""
    offsets = None
    if has_shard_counts(p):
        meta = read_energon_meta(p)
    else:  # dataset.yaml and split.yaml only: the shards' headers are read now
        meta, offsets = walk_energon_meta(p)
    record = energon_record(meta)
    check_record(p, record, str(p / ".nv-meta"))
    check_shards_unchanged(p, record, shard_check if offsets is None else "off")
    files = FileCache(max_open_files)
    args = {"max_open_files": max_open_files, "shard_check": shard_check}
    return _energon_dataset(str(p), str(p), meta, record, files, args, reopen, offsets)


def open_energon_remote(
    url: str, local: Path, options: StorageOptions, *, reopen: Callable[..., Dataset]
) -> Dataset:
    """An Energon dataset in a bucket: its index copied to ``local``
    (:func:`~fpipe.storage.read.remote_energon.energon_index`), its shards read by range."""
    meta = read_energon_meta(local)
    record = energon_record(meta)
    check_record(url, record, f"{url}/.nv-meta")
    files = RemoteFiles(url, options)
    return _energon_dataset(url, str(local), meta, record, files, {"storage": options}, reopen)


def _energon_dataset(
    root: str,
    index: str,
    meta: EnergonMeta,
    record: IndexRecord,
    files: FileCache | RemoteFiles,
    open_args: dict[str, Any],
    reopen: Callable[..., Dataset],
    offsets: dict[str, np.ndarray] | None = None,
) -> Dataset:
    """The dataset of an Energon index (``meta`` and its ``record``, checked) whose
    ``.tar.idx`` files lie under ``index`` (the dataset's folder, or the local copy of a
    bucket's) and whose shards are read under ``root`` through ``files``; ``offsets``: the
    shards' sample offsets when they were read from the shards' headers."""
    arrays = ArrayStore(make=energon_arrays(index, record, offsets))
    reader = EnergonReader(root, record, arrays, files)
    return Dataset(
        root,
        record,
        meta.config,
        meta.split,
        arrays,
        reader,
        files,
        where=f"{root}/.nv-meta/split.yaml",
        open_args=open_args,
        reopen=reopen,
    )
