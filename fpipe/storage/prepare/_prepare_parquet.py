"""``fpipe prepare`` of Parquet files, or of the Arrow files of a Hugging Face ``datasets``
folder, indexed in place.

:func:`_arrow_files` and :func:`_parquet_files` tell whether a path names such files (a
``save_to_disk`` or cache folder, :mod:`._hf_arrow`; a ``.parquet`` file, a glob, a folder or a
prefix on object storage); :func:`_prepare_parquet` scans them (:mod:`._parquet_dataset`) and
writes the index next to them, or uploads it for files on object storage.
"""

from __future__ import annotations

import fnmatch
import tempfile
import time
from pathlib import Path

import msgspec

from fpipe.core.errors import ConfigError
from fpipe.storage.config.dataset_yaml import (
    DatasetConfig,
    SplitConfig,
    dump_yaml,
    load_dataset_config,
    load_split_config,
)
from fpipe.storage.config.splits import build_split_config
from fpipe.storage.config.yaml_record import write_yaml_record
from fpipe.storage.paths import expand_braces, is_url
from fpipe.storage.prepare._hf_arrow import hf_arrow_files
from fpipe.storage.prepare._options import PrepareOptions, PrepareReport, Problem
from fpipe.storage.prepare._parquet_dataset import (
    field_map_from_columns,
    glob_root,
    hub_split,
    list_parquet,
    named_split,
    parquet_info,
    remote_parquet,
    scan_parquet,
)
from fpipe.storage.prepare._source import _aliases, _dataset_config
from fpipe.storage.read.arrow_stream import ARROW_SUFFIX
from fpipe.storage.read.energon import is_energon
from fpipe.storage.read.parquet import PARQUET_SUFFIX
from fpipe.storage.read.remote import StorageOptions
from fpipe.storage.read.remote_index import upload_index
from fpipe.storage.read.tar.index import INDEX_DIR, write_folder
from fpipe.storage.read.webdataset import SHARD_SUFFIXES, list_shards


def _prepare_parquet(
    root: str,
    names: list[str],
    opts: PrepareOptions,
    t0: float,
    arrow_splits: dict[str, list[str]] | None = None,
) -> PrepareReport:
    """Index Parquet files ``names`` under ``root`` (a folder or a URL) in place; with
    ``arrow_splits`` (split name -> files, maybe empty), Arrow stream files of a Hugging Face
    ``datasets`` folder (:mod:`._hf_arrow`)."""
    arrow = arrow_splits is not None
    if opts.part is not None or opts.merge:
        raise ConfigError(f"{root}: part/merge runs are for tar shards")
    if opts.extra_columns_fn:
        raise ConfigError(
            f"{root}: extra_columns_fn (--extra-columns) is called with a tar sample's members; "
            "for Parquet and Arrow files compute columns from the file's columns with columns= "
            "(--column): NAME=COLUMN, NAME=COLUMN[key], NAME=len(COLUMN)"
        )
    local = not is_url(root)
    index_dir = Path(opts.index_dir) if opts.index_dir is not None else None
    kept = index_dir or (Path(root) / INDEX_DIR if local else None)
    existing = load_dataset_config(kept / "dataset.yaml") if kept else DatasetConfig()
    old_split = load_split_config(kept / "split.yaml") if kept else None

    def fields_for(layout) -> dict:
        if opts.fields is not None:
            return dict(opts.fields)
        return dict(existing.field_map) or field_map_from_columns(layout)

    index, fmap = scan_parquet(
        root,
        names,
        storage=opts.storage,
        field_map=fields_for,
        progress=opts.progress,
        arrow=arrow,
        columns=opts.columns,
    )
    config = _dataset_config(
        DatasetConfig(
            sample_type=existing.sample_type,
            field_map=fmap,
            subflavors=dict(existing.subflavors),
            sample_loader=existing.sample_loader,
        ),
        msgspec.structs.replace(opts, fields=fmap),
    )
    files = [s["name"] for s in index.shards]
    split: SplitConfig | None
    if opts.split is None and not opts.exclude:
        if old_split is not None:
            split = old_split
        elif arrow_splits is not None:  # the files indexed (a refused one is left out)
            split = named_split({k: [n for n in v if n in files] for k, v in arrow_splits.items()})
        else:
            split = hub_split(files)
    else:
        split = build_split_config(opts.split, files, opts.exclude, opts.split_seed)
    arrays, info = parquet_info(index, fmap)
    source = "arrow" if arrow else "parquet"
    info["source"] = source
    info["aliases"] = _aliases(info["columns"], fmap)

    def write(out: Path) -> None:
        write_folder(out, arrays, info, index.problems)
        dump_yaml(out / "dataset.yaml", config)
        if split is not None:
            dump_yaml(out / "split.yaml", split)
        elif (out / "split.yaml").exists():
            (out / "split.yaml").unlink()
        write_yaml_record(out)

    if kept is not None:
        write(kept)
        where = str(kept)
    else:
        with tempfile.TemporaryDirectory(prefix="fpipe-index-") as tmp:
            write(Path(tmp))
            where = upload_index(Path(tmp), root, opts.storage or StorageOptions())
    return PrepareReport(
        path=root,
        index_dir=where,
        kind="parquet",
        source=source,
        num_samples=int(info["num_samples"]),
        num_shards=len(files),
        problems=tuple(Problem(*q) for q in index.problems),
        columns=tuple(info["columns"]),
        members=tuple(info["parquet"]["columns"]),
        splits={k: len(v) for k, v in (split.split_parts if split else {}).items()},
        elapsed_s=time.perf_counter() - t0,
        sample_type=config.sample_type,
        field_map=dict(config.field_map),
    )


