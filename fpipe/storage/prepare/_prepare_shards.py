"""``fpipe prepare`` of tar shards: a folder's slice (``part=``), every shard or the merged
parts, or the shards under an object-storage URL.

:func:`_prepare_part` writes one slice of a cluster run under ``DIR/.fpipe-parts``;
:func:`_prepare_full` scans every shard of a WebDataset or Energon folder (or merges the
parts, ``merge=True``) into ``DIR/.fpipe/`` with ``dataset.yaml`` and ``split.yaml``;
:func:`_prepare_remote` does the same for a URL, streaming each shard once, and writes the
index to ``index_dir`` or uploads it to ``URL/.fpipe/``. The scan of a local folder resumes
from its journal (:mod:`.journal`).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from fpipe.core.errors import ConfigError
from fpipe.storage.config.dataset_yaml import DatasetConfig, SplitConfig, dump_yaml
from fpipe.storage.config.splits import build_split_config
from fpipe.storage.config.yaml_record import write_yaml_record
from fpipe.storage.prepare._checks import check_fields_present
from fpipe.storage.prepare._options import PrepareOptions, PrepareReport, Problem
from fpipe.storage.prepare._source import _aliases, _dataset_config, _Source
from fpipe.storage.prepare.journal import JOURNAL_DIR, Journal
from fpipe.storage.prepare.scan import ScanOptions
from fpipe.storage.prepare.shards import (
    PARTS_DIR,
    merge_parts,
    part_slice,
    scan_shards,
    write_index_with_av,
    write_part,
)
from fpipe.storage.read.remote import StorageOptions
from fpipe.storage.read.remote_index import remote_shards, upload_index
from fpipe.storage.read.tar.index import INDEX_DIR, IndexData


def _report(
    root: Path,
    out: Path,
    data: IndexData,
    source: str,
    splits: SplitConfig | None,
    t0: float,
    part: tuple[int, int] | None = None,
    config: DatasetConfig | None = None,
) -> PrepareReport:
    return PrepareReport(
        path=str(root),
        index_dir=str(out),
        kind="webdataset",
        source=source,
        num_samples=int(len(data.shard_id)),
        num_shards=len(data.shards),
        problems=tuple(Problem(*p) for p in data.problems),
        columns=tuple(data.columns),
        members=tuple(data.members.exts),
        splits={k: len(v) for k, v in (splits.split_parts if splits else {}).items()},
        elapsed_s=time.perf_counter() - t0,
        part=part,
        sample_type=config.sample_type if config else "",
        field_map=dict(config.field_map) if config else {},
    )


def _scan_options(opts: PrepareOptions, fmap: dict[str, str | list[str]]) -> ScanOptions:
    return ScanOptions(
        field_map=fmap,
        columns=opts.columns,
        extra_columns_fn=opts.extra_columns_fn,
        probe_av=opts.probe_av,
    )


def _prepare_part(p: Path, src: _Source, opts: PrepareOptions, t0: float) -> PrepareReport:
    assert opts.part is not None
    fmap = _dataset_config(src.config, opts).field_map
    todo = part_slice(src.shards, opts.part)
    check_fields_present(p, todo, fmap)
    scan = _scan_options(opts, fmap)
    journal = Journal(p / PARTS_DIR / JOURNAL_DIR, scan, f"part-{opts.part[0]}-of-{opts.part[1]}")
    data, kf = scan_shards(str(p), todo, scan, opts.workers, opts.progress, journal)
    out = write_part(p, opts.part, data, kf, {"source": src.kind, "field_map": fmap})
    return _report(p, out, data, src.kind, None, t0, opts.part)


class _Index(msgspec.Struct):
    """An index computed in memory, ready to be written (see :func:`_write_index`)."""

    data: IndexData
    keyframes: Any
    config: DatasetConfig
    split: SplitConfig | None
    info: dict[str, Any]
    source: str
    compact: bool = True  #: the compact index layout (format 4), else the flat one


def _compute_index(root: str, src: _Source, opts: PrepareOptions) -> _Index:
    """Scan every shard of ``src`` under ``root`` (a folder or a URL), or merge the parts."""
    config = _dataset_config(src.config, opts)
    fmap = config.field_map
    source = src.kind  # a merge of parts writes the index of one run over every shard
    if opts.merge:
        data, kf = merge_parts(Path(root))
    else:
        scan = _scan_options(opts, fmap)
        journal = None
        if "://" not in root:  # a local folder: compare with the first shard's members
            check_fields_present(Path(root), src.shards, fmap)
            journal = Journal(Path(root) / INDEX_DIR / JOURNAL_DIR, scan)  # see .journal
        data, kf = scan_shards(root, src.shards, scan, opts.workers, opts.progress, journal)
    names = [s["name"] for s in data.shards]
    if opts.split is None and not opts.exclude:
        split = src.split
    else:
        split = build_split_config(opts.split, names, opts.exclude, opts.split_seed)
    info = {"source": source, "aliases": _aliases(data.columns, fmap), "field_map": fmap}
    return _Index(data, kf, config, split, info, source, opts.compact_index)


def _write_index(out: Path, index: _Index) -> None:
    """Write ``index`` into the index folder ``out`` (``DIR/.fpipe`` or ``--index-dir``)."""
    write_index_with_av(out, index.data, index.keyframes, index.info, index.compact)
    dump_yaml(out / "dataset.yaml", index.config)
    if index.split is not None:
        dump_yaml(out / "split.yaml", index.split)
    elif (out / "split.yaml").exists():
        (out / "split.yaml").unlink()
    write_yaml_record(out)  # its YAML files parsed, for a fast open (see yaml_record)


def _prepare_full(p: Path, src: _Source, opts: PrepareOptions, t0: float) -> PrepareReport:
    index = _compute_index(str(p), src, opts)
    out = p / INDEX_DIR
    _write_index(out, index)
    if opts.merge:
        shutil.rmtree(p / PARTS_DIR, ignore_errors=True)
    return _report(p, out, index.data, index.source, index.split, t0, config=index.config)


def _prepare_remote(url: str, opts: PrepareOptions, t0: float) -> PrepareReport:
    """Index the shards under an object-storage URL, streaming each once; write the index to
    ``opts.index_dir`` or, without one, to ``URL/.fpipe/`` in the bucket."""
    if opts.part is not None or opts.merge:
        raise ConfigError(f"{url}: part/merge runs are for local folders; use workers= instead")
    shards = remote_shards(url, opts.shards, opts.storage)
    src = _Source("webdataset", shards, DatasetConfig(), None)
    index = _compute_index(url, src, opts)
    if opts.index_dir is not None:
        out = Path(opts.index_dir)
        _write_index(out, index)
        where = str(out)
    else:
        with tempfile.TemporaryDirectory(prefix="fpipe-index-") as tmp:
            _write_index(Path(tmp), index)
            where = upload_index(Path(tmp), url, opts.storage or StorageOptions())
    report = _report(Path(), Path(), index.data, index.source, index.split, t0, config=index.config)
    return msgspec.structs.replace(report, path=url, index_dir=where)
