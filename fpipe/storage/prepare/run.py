"""The work behind ``fpipe prepare``: index shards (or a table), write the YAML files.

``prepare_dataset(DIR)`` checks its options (:class:`PrepareOptions`), then runs one mode, each
a small function of this module:

- :func:`_prepare_table`: a ``.jsonl`` / ``.csv`` table (:mod:`._table`);
- :func:`_prepare_parquet`: Parquet files (a folder, a glob or a prefix on object storage),
  or the Arrow files of a Hugging Face ``datasets`` folder (``save_to_disk``, a cache folder:
  :mod:`._hf_arrow`), indexed in place (:mod:`._parquet_dataset`);
- :func:`_prepare_part`: one slice of the shards of a cluster run (``part=(i, n)``);
- :func:`_prepare_full`: every shard of a WebDataset or Energon folder, or the merged parts
  (``merge=True``), written to ``DIR/.fpipe/`` with ``dataset.yaml`` and ``split.yaml``.

Where the shards, dataset.yaml and split.yaml come from is :func:`_find_source` (an Energon
folder's ``.nv-meta`` or a previous fpipe index). Bad input never stops indexing: each
left-out sample is reported with its file, key and reason, and counted in ``info.yaml``.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from fpipe.core.errors import ConfigError, EmptyIndexError
from fpipe.storage.config.dataset_yaml import (
    CRUDE,
    DatasetConfig,
    SplitConfig,
    dump_yaml,
    load_dataset_config,
    load_split_config,
)
from fpipe.storage.config.splits import build_split_config
from fpipe.storage.config.yaml_record import write_yaml_record
from fpipe.storage.paths import expand_braces, is_url
from fpipe.storage.prepare._checks import check_fields_present, check_sample_type
from fpipe.storage.prepare._hf_arrow import hf_arrow_files
from fpipe.storage.prepare._options import (
    PrepareOptions,
    PrepareReport,
    Problem,
    make_options,
)
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
from fpipe.storage.prepare._table import write_table_index
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
from fpipe.storage.read.arrow_stream import ARROW_SUFFIX
from fpipe.storage.read.energon import (
    exclude_to_keys,
    exclude_to_keys_by_walk,
    has_shard_counts,
    is_energon,
    read_energon_meta,
    read_energon_yaml,
)
from fpipe.storage.read.parquet import PARQUET_SUFFIX
from fpipe.storage.read.remote import StorageOptions
from fpipe.storage.read.remote_index import remote_shards, upload_index
from fpipe.storage.read.tables import is_table
from fpipe.storage.read.tar.index import INDEX_DIR, IndexData, write_folder
from fpipe.storage.read.webdataset import SHARD_SUFFIXES, list_shards

__all__ = ["PARTS_DIR", "PrepareOptions", "PrepareReport", "Problem", "prepare_dataset"]

# field names -> sample type guessed when --sample-type is not given
_GUESS = {
    frozenset({"image", "caption"}): "CaptioningSample",
    frozenset({"image"}): "ImageSample",
    frozenset({"text"}): "TextSample",
    frozenset({"image", "label"}): "ImageClassificationSample",
    frozenset({"image", "context", "answers"}): "VQASample",
    frozenset({"video", "caption"}): "CaptionedVideoSample",
    frozenset({"audio", "caption"}): "CaptionedAudioSample",
    frozenset({"image", "context"}): "VQASample",
}


def _guess_sample_type(field_map: dict[str, str]) -> str:
    return _GUESS.get(frozenset(field_map), CRUDE) if field_map else CRUDE


def _aliases(columns: Iterable[str], field_map: dict[str, str]) -> dict[str, str]:
    cols = list(columns)
    order = list(field_map) + [c[: -len(".width")] for c in cols if c.endswith(".width")]
    for f in order:
        if f"{f}.width" in cols and "width" not in cols:
            return {"width": f"{f}.width", "height": f"{f}.height"}
    return {}


class _Source(msgspec.Struct, frozen=True):
    """What a folder already says: its kind, shards, dataset.yaml and split.yaml."""

    kind: str  #: "webdataset" | "energon"
    shards: list[str]
    config: DatasetConfig
    split: SplitConfig | None


def _find_source(p: Path, opts: PrepareOptions) -> _Source:
    """Shards, config and split of an Energon folder (``.nv-meta``; without its
    ``.info.yaml``, the shards are found as in a WebDataset folder) or a WebDataset folder
    (a previous ``.fpipe`` index's YAML files)."""
    if is_energon(p) and not has_shard_counts(p):  # .nv-meta with dataset.yaml/split.yaml only
        config, split = read_energon_yaml(p)
        shards = list_shards(p, list(opts.shards))
        if split is not None:
            split = SplitConfig(
                split_parts=split.split_parts,
                exclude=exclude_to_keys_by_walk(p, split, shards),
            )
        return _Source("energon", shards, config, split)
    if is_energon(p):
        meta = read_energon_meta(p)
        shards = list(meta.shard_counts)
        if opts.shards:
            wanted = set(list_shards(p, list(opts.shards)))
            shards = [s for s in shards if s in wanted]
        split = meta.split
        if split is not None:  # Energon's per-shard indices become keys: fpipe may drop samples
            split = SplitConfig(split_parts=split.split_parts, exclude=exclude_to_keys(p, meta))
        return _Source("energon", shards, meta.config, split)
    config = load_dataset_config(p / INDEX_DIR / "dataset.yaml")
    split = load_split_config(p / INDEX_DIR / "split.yaml")
    return _Source("webdataset", list_shards(p, list(opts.shards)), config, split)


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


def _scan_options(opts: PrepareOptions, fmap: dict[str, str]) -> ScanOptions:
    return ScanOptions(
        field_map=fmap,
        columns=opts.columns,
        extra_columns_fn=opts.extra_columns_fn,
        probe_av=opts.probe_av,
    )


def _dataset_config(existing: DatasetConfig, opts: PrepareOptions) -> DatasetConfig:
    """dataset.yaml to write: options over what the folder had; checked against the type."""
    fmap = opts.fields if opts.fields is not None else dict(existing.field_map)
    kept = existing.sample_type if existing.sample_type != CRUDE else None
    config = DatasetConfig(
        sample_type=opts.sample_type or kept or _guess_sample_type(fmap),
        field_map=fmap,
        subflavors=dict(opts.subflavors if opts.subflavors is not None else existing.subflavors),
        sample_loader=existing.sample_loader,
    )
    check_sample_type(config.sample_type, fmap, existing.sample_loader)
    return config


def _prepare_table(p: Path, opts: PrepareOptions, t0: float) -> PrepareReport:
    config = _dataset_config(DatasetConfig(), opts)
    out, info, problems = write_table_index(
        p,
        root=opts.root,
        media_columns=opts.media_columns,
        aux=opts.aux,
        config=config,
        probe_av=opts.probe_av,
        columns=opts.columns,
        extra_columns_fn=opts.extra_columns_fn,
    )
    return PrepareReport(
        path=str(p),
        index_dir=str(out),
        kind="table",
        source="table",
        num_samples=int(info["num_samples"]),
        num_shards=0,
        problems=tuple(Problem(*q) for q in problems),
        columns=tuple(info["columns"]),
        members=tuple(info["table"]["media_columns"]),
        splits={},
        elapsed_s=time.perf_counter() - t0,
        sample_type=config.sample_type,
        field_map=dict(config.field_map),
    )


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
