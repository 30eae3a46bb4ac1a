"""Opening a dataset: which layout a path holds, and the :class:`~.dataset.Dataset` over it.

``open_dataset(path)`` picks the layout from what is there (see :mod:`fpipe.storage.read.dataset`
for the table of layouts): an object-storage URL, a ``.jsonl`` / ``.csv`` table file, a folder
prepared by ``fpipe prepare`` (``.fpipe/``: tar shards, a table, or Parquet files) or by
``energon prepare`` (``.nv-meta/``), or a Megatron corpus (``prefix.idx`` / ``.bin``). Each
opener checks the index against the shards (``shard_check``) before the first read, and builds
the layout's reader; :class:`~.dataset.Dataset` does the rest.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fpipe.core.errors import ConfigError
from fpipe.storage.config.dataset_yaml import DatasetConfig, load_dataset_config, load_split_config
from fpipe.storage.msc import resolve_location
from fpipe.storage.paths import allowed_folders, is_url
from fpipe.storage.read._validate import (
    ShardCheck,
    array_checker,
    check_headers,
    check_record,
    check_remote_sizes,
    check_shards_unchanged,
)
from fpipe.storage.read.dataset import Dataset, Reader
from fpipe.storage.read.energon import (
    EnergonReader,
    energon_arrays,
    energon_record,
    has_shard_counts,
    read_energon_meta,
    walk_energon_meta,
)
from fpipe.storage.read.megatron_dataset import megatron_prefixes, open_megatron
from fpipe.storage.read.nv_meta import edited_nv_meta
from fpipe.storage.read.parquet import ParquetReader
from fpipe.storage.read.reader import FileCache
from fpipe.storage.read.record import ArrayStore, read_record
from fpipe.storage.read.remote import RemoteFiles, StorageOptions
from fpipe.storage.read.tables import TableReader, prepared_media, table_record
from fpipe.storage.read.tar.index import INDEX_DIR
from fpipe.storage.read.tar.reader import TarReader, tar_arrays
from fpipe.storage.read.webdataset import is_gzip_shard

__all__ = ["open_dataset"]


def _open_prepared(
    p: Path,
    max_open_files: int = 64,
    shard_check: ShardCheck = "mtime",
    row_group_cache: int | None = None,
    media_root: Any = None,
    *,
    plan_only: bool = False,
) -> Dataset:
    index_dir = p / INDEX_DIR
    allowed = allowed_folders(media_root)
    record = read_record(index_dir)
    where = str(index_dir)
    # plan_only: the plan needs the record (counts) and the configs; the shard table, the
    # shards and the arrays' headers are checked by the process that opens it to read
    # samples (a worker), so planning a blend of 10,000 datasets opens none of their arrays
    if not (plan_only and record.shard_arrays):
        check_record(p, record, where + "/info.yaml")
    if not plan_only:
        check_shards_unchanged(p, record, shard_check)
    arrays = ArrayStore(index_dir, check=array_checker(record, where))
    if record.layout == "tar" and not plan_only:  # .npy headers only: lengths agree
        check_headers(index_dir, record, tar_arrays(record))
    files = FileCache(max_open_files)
    if record.layout == "table":
        assert record.table is not None
        root, aux = prepared_media(str(p), record.table, allowed, where + "/info.yaml")
        reader: Reader = TableReader(record, root, aux, arrays, open_dataset)
    elif record.layout == "parquet":
        reader = ParquetReader(str(p), record, arrays, files, row_group_cache)
    else:
        reader = TarReader(str(p), index_dir, record, arrays, files, shard_check)
    # An index prepared through fpipe.energon has Energon's .nv-meta files too: edits to its
    # dataset.yaml / split.yaml are read here, in place of the index's copies.
    edited = edited_nv_meta(p, index_dir)
    config_file, split_file = (
        (p / ".nv-meta" if name in edited else index_dir) / name
        for name in ("dataset.yaml", "split.yaml")
    )
    config = load_dataset_config(config_file)
    split = load_split_config(split_file)
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
        reopen=open_dataset,
    )


def _open_remote(
    url: str,
    *,
    index_dir: str | os.PathLike | None = None,
    storage: StorageOptions | dict | None = None,
    shard_check: ShardCheck = "size",
    row_group_cache: int | None = None,
) -> Dataset:
    from fpipe.storage.read.remote import list_objects
    from fpipe.storage.read.remote_index import local_index

    options = storage if isinstance(storage, StorageOptions) else StorageOptions(**(storage or {}))
    try:
        local = local_index(url, index_dir, options)
    except ConfigError:
        if index_dir is None:  # no .fpipe/ there: Energon's .nv-meta/ is read, if present
            from fpipe.storage.read.remote_energon import energon_index

            nv_meta = energon_index(url, options)
            if nv_meta is not None:
                return _open_remote_energon(url, nv_meta, options)
        raise
    record = read_record(local)
    check_record(url, record, str(local / "info.yaml"))  # shard names stay under the URL
    if shard_check != "off":  # one LIST: object sizes against the index
        try:
            sizes = dict(list_objects(url, options))
        except OSError as e:
            raise ConfigError(
                f"{url}: cannot list the shards to compare their sizes with the index ({e}); "
                "open it with shard_check='off' to rely on the per-read check alone"
            ) from None
        check_remote_sizes(url, record, sizes)
    if record.layout not in ("tar", "parquet"):
        raise ConfigError(
            f"{url}: only datasets of tar shards or Parquet files prepared by `fpipe prepare` "
            f"are read from object storage (this index is a {record.layout!r} layout)"
        )
    gz = [s.name for s in record.shards if is_gzip_shard(s.name)]
    if gz:
        raise ConfigError(
            f"{url}: shard {gz[0]!r} is gzip-compressed; random access into it needs a "
            "decompressed copy, which fpipe does not make in a bucket. Re-shard without "
            "compression, or copy the dataset to a local disk"
        )
    arrays = ArrayStore(local)
    files = RemoteFiles(url, options)
    reader: Reader
    if record.layout == "parquet":
        reader = ParquetReader(url, record, arrays, files, row_group_cache)
    else:
        reader = TarReader(url, local, record, arrays, files)
    return Dataset(
        url,
        record,
        load_dataset_config(local / "dataset.yaml"),
        load_split_config(local / "split.yaml"),
        arrays,
        reader,
        files,
        where=str(local / "split.yaml"),
        open_args={
            "index_dir": None if index_dir is None else str(index_dir),
            "storage": options,
            "shard_check": shard_check,
            **({"row_group_cache": row_group_cache} if row_group_cache is not None else {}),
        },
        reopen=open_dataset,
    )


def _open_remote_energon(url: str, local: Path, options: StorageOptions) -> Dataset:
    """An Energon dataset in a bucket: its index copied to ``local``
    (:func:`~fpipe.storage.read.remote_energon.energon_index`), its shards read by range."""
    meta = read_energon_meta(local)
    record = energon_record(meta)
    check_record(url, record, f"{url}/.nv-meta")
    arrays = ArrayStore(make=energon_arrays(str(local), record))
    files = RemoteFiles(url, options)
    reader = EnergonReader(url, record, arrays, files)
    return Dataset(
        url,
        record,
        meta.config,
        meta.split,
        arrays,
        reader,
        files,
        where=f"{url}/.nv-meta/split.yaml",
        open_args={"storage": options},
        reopen=open_dataset,
    )


def _open_energon(p: Path, max_open_files: int = 64, shard_check: ShardCheck = "mtime") -> Dataset:
    offsets = None
    if has_shard_counts(p):
        meta = read_energon_meta(p)
    else:  # dataset.yaml and split.yaml only: the shards' headers are read now
        meta, offsets = walk_energon_meta(p)
    record = energon_record(meta)
    check_record(p, record, str(p / ".nv-meta"))
    check_shards_unchanged(p, record, shard_check if offsets is None else "off")
    arrays = ArrayStore(make=energon_arrays(str(p), record, offsets))
    files = FileCache(max_open_files)
    reader = EnergonReader(str(p), record, arrays, files)
    return Dataset(
        str(p),
        record,
        meta.config,
        meta.split,
        arrays,
        reader,
        files,
        where=str(p / ".nv-meta" / "split.yaml"),
        open_args={"max_open_files": max_open_files, "shard_check": shard_check},
        reopen=open_dataset,
    )


def _open_table(
    p: Path,
    *,
    sample_type: str | None = None,
    field_map: dict[str, str] | None = None,
    **table_args: Any,
) -> Dataset:
    record, mem = table_record(p, **table_args)
    arrays = ArrayStore(make=mem.__getitem__)
    t = record.table
    assert t is not None
    reader = TableReader(record, t.root, t.aux, arrays, open_dataset)
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
        reopen=open_dataset,
    )


def open_dataset(path: str | os.PathLike, *, plan_only: bool = False, **kwargs: Any) -> Dataset:
    """Open a prepared dataset folder (fpipe or Energon), a ``.jsonl`` / ``.csv`` table, or a
    Megatron corpus (``prefix.idx`` / ``prefix.bin``).

    Args:
      path: folder with ``.fpipe/`` (from ``fpipe prepare``) or ``.nv-meta/`` (Energon), a
        table file, the URL of a prepared dataset on object storage, or a Megatron corpus: a
        prefix (local or a URL), one of its files, or a folder of prefixes (see
        :func:`~fpipe.storage.read.megatron_dataset.open_megatron`, whose ``sample_unit``
        it takes).
        An ``msc://PROFILE/path`` (a multi-storage-client profile) or ``dss://NAME@VERSION``
        path is resolved as Energon resolves it (see :mod:`fpipe.storage.msc`); a dataset on
        object storage may be prepared by ``fpipe prepare`` (``.fpipe/``) or by ``energon
        prepare`` (``.nv-meta/`` and ``.tar.idx`` files).
      **kwargs: for an object-storage URL (``s3://bucket/prefix``, ``gs://``, ``az://``):
        ``index_dir`` (a local folder holding the index; default: the bucket's ``.fpipe/``,
        cached locally) and ``storage`` (:class:`~fpipe.storage.read.remote.StorageOptions` or a
        dict of its fields); for a table file: ``root`` (media folder), ``media_columns``, ``aux``
        (prepared tar dataset holding media), ``sample_type``, ``field_map``; for folders:
        ``max_open_files`` (shard files kept open per process, default 64); for a prepared
        table: ``media_root`` (a folder, or a list of them, that may hold the media folder and
        auxiliary dataset its ``info.yaml`` records when they lie outside the table's folder;
        without it such a table is refused, see :func:`~.tables.prepared_media`); for prepared
        and Energon folders and URLs: ``shard_check`` (``"mtime"`` default, ``"size"`` or
        ``"off"``: how opening checks that the shards are the ones indexed, see
        :data:`fpipe.storage.read._validate.ShardCheck`; a URL compares object sizes from one
        listing unless ``"off"``). Every read also checks the sample's bytes against the
        index, whatever ``shard_check``; for Parquet datasets: ``row_group_cache`` (decoded
        row groups kept per process, see :mod:`fpipe.storage.read.parquet`).
      plan_only: open a folder prepared by ``fpipe prepare`` for planning only: its record
        and config files are read, and the checks of its shard table, shards and index
        arrays are left to the open of a process that reads its samples (other layouts
        ignore it). What the plan of a blend opens each of its datasets with.

    Returns:
      A :class:`Dataset`.

    Example:
      >>> ds = open_dataset("data/coco")              # doctest: +SKIP
      >>> ds.read(0)["jpg"][:3]                       # doctest: +SKIP
      b'\\xff\\xd8\\xff'
    """
    path = resolve_location(path)  # dss://, and msc:// profiles of local folders
    if isinstance(path, str) and "://" in path and not is_url(path):
        raise ConfigError(
            f"{path}: fpipe does not read {path.split('://', 1)[0]}:// paths; give a local "
            "folder or file, an msc://PROFILE/path or dss://NAME@VERSION path, or an s3://, "
            "gs://, az:// or file:// URL"
        )
    if is_url(path):
        if kwargs.get("index_dir") is None and megatron_prefixes(path, kwargs.get("storage")):
            return open_megatron(path, **kwargs)
        return _open_remote(str(path), **kwargs)
    p = Path(path)
    if p.is_file():
        if p.suffix in (".idx", ".bin") and megatron_prefixes(p):
            return open_megatron(p, **kwargs)
        return _open_table(p, **kwargs)
    if (p / INDEX_DIR / "info.yaml").exists():
        return _open_prepared(p, **kwargs, plan_only=plan_only)
    if (p / ".nv-meta").is_dir():
        return _open_energon(p, **kwargs)
    if megatron_prefixes(p):  # a corpus prefix (p.idx, p.bin), or a folder of them
        return open_megatron(p, **kwargs)
    if not p.exists():
        tried = p.resolve()  # a relative path: say where it was looked for
        where = "" if tried == p else f" (looked for {tried})"
        raise ConfigError(f"{p}: no such dataset{where}")
    raise ConfigError(
        f"{p}: not a prepared dataset (no .fpipe/ or .nv-meta/ folder); run `fpipe prepare {p}`"
    )
