"""The work behind ``fpipe prepare``: index shards (or a table), write the YAML files.

``prepare_dataset(DIR)`` checks its options (:class:`PrepareOptions`), then runs one mode, each
a small function of its own module:

- :func:`._table._prepare_table`: a ``.jsonl`` / ``.csv`` table (:mod:`._table`);
- :func:`._prepare_parquet._prepare_parquet`: Parquet files (a folder, a glob or a prefix on
  object storage), or the Arrow files of a Hugging Face ``datasets`` folder (``save_to_disk``,
  a cache folder: :mod:`._hf_arrow`), indexed in place (:mod:`._parquet_dataset`);
- :func:`._prepare_shards._prepare_part`: one slice of the shards of a cluster run
  (``part=(i, n)``);
- :func:`._prepare_shards._prepare_full`: every shard of a WebDataset or Energon folder, or the
  merged parts (``merge=True``), written to ``DIR/.fpipe/`` with ``dataset.yaml`` and
  ``split.yaml``; :func:`._prepare_shards._prepare_remote`: the shards under a URL.

Where the shards, dataset.yaml and split.yaml come from is :func:`._source._find_source` (an
Energon folder's ``.nv-meta`` or a previous fpipe index). Bad input never stops indexing: each
left-out sample is reported with its file, key and reason, and counted in ``info.yaml``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from fpipe.core.errors import ConfigError, EmptyIndexError
from fpipe.storage.paths import is_url
from fpipe.storage.prepare._options import (
    PrepareOptions,
    PrepareReport,
    Problem,
    make_options,
)
from fpipe.storage.prepare._prepare_parquet import _arrow_files, _parquet_files, _prepare_parquet
from fpipe.storage.prepare._prepare_shards import _prepare_full, _prepare_part, _prepare_remote
from fpipe.storage.prepare._source import _find_source
from fpipe.storage.prepare._table import _prepare_table
from fpipe.storage.prepare.shards import PARTS_DIR
from fpipe.storage.read.tables import is_table

__all__ = ["PARTS_DIR", "PrepareOptions", "PrepareReport", "Problem", "prepare_dataset"]


def prepare_dataset(path: str | os.PathLike, **options: Any) -> PrepareReport:
    """Index a WebDataset folder, an Energon-prepared folder, a JSONL/CSV table, or Parquet
    files (indexed in place, see ``docs/parquet.md``).

    Args:
      path: dataset folder, a ``.jsonl`` / ``.csv`` table, the URL of a folder of shards on
        object storage (``s3://bucket/prefix``; see :mod:`fpipe.storage.read.remote`), or
        Parquet files: a folder or prefix holding them, a glob (``data/train-*.parquet``) or
        one ``.parquet`` file; the index goes to the folder above the files
        (``<folder>/.fpipe``).
      **options: keyword arguments, checked by :func:`.prepare_options.make_options` into a
        :class:`PrepareOptions` before any file is read (an unknown name is a TypeError):
      fields: field map, ``{"image": "jpg", "caption": "json[caption]"}`` or
        ``["image=jpg", ...]``. Every field is required: samples without it are left out.
        Default: the existing dataset.yaml (fpipe's or Energon's), else none (crude).
      split: ``"8,1,1"`` (train/val/test by shard ratios), ``{"train": ["a-*.tar"], ...}``
        (shard globs), or a :class:`SplitConfig`. Default: existing split.yaml, else none.
      sample_type: e.g. ``"CaptioningSample"``; guessed from common field names otherwise.
        The user's own type: the class, or ``"package.module:Class"`` (the module is
        imported, as the caller asked); it is registered, the field map checked against it,
        and dataset.yaml names it ``package.module.Class`` (the training code registers it
        with :func:`fpipe.samples.register_sample_type`: no class named in a data file is
        imported).
      workers: processes scanning shards in parallel.
      part: ``(i, n)`` or ``"i/n"``: index only the i-th (0-based) of n shard slices.
      merge: combine the n parts written by ``part`` runs into the final index.
      columns: user columns, ``"NAME=json[path]"`` or ``"NAME=len(json[path])"``; for
        Parquet and Arrow files and for tables a source names a column
        (``"ntok=len(input_ids)"``, see :mod:`._parquet_columns`, :mod:`._table_columns`).
      extra_columns_fn: ``"module:function"`` (or a top-level function) called with the
        sample's members ``{ext: bytes}`` (a table's row as ``ds.read(i)`` gives it) and
        returning ``{column: number}``; refused for Parquet and Arrow files.
      progress: draw a progress bar on stderr.
      shards: shard patterns relative to ``path`` (brace expansion and globs); default all.
      exclude: split.yaml exclude entries to add.
      split_seed: shuffle shards with this seed before splitting by ratio.
      subflavors: written to dataset.yaml.
      root, media_columns, aux: for tables (see :mod:`fpipe.storage.read.tables`).
      index_dir: for a dataset at a URL, a local folder to write the index to (default:
        ``URL/.fpipe/`` in the bucket).
      storage: for a URL, :class:`~fpipe.storage.read.remote.StorageOptions` (or a dict of them).
      probe_av: probe audio/video members (or table media files) and store their stream
        metadata columns and keyframe times (:mod:`fpipe.storage.read.av_meta`); a file that
        cannot be probed is left out and reported.
      compact_index: write a tar dataset's index in the compact layout (format 4, about 14
        bytes per image + caption sample against ~117, for datasets whose flat index is too
        large to keep; each sample's lookup costs more); False (the default): the flat layout
        (formats 2 and 3), which fpipe versions before the compact layout also read.

    Returns:
      A :class:`PrepareReport`.
    """
    report = _prepare(path, make_options(**options), time.perf_counter())
    if report.num_samples == 0 and report.part is None:
        raise EmptyIndexError(_nothing_indexed(report), report)
    return report


def _prepare(path: str | os.PathLike, opts: PrepareOptions, t0: float) -> PrepareReport:
    arrow = _arrow_files(os.fspath(path), opts)
    if arrow is not None:
        return _prepare_parquet(arrow[0], arrow[1], opts, t0, arrow[2])
    parquet = _parquet_files(os.fspath(path), opts)
    if parquet is not None:
        return _prepare_parquet(*parquet, opts, t0)
    if is_url(path):
        return _prepare_remote(str(path), opts, t0)
    p = Path(path)
    if p.is_file() and is_table(p):
        return _prepare_table(p, opts, t0)
    if not p.is_dir():
        raise ConfigError(f"{p}: no such folder or table")
    src = _find_source(p, opts)
    if not src.shards and not opts.merge:
        raise ConfigError(f"{p}: no .tar/.tar.gz/.tgz shards found")
    if opts.part is not None:
        return _prepare_part(p, src, opts, t0)
    return _prepare_full(p, src, opts, t0)


def _nothing_indexed(report: PrepareReport) -> str:
    """Why an index without a sample is refused: what was left out, and the first reasons.
    (A part of a split prepare may be empty; the merged index may not.)"""
    text = f"{report.path}: indexed 0 samples, so the dataset cannot be loaded"
    if not report.problems:
        return text + " (its shards hold no sample)"
    first = "; ".join(f"{p.path}: {p.key or '(shard)'}: {p.reason}" for p in report.problems[:3])
    return (
        f"{text}: every sample was left out. {report.left_out_summary()}. First reasons: "
        f"{first}. Fix what they name (a field such as json[caption] must name a key the "
        "samples have) and prepare again"
    )