def _arrow_files(path: str, opts: PrepareOptions) -> tuple[str, list[str], dict] | None:
    """(folder, Arrow files, splits) when ``path`` is a Hugging Face ``datasets`` folder
    (``save_to_disk`` or a cache folder, :func:`._hf_arrow.hf_arrow_files`); ``shards=``
    patterns pick among its files. None otherwise."""
    if is_url(path) or not Path(path).is_dir():
        return None
    found = hf_arrow_files(Path(path))
    if found is None:
        return None
    names, splits = found
    if opts.shards:
        wanted = [w for pat in opts.shards for w in expand_braces(pat)]
        names = [n for n in names if any(fnmatch.fnmatchcase(n, w) for w in wanted)]
        splits = {k: [n for n in v if n in names] for k, v in splits.items()}
        splits = {k: v for k, v in splits.items() if v}
        if not names:
            raise ConfigError(f"{path}: no Arrow files match {list(opts.shards)}")
    return path, names, splits


def _parquet_files(path: str, opts: PrepareOptions) -> tuple[str, list[str]] | None:
    """(root, Parquet files under it) when ``path`` names Parquet files: a ``.parquet`` file,
    a glob (``data/train-*.parquet``), a folder (or prefix on object storage) holding
    ``.parquet`` files and no tar shards, or ``shards=`` patterns ending in ``.parquet``;
    None otherwise."""
    pats = list(opts.shards)
    wants = bool(pats) and all(q.endswith(PARQUET_SUFFIX) for q in pats)
    if is_url(path):
        from fpipe.storage.read.remote import list_objects

        if not wants:
            listed = [rel for rel, _ in list_objects(path, opts.storage)]
            tars = any(r.endswith(SHARD_SUFFIXES) for r in listed)
            parquet = any(r.endswith(PARQUET_SUFFIX) for r in listed)
            if not (tars or parquet) and any(r.endswith(ARROW_SUFFIX) for r in listed):
                raise ConfigError(
                    f"{path}: Arrow files (a Hugging Face save_to_disk or cache folder) "
                    "are read from local disk only; copy the folder locally, or write "
                    "Parquet files with `Dataset.to_parquet`"
                )
            if tars or not parquet:
                return None
        return path, remote_parquet(path, pats, opts.storage)
    p = Path(path)
    if not p.exists():
        found = glob_root(path)
        if found is None:
            return None
        root, pattern = found
        names = list_parquet(root, [pattern])
        if not names:
            raise ConfigError(f"{path}: no Parquet files match")
        return root, names
    if p.is_file():
        return (str(p.parent), [p.name]) if p.name.endswith(PARQUET_SUFFIX) else None
    if is_energon(p) or (not wants and list_shards(p, pats)):
        return None
    names = list_parquet(p, pats)
    return (str(p), names) if names else None
