"""Opening a dataset: which layout a path holds, and the :class:`~.dataset.Dataset` over it.

``open_dataset(path)`` picks the layout from what is there (see :mod:`fpipe.storage.read.dataset`
for the table of layouts): an object-storage URL, a ``.jsonl`` / ``.csv`` table file, a folder
prepared by ``fpipe prepare`` (``.fpipe/``: tar shards, a table, or Parquet files) or by
``energon prepare`` (``.nv-meta/``), or a Megatron corpus (``prefix.idx`` / ``.bin``). Each
opener checks the index against the shards (``shard_check``) before the first read, and builds
the layout's reader; :class:`~.dataset.Dataset` does the rest. This module dispatches a path
to its layout's opener (:mod:`.open_local`, :mod:`.open_energon`, :mod:`.open_remote`,
:func:`~.megatron_dataset.open_megatron`); :mod:`.open_args` decides which open arguments each
opener takes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fpipe.core.errors import ConfigError
from fpipe.storage.msc import resolve_location
from fpipe.storage.paths import is_url
from fpipe.storage.read.dataset import Dataset
from fpipe.storage.read.gpt_corpus import GPT_OPTIONS
from fpipe.storage.read.megatron_dataset import megatron_prefixes, open_megatron
from fpipe.storage.read.open_args import Opener, keywords_of, supplied_args, taken_args
from fpipe.storage.read.open_energon import open_energon_folder
from fpipe.storage.read.open_local import open_prepared, open_table_file
from fpipe.storage.read.open_remote import open_remote
from fpipe.storage.read.table_files import is_table, table_record
from fpipe.storage.read.tar.index import INDEX_DIR

__all__ = ["open_dataset", "open_taking"]

#: The opener of each layout (and, for messages, what it opens).
_PREPARED = Opener(open_prepared, "a folder prepared by fpipe")
_REMOTE = Opener(open_remote, "a dataset on object storage")
_ENERGON = Opener(open_energon_folder, "an Energon folder")
_TABLE = Opener(open_table_file, "a table file", keywords_of(table_record))
_MEGATRON = Opener(open_megatron, "a Megatron corpus", frozenset(GPT_OPTIONS))


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
    :func:`~.open_args.refuse_untaken` then refuses a shared argument that no dataset took."""
    return _open(path, shared or {}, own or {}, plan_only)


def _open(
    path: str | os.PathLike, shared: dict[str, Any], own: dict[str, Any], plan_only: bool
) -> tuple[Dataset, dict[str, Any]]:
    """The dataset at ``path`` opened with ``own`` and the ``shared`` its opener takes, and
    those arguments; an argument of ``own`` its opener does not take is a ConfigError."""
    opener, target = _opener(path, {**shared, **own})
    kwargs = taken_args(path, opener, shared, own)
    supplied = supplied_args(opener, plan_only=plan_only, reopen=open_dataset)
    return opener.open(target, **kwargs, **supplied), kwargs


def _opener(path: str | os.PathLike, kwargs: dict[str, Any]) -> tuple[Opener, Any]:
    """The opener of the layout at ``path`` and the path it opens; ``kwargs``: the open
    arguments, of which a URL's ``index_dir`` and ``storage`` decide."""
    path = resolve_location(path)  # dss://, and msc:// profiles of local folders
    if isinstance(path, str) and "://" in path and not is_url(path):
        raise ConfigError(
            f"{path}: fpipe does not read {path.split('://', 1)[0]}:// paths; give a local "
            "folder or file, an msc://PROFILE/path or dss://NAME@VERSION path, or an s3://, "
            "gs://, az:// or file:// URL"
        )
    if is_url(path):
        if is_table(path):  # before the corpus test: Energon's x.jsonl.idx is no Megatron index
            return _TABLE, str(path)
        if kwargs.get("index_dir") is None and megatron_prefixes(path, kwargs.get("storage")):
            return _MEGATRON, path
        return _REMOTE, str(path)
    p = Path(path)
    if p.is_file():
        if p.suffix in (".idx", ".bin") and megatron_prefixes(p):
            return _MEGATRON, p
        return _TABLE, p
    if (p / INDEX_DIR / "info.yaml").exists():
        return _PREPARED, p
    if (p / ".nv-meta").is_dir():
        return _ENERGON, p
    if megatron_prefixes(p):  # a corpus prefix (p.idx, p.bin), or a folder of them
        return _MEGATRON, p
    if not p.exists():
        tried = p.resolve()  # a relative path: say where it was looked for
        where = "" if tried == p else f" (looked for {tried})"
        raise ConfigError(f"{p}: no such dataset{where}")
    raise ConfigError(
        f"{p}: not a prepared dataset (no .fpipe/ or .nv-meta/ folder); run `fpipe prepare {p}`"
    )
