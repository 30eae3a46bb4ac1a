"""The openers of local datasets fpipe indexes: a folder prepared by ``fpipe prepare`` (tar
shards, a table, or Parquet files under ``.fpipe/``) and a ``.jsonl`` / ``.csv`` table file
opened as is.

Each checks what it opens before the first read and builds the layout's reader; ``reopen`` (the
dispatching :func:`~fpipe.storage.read.layouts.open_dataset`, given by it) is what the dataset
is opened again with in a worker, and what a table opens its auxiliary dataset with.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fpipe.storage.config.dataset_yaml import DatasetConfig, load_dataset_config, load_split_config
from fpipe.storage.paths import allowed_folders
from fpipe.storage.read._validate import (
    ShardCheck,
    array_checker,
    check_headers,
    check_record,
    check_shards_unchanged,
)
from fpipe.storage.read.dataset import Dataset, Reader
from fpipe.storage.read.nv_meta import edited_nv_meta
from fpipe.storage.read.parquet import ParquetReader
from fpipe.storage.read.parsed_files import checked_once, parsed
from fpipe.storage.read.reader import FileCache
from fpipe.storage.read.record import ArrayStore, read_record
from fpipe.storage.read.table_files import table_record
from fpipe.storage.read.tables import TableReader, prepared_media
from fpipe.storage.read.tar.index import INDEX_DIR
from fpipe.storage.read.tar.reader import TarReader, tar_arrays

__all__ = ["open_prepared", "open_table_file"]


def open_prepared(
    p: Path,
    max_open_files: int = 64,
    shard_check: ShardCheck = "mtime",
    row_group_cache: int | None = None,
    media_root: Any = None,
    *,
    plan_only: bool = False,
    reopen: Callable[..., Dataset],
) -> Dataset:
    """The dataset of the folder ``p`` prepared by ``fpipe prepare`` (its ``.fpipe/`` index),
    its shards checked by ``shard_check`` unless ``plan_only``."""
    index_dir = p / INDEX_DIR
    allowed = allowed_folders(media_root)
    # parsed and checked once per process while the files are unchanged (see parsed_files):
    # a thread worker, a forked one and a reopened dataset take what planning parsed
    record = parsed(index_dir / "info.yaml", _record_of_info, _inline_shards)
    where = str(index_dir)
    # plan_only: the plan needs the record (counts) and the configs; the shard table, the
    # shards and the arrays' headers are checked by the process that opens it to read
    # samples (a worker), so planning a blend of 10,000 datasets opens none of their arrays.
    # A tar dataset's inline shard list has its counts checked here and each shard path
    # where the shard is first read (TarReader's check_on_read), as a shard table's are.
    if plan_only and record.layout == "tar" and not record.shard_arrays:
        check_record(p, record, where + "/info.yaml", paths=False)
    elif not (plan_only and record.shard_arrays):
        check = lambda: check_record(p, record, where + "/info.yaml")  # noqa: E731
        if _inline_shards(record):  # a record kept parsed: checked once per process
            checked_once(record, str(p), check)
        else:
            check()
    if not plan_only:
        check_shards_unchanged(p, record, shard_check)
    arrays = ArrayStore(index_dir, check=array_checker(record, where))
    if record.layout == "tar" and not plan_only:  # .npy headers only: lengths agree
        arrays.take_mapped(check_headers(index_dir, record, tar_arrays(record)))
    files = FileCache(max_open_files)
    if record.layout == "table":
        assert record.table is not None
        root, aux = prepared_media(str(p), record.table, allowed, where + "/info.yaml")
        reader: Reader = TableReader(record, root, aux, arrays, reopen)
    elif record.layout == "parquet":
        reader = ParquetReader(str(p), record, arrays, files, row_group_cache)
    else:
        reader = TarReader(str(p), index_dir, record, arrays, files, shard_check, plan_only)
    # An index prepared through fpipe.energon has Energon's .nv-meta files too: edits to its
    # dataset.yaml / split.yaml are read here, in place of the index's copies.
    edited = edited_nv_meta(p, index_dir)
    config_file, split_file = (
        (p / ".nv-meta" if name in edited else index_dir) / name
        for name in ("dataset.yaml", "split.yaml")
    )
    config = parsed(config_file, load_dataset_config)
    split = parsed(split_file, load_split_config)
    return Dataset(
        str(p),
        record,
        config,
        split,
        arrays,
        reader,
        files,
        where=str(split_file),
        open_args={
            "max_open_files": max_open_files,
            "shard_check": shard_check,
            **({"row_group_cache": row_group_cache} if row_group_cache is not None else {}),
            **({"media_root": allowed} if allowed else {}),
        },
        reopen=reopen,
    )


def _record_of_info(info_yaml: Path, data: bytes | None = None):
    return read_record(info_yaml.parent, data)


def _inline_shards(record) -> bool:
    """Whether ``info.yaml`` holds the whole record: not a shard table read from the arrays
    beside it (index format 3, whose ``info.yaml`` is short to parse anyway)."""
    return not record.shard_arrays


def open_table_file(
    p: Path,
    *,
    sample_type: str | None = None,
    field_map: dict[str, str] | None = None,
    reopen: Callable[..., Dataset],
    **table_args: Any,
) -> Dataset:
    """The dataset of the table file ``p`` opened as is (every row kept); ``table_args``:
    :func:`~fpipe.storage.read.table_files.table_record`'s."""
    record, mem = table_record(p, **table_args)
    arrays = ArrayStore(make=mem.__getitem__)
    t = record.table
    assert t is not None
    reader = TableReader(record, t.root, t.aux, arrays, reopen)
    config = DatasetConfig(field_map=dict(field_map or {}))
    if sample_type:
        config = DatasetConfig(sample_type=sample_type, field_map=config.field_map)
    args = {"sample_type": sample_type, "field_map": field_map, **table_args}
    return Dataset(
        str(p),
        record,
        config,
        None,
        arrays,
        reader,
        FileCache(1),
        where=str(p),
        open_args=args,
        reopen=reopen,
    )
