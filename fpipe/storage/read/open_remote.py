"""The opener of a dataset on object storage (``s3://``, ``gs://``, ``az://``, ``file://``):
prepared by ``fpipe prepare`` (tar shards or Parquet files, its ``.fpipe/`` index copied to a
local folder), or by ``energon prepare`` (its ``.nv-meta/``, see :mod:`.open_energon`).

Its shards are read by range requests; opening compares the objects' sizes with the index (one
listing) unless ``shard_check="off"``. ``reopen`` (the dispatching
:func:`~fpipe.storage.read.layouts.open_dataset`, given by it) is what the dataset is opened
again with in a worker.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from fpipe.core.errors import ConfigError
from fpipe.storage.config.dataset_yaml import load_dataset_config, load_split_config
from fpipe.storage.read._validate import ShardCheck, check_record, check_remote_sizes
from fpipe.storage.read.dataset import Dataset, Reader
from fpipe.storage.read.open_energon import open_energon_remote
from fpipe.storage.read.parquet import ParquetReader
from fpipe.storage.read.record import ArrayStore, read_record
from fpipe.storage.read.remote import RemoteFiles, StorageOptions, list_objects
from fpipe.storage.read.remote_energon import energon_index
from fpipe.storage.read.remote_index import local_index
from fpipe.storage.read.tar.reader import TarReader
from fpipe.storage.read.webdataset import is_gzip_shard

__all__ = ["open_remote"]


def open_remote(
    url: str,
    *,
    index_dir: str | os.PathLike | None = None,
    storage: StorageOptions | dict | None = None,
    shard_check: ShardCheck = "size",
    row_group_cache: int | None = None,
    reopen: Callable[..., Dataset],
) -> Dataset:
    """The dataset at ``url``, its index read from ``index_dir`` (default: the bucket's
    ``.fpipe/``, cached locally, or else its ``.nv-meta/``); ``storage``:
    :class:`~fpipe.storage.read.remote.StorageOptions` or a dict of its fields."""
    options = storage if isinstance(storage, StorageOptions) else StorageOptions(**(storage or {}))
    try:
        local = local_index(url, index_dir, options)
    except ConfigError:
        if index_dir is None:  # no .fpipe/ there: Energon's .nv-meta/ is read, if present
            nv_meta = energon_index(url, options)
            if nv_meta is not None:
                return open_energon_remote(url, nv_meta, options, reopen=reopen)
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
        reopen=reopen,
    )
