"""Opening a dataset: which layout a path holds, and the :class:`~.dataset.Dataset` over it.

``open_dataset(path)`` picks the layout from what is there (see :mod:`fpipe.storage.read.dataset`
for the table of layouts): an object-storage URL, a ``.jsonl`` / ``.csv`` table file, a folder
prepared by ``fpipe prepare`` (``.fpipe/``: tar shards, a table, or Parquet files) or by
``energon prepare`` (``.nv-meta/``), or a Megatron corpus (``prefix.idx`` / ``.bin``). Each
opener checks the index against the shards (``shard_check``) before the first read, and builds
the layout's reader; :class:`~.dataset.Dataset` does the rest.
"""

from __future__ import annotations

import functools
import inspect
import os
from pathlib import Path
from typing import Any

import numpy as np

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
    EnergonMeta,
    EnergonReader,
    energon_arrays,
    energon_record,
    has_shard_counts,
    read_energon_meta,
    walk_energon_meta,
)
from fpipe.storage.read.gpt_corpus import GPT_OPTIONS
from fpipe.storage.read.megatron_dataset import megatron_prefixes, open_megatron
from fpipe.storage.read.nv_meta import edited_nv_meta
from fpipe.storage.read.parquet import ParquetReader
from fpipe.storage.read.reader import FileCache
from fpipe.storage.read.record import ArrayStore, IndexRecord, read_record
from fpipe.storage.read.remote import RemoteFiles, StorageOptions
from fpipe.storage.read.tables import TableReader, prepared_media, table_record
from fpipe.storage.read.tar.index import INDEX_DIR
from fpipe.storage.read.tar.reader import TarReader, tar_arrays
from fpipe.storage.read.webdataset import is_gzip_shard

__all__ = ["open_dataset", "open_taking", "refuse_untaken"]


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
    files = RemoteFiles(url, options)
    return _energon_dataset(url, str(local), meta, record, files, {"storage": options})


def _open_energon(p: Path, max_open_files: int = 64, shard_check: ShardCheck = "mtime") -> Dataset:
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
    return _energon_dataset(str(p), str(p), meta, record, files, args, offsets)


def _energon_dataset(
    root: str,
    index: str,
    meta: EnergonMeta,
    record: IndexRecord,
    files: FileCache | RemoteFiles,
    open_args: dict[str, Any],
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
        row groups kept per process, see :mod:`fpipe.storage.read.parquet`). An argument the
        dataset's layout does not take is a ConfigError naming it (a metadataset's datasets
        are opened by :func:`open_taking`, each with those it takes).
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
    return _open(path, {}, kwargs, plan_only)[0]


def open_taking(
    path: str | os.PathLike,
    shared: dict[str, Any] | None,
    own: dict[str, Any] | None = None,
    *,
    plan_only: bool = False,
) -> tuple[Dataset, dict[str, Any]]:
    """:func:`open_dataset` for one dataset of several (a metadataset's): opened with those of
    the ``shared`` open arguments its layout takes (``media_root`` means something to a
    prepared table only, ``index_dir`` to a URL only) and all of its ``own`` (a metadataset
    entry's). Also returns the arguments it was opened with, which its workers open it with.
    :func:`refuse_untaken` then refuses a shared argument that no dataset took."""
    return _open(path, shared or {}, own or {}, plan_only)


def refuse_untaken(where: str, shared: dict[str, Any] | None, taken: list[dict[str, Any]]) -> None:
    """Raise ConfigError naming the ``shared`` open arguments that none of the datasets opened
    from ``where`` (a metadataset) took (``taken``: each one's, from :func:`open_taking`): a
    misspelt or misplaced argument is refused, not dropped without a word."""
    unused = sorted(set(shared or {}).difference(*taken))
    if unused:
        raise ConfigError(
            f"{where}: open argument(s) {unused} apply to none of its {len(taken)} dataset(s) "
            f"(their layouts take {sorted(set().union(*taken)) or 'none of those given'}); "
            "remove them or check their spelling"
        )


def _open(
    path: str | os.PathLike, shared: dict[str, Any], own: dict[str, Any], plan_only: bool
) -> tuple[Dataset, dict[str, Any]]:
    """The dataset at ``path`` opened with ``own`` and the ``shared`` its opener takes, and
    those arguments; an argument of ``own`` its opener does not take is a ConfigError."""
    opener, target = _opener(path, {**shared, **own})
    takes = _keywords(opener)
    unknown = sorted(set(own) - takes)
    if unknown:
        raise ConfigError(
            f"{path}: open argument(s) {unknown} do not apply to this dataset "
            f"({_KINDS[opener]}; it takes {sorted(takes)})"
        )
    kwargs = {**{k: v for k, v in shared.items() if k in takes}, **own}
    if opener is _open_prepared:
        return _open_prepared(target, **kwargs, plan_only=plan_only), kwargs
    return opener(target, **kwargs), kwargs


def _opener(path: str | os.PathLike, kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """The opener of the layout at ``path`` (one of :data:`_KINDS`) and the path it opens;
    ``kwargs``: the open arguments, of which a URL's ``index_dir`` and ``storage`` decide."""
    path = resolve_location(path)  # dss://, and msc:// profiles of local folders
    if isinstance(path, str) and "://" in path and not is_url(path):
        raise ConfigError(
            f"{path}: fpipe does not read {path.split('://', 1)[0]}:// paths; give a local "
            "folder or file, an msc://PROFILE/path or dss://NAME@VERSION path, or an s3://, "
            "gs://, az:// or file:// URL"
        )
    if is_url(path):
        if kwargs.get("index_dir") is None and megatron_prefixes(path, kwargs.get("storage")):
            return open_megatron, path
        return _open_remote, str(path)
    p = Path(path)
    if p.is_file():
        if p.suffix in (".idx", ".bin") and megatron_prefixes(p):
            return open_megatron, p
        return _open_table, p
    if (p / INDEX_DIR / "info.yaml").exists():
        return _open_prepared, p
    if (p / ".nv-meta").is_dir():
        return _open_energon, p
    if megatron_prefixes(p):  # a corpus prefix (p.idx, p.bin), or a folder of them
        return open_megatron, p
    if not p.exists():
        tried = p.resolve()  # a relative path: say where it was looked for
        where = "" if tried == p else f" (looked for {tried})"
        raise ConfigError(f"{p}: no such dataset{where}")
    raise ConfigError(
        f"{p}: not a prepared dataset (no .fpipe/ or .nv-meta/ folder); run `fpipe prepare {p}`"
    )


def _parameters(fn: Any) -> set[str]:
    """The names ``fn`` takes by keyword after its first (the path), ``**`` ones left out."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    params = list(inspect.signature(fn).parameters.values())[1:]
    return {p.name for p in params if p.kind in kinds}


#: What each layout's opener is, for messages.
_KINDS = {
    _open_prepared: "a folder prepared by fpipe",
    _open_remote: "a dataset on object storage",
    _open_energon: "an Energon folder",
    _open_table: "a table file",
    open_megatron: "a Megatron corpus",
}


@functools.cache
def _keywords(opener: Any) -> frozenset[str]:
    """The open arguments ``opener`` takes: its keyword parameters, and those it passes on
    through ``**`` (a table file's to :func:`~.tables.table_record`, a corpus's GPT options)."""
    passed_on = {_open_table: _parameters(table_record), open_megatron: set(GPT_OPTIONS)}
    return frozenset((_parameters(opener) | passed_on.get(opener, set())) - {"plan_only"})
