"""The work behind ``fpipe prepare``: index shards (or a table), write the YAML files.

``prepare_dataset(DIR)`` scans every shard (in ``workers`` spawn-started processes), writes the
columnar index to ``DIR/.fpipe/`` plus ``dataset.yaml`` and ``split.yaml`` there, and returns
a :class:`PrepareReport`. Bad input never stops it: each left-out sample is reported with its
file, key and reason, and counted in ``info.yaml``.

For a cluster: ``part=(i, n)`` indexes the i-th of n contiguous slices of the sorted shard list
into ``DIR/.fpipe-parts/part-i-of-n/``; ``merge=True`` combines all n parts into ``.fpipe``.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.storage import av_meta, tables
from fpipe.storage.config import (
    CRUDE,
    DatasetConfig,
    SplitConfig,
    dump_yaml,
    load_dataset_config,
    parse_field_spec,
    parse_split_ratios,
)
from fpipe.storage.energon import exclude_to_keys, is_energon, read_energon_meta
from fpipe.storage.progress import Progress
from fpipe.storage.scan import ScanOptions, ShardScan, _kind, parse_column, scan_shard
from fpipe.storage.tar_index import (
    INDEX_DIR,
    IndexData,
    concat_index,
    encode_keys,
    read_index_data,
    write_folder,
    write_index,
)
from fpipe.storage.webdataset import expand_braces, list_shards

__all__ = ["PARTS_DIR", "PrepareReport", "Problem", "prepare_dataset"]

PARTS_DIR = ".fpipe-parts"
# field names -> sample type guessed when --sample-type is not given
_GUESS = {
    frozenset({"image", "caption"}): "CaptioningSample",
    frozenset({"image"}): "ImageSample",
    frozenset({"text"}): "TextSample",
    frozenset({"image", "label"}): "ImageClassificationSample",
    frozenset({"image", "context", "answers"}): "VQASample",
    frozenset({"video", "caption"}): "CaptionedVideoSample",
    frozenset({"image", "context"}): "VQASample",
}


class Problem(msgspec.Struct, frozen=True):
    """A sample (or shard) left out of the index."""

    path: str  #: shard or file, relative to the dataset folder
    key: str  #: sample key ("<shard stem>/<key>"), "" when unknown
    reason: str  #: what is wrong

    def __str__(self) -> str:
        return f"{self.path}: {self.key or '(shard)'}: {self.reason}"


class PrepareReport(msgspec.Struct, frozen=True, kw_only=True):
    """What ``prepare_dataset`` did."""

    path: str  #: dataset folder (or table file)
    index_dir: str  #: folder written (``.fpipe``, or a part folder)
    kind: str  #: "webdataset" | "table"
    source: str  #: "webdataset" | "energon" | "table"
    num_samples: int  #: samples in the index
    num_shards: int  #: shards indexed
    problems: tuple[Problem, ...]  #: left-out samples and unreadable shard tails
    columns: tuple[str, ...]  #: metadata columns written
    members: tuple[str, ...]  #: member extensions seen
    splits: dict[str, int]  #: split name -> shards (empty for parts)
    elapsed_s: float  #: wall time
    part: tuple[int, int] | None = None  #: (i, n) when this was one part

    @property
    def samples_per_s(self) -> float:
        """Indexing throughput."""
        return self.num_samples / self.elapsed_s if self.elapsed_s > 0 else 0.0


def _field_map(fields: Mapping[str, str] | Iterable[str] | None) -> dict[str, str] | None:
    if fields is None:
        return None
    if isinstance(fields, Mapping):
        out = {str(k): str(v) for k, v in fields.items()}
    else:
        out = {}
        for item in fields:
            if "=" not in item:
                raise ConfigError(f"bad field {item!r}: use NAME=SPEC, e.g. image=jpg")
            k, v = item.split("=", 1)
            out[k.strip()] = v.strip()
    for spec in out.values():
        parse_field_spec(spec)
    return out


def _split_config(
    split: str | Mapping[str, Any] | SplitConfig | None,
    shards: list[str],
    exclude: Iterable[str],
    seed: int | None,
) -> SplitConfig | None:
    exclude = list(exclude)
    if split is None:
        if not exclude:
            return None
        return SplitConfig(split_parts={"train": list(shards)}, exclude=exclude)
    if isinstance(split, SplitConfig):
        return SplitConfig(split_parts=split.split_parts, exclude=list(split.exclude) + exclude)
    if isinstance(split, Mapping):  # split name -> shard names or glob patterns
        parts = {}
        for name, pats in split.items():
            pats = [pats] if isinstance(pats, str) else list(pats)
            pats = [q for p in pats for q in expand_braces(p)]
            parts[str(name)] = [s for s in shards if any(fnmatch.fnmatch(s, p) for p in pats)]
        return SplitConfig(split_parts=parts, exclude=exclude)
    ratios = parse_split_ratios(split)
    order = list(shards)
    if seed is not None:
        perm = np.random.Generator(np.random.Philox(seed)).permutation(len(order))
        order = [order[i] for i in perm]
    parts, start, acc = {}, 0, 0.0
    for name, r in ratios.items():
        acc += r
        end = len(order) if name == list(ratios)[-1] else round(acc * len(order))
        parts[name] = sorted(order[start:end])
        start = end
    return SplitConfig(split_parts=parts, exclude=exclude)


def _to_index(scan: ShardScan, shard_bytes: int) -> IndexData:
    keys, offsets = encode_keys(scan.keys)
    n = len(scan.keys)
    return IndexData(
        shards=[{"name": scan.name, "samples": n, "bytes": shard_bytes}],
        shard_id=np.zeros(n, np.int32),
        keys=keys,
        key_offsets=offsets,
        members=scan.members,
        columns=scan.columns,
        problems=list(scan.problems),
        shard_errors=int(scan.shard_error is not None),
    )


def _scan_all(
    root: str,
    shards: list[str],
    opts: ScanOptions,
    workers: int,
    progress: bool,
    keyframes: list | None = None,
) -> list[IndexData]:
    bar = Progress(len(shards), "prepare", enabled=progress)
    out: list[IndexData] = []

    def sizes(name: str) -> int:
        try:
            return os.path.getsize(os.path.join(root, name))
        except OSError:
            return -1

    if workers <= 1 or len(shards) <= 1:
        for name in shards:
            scan = scan_shard(root, name, opts)
            out.append(_to_index(scan, sizes(name)))
            if keyframes is not None:  # audio/video keyframes, per shard
                keyframes.append((len(scan.keys), scan.keyframes))
            bar.update(1, len(scan.keys))
    else:
        ctx = get_context("spawn")
        with ProcessPoolExecutor(min(workers, len(shards)), mp_context=ctx) as ex:
            for name, scan in zip(shards, ex.map(scan_shard, repeat(root), shards, repeat(opts))):
                out.append(_to_index(scan, sizes(name)))
                if keyframes is not None:  # audio/video keyframes, per shard
                    keyframes.append((len(scan.keys), scan.keyframes))
                bar.update(1, len(scan.keys))
    bar.close()
    return out


def _aliases(columns: Iterable[str], field_map: dict[str, str]) -> dict[str, str]:
    cols = list(columns)
    order = list(field_map) + [c[: -len(".width")] for c in cols if c.endswith(".width")]
    for f in order:
        if f"{f}.width" in cols and "width" not in cols:
            return {"width": f"{f}.width", "height": f"{f}.height"}
    return {}


def _guess_sample_type(field_map: dict[str, str]) -> str:
    return _GUESS.get(frozenset(field_map), CRUDE) if field_map else CRUDE


def _report(
    root: Path,
    index_dir: Path,
    data: IndexData,
    source: str,
    splits: SplitConfig | None,
    t0: float,
    part: tuple[int, int] | None,
) -> PrepareReport:
    return PrepareReport(
        path=str(root),
        index_dir=str(index_dir),
        kind="webdataset",
        source=source,
        num_samples=int(len(data.shard_id)),
        num_shards=len(data.shards),
        problems=tuple(Problem(*p) for p in data.problems),
        columns=tuple(data.columns),
        members=tuple(sorted(data.members)),
        splits={k: len(v) for k, v in (splits.split_parts if splits else {}).items()},
        elapsed_s=time.perf_counter() - t0,
        part=part,
    )


def prepare_dataset(
    path: str | os.PathLike,
    *,
    fields: Mapping[str, str] | Iterable[str] | None = None,
    split: str | Mapping[str, Any] | SplitConfig | None = None,
    sample_type: str | None = None,
    workers: int = 1,
    part: tuple[int, int] | str | None = None,
    merge: bool = False,
    columns: Iterable[str] = (),
    extra_columns_fn: str | Callable | None = None,
    progress: bool = False,
    shards: Iterable[str] = (),
    exclude: Iterable[str] = (),
    split_seed: int | None = None,
    subflavors: Mapping[str, Any] | None = None,
    root: str | os.PathLike | None = None,
    media_columns: Iterable[str] | None = None,
    aux: str | os.PathLike | None = None,
    probe_av: bool = True,
) -> PrepareReport:
    """Index a WebDataset folder, an Energon-prepared folder, or a JSONL/CSV table.

    Args:
      path: dataset folder, or a ``.jsonl`` / ``.csv`` table.
      fields: field map, ``{"image": "jpg", "caption": "json[caption]"}`` or
        ``["image=jpg", ...]``. Every field is required: samples without it are left out.
        Default: the existing dataset.yaml (fpipe's or Energon's), else none (crude).
      split: ``"8,1,1"`` (train/val/test by shard ratios), ``{"train": ["a-*.tar"], ...}``
        (shard globs), or a :class:`SplitConfig`. Default: existing split.yaml, else none.
      sample_type: e.g. ``"CaptioningSample"``; guessed from common field names otherwise.
      workers: processes scanning shards in parallel.
      part: ``(i, n)`` or ``"i/n"``: index only the i-th (0-based) of n shard slices.
      merge: combine the n parts written by ``part`` runs into the final index.
      columns: user columns, ``"NAME=json[path]"`` or ``"NAME=len(json[path])"``.
      extra_columns_fn: ``"module:function"`` (or a top-level function) called with the
        sample's members ``{ext: bytes}`` and returning ``{column: number}``.
      progress: draw a progress bar on stderr.
      shards: shard patterns relative to ``path`` (brace expansion and globs); default all.
      exclude: split.yaml exclude entries to add.
      split_seed: shuffle shards with this seed before splitting by ratio.
      subflavors: written to dataset.yaml.
      root, media_columns, aux: for tables (see :mod:`fpipe.storage.tables`).
      probe_av: probe audio/video members (or table media files) and store their stream
        metadata columns and keyframe times (:mod:`fpipe.storage.av_meta`); a file that
        cannot be probed is left out and reported.

    Returns:
      A :class:`PrepareReport`.
    """
    t0 = time.perf_counter()
    p = Path(path)
    if p.is_file() and tables.is_table(p):
        return _prepare_table(
            p,
            root=root,
            media_columns=media_columns,
            aux=aux,
            fields=_field_map(fields),
            sample_type=sample_type,
            t0=t0,
            probe_av=probe_av,
        )
    fmap = _field_map(fields)
    col_specs = tuple(parse_column(c) for c in columns)
    if not p.is_dir():
        raise ConfigError(f"{p}: no such folder or table")
    if isinstance(part, str):
        try:
            i, n = (int(x) for x in part.split("/"))
        except ValueError:
            raise ConfigError(f"bad part {part!r}: use i/n with 0 <= i < n, e.g. 0/8") from None
        part = (i, n)
    if part is not None and not 0 <= part[0] < part[1]:
        raise ConfigError(f"bad part {part[0]}/{part[1]}: need 0 <= i < n")
    if part is not None and merge:
        raise ConfigError("use either part (index one slice) or merge (combine slices)")

    source = "webdataset"
    existing = load_dataset_config(p / INDEX_DIR / "dataset.yaml")
    old_split = None
    if is_energon(p):
        source = "energon"
        meta = read_energon_meta(p)
        existing = meta.config
        shard_list = list(meta.shard_counts)
        if meta.split is not None:
            old_split = SplitConfig(
                split_parts=meta.split.split_parts, exclude=exclude_to_keys(p, meta)
            )
    else:
        shard_list = list_shards(p, list(shards))
    if shards and source == "energon":
        wanted = set(list_shards(p, list(shards)))
        shard_list = [s for s in shard_list if s in wanted]
    if not shard_list:
        raise ConfigError(f"{p}: no .tar/.tar.gz/.tgz shards found")

    if fmap is None:
        fmap = dict(existing.field_map)
    opts = ScanOptions(
        field_map=fmap,
        columns=col_specs,
        extra_columns_fn=extra_columns_fn
        if isinstance(extra_columns_fn, str) or (extra_columns_fn is None)
        else _callable_ref(extra_columns_fn),
        probe_av=probe_av,
    )

    kf_parts: list = []  # audio/video keyframes: (samples, {field: (values, offsets)})
    if merge:
        data, n_parts = _merge_parts(p, kf_parts)
        source = "merged-" + source
    else:
        todo = shard_list
        if part is not None:
            i, n = part
            todo = shard_list[i * len(shard_list) // n : (i + 1) * len(shard_list) // n]
        data = concat_index(_scan_all(str(p), todo, opts, workers, progress, kf_parts))
        if part is not None:
            out = p / PARTS_DIR / f"part-{part[0]}-of-{part[1]}"
            out.parent.mkdir(exist_ok=True)
            kf = av_meta.concat_keyframes(kf_parts)
            write_index(
                out,
                data,
                {
                    "source": source,
                    "part": list(part),
                    "field_map": fmap,
                    "aliases": {},
                    **_av_info(kf, fmap),
                },
            )
            av_meta.write_keyframes(out, kf)
            return _report(p, out, data, source, None, t0, part)

    if not data.shards and merge:
        raise ConfigError(f"{p}: the parts hold no shards")
    names = [s["name"] for s in data.shards]
    if split is None and not exclude:
        if old_split is None and (p / INDEX_DIR / "split.yaml").exists():
            from fpipe.storage.config import load_split_config

            old_split = load_split_config(p / INDEX_DIR / "split.yaml")
        split_cfg = old_split
    else:
        split_cfg = _split_config(split, names, exclude, split_seed)
    config = DatasetConfig(
        sample_type=sample_type
        or (existing.sample_type if existing.sample_type != CRUDE else _guess_sample_type(fmap)),
        field_map=fmap,
        subflavors=dict(subflavors if subflavors is not None else existing.subflavors),
        sample_loader=existing.sample_loader,
    )
    out = p / INDEX_DIR
    kf = av_meta.concat_keyframes(kf_parts)
    write_index(
        out,
        data,
        {
            "source": source,
            "aliases": _aliases(data.columns, fmap),
            "field_map": fmap,
            **_av_info(kf, fmap),
        },
    )
    av_meta.write_keyframes(out, kf)
    dump_yaml(out / "dataset.yaml", config)
    if split_cfg is not None:
        dump_yaml(out / "split.yaml", split_cfg)
    elif (out / "split.yaml").exists():
        (out / "split.yaml").unlink()
    if merge:
        shutil.rmtree(p / PARTS_DIR, ignore_errors=True)
    return _report(p, out, data, source, split_cfg, t0, None)


def _callable_ref(fn: Callable) -> str:
    mod, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not mod or "." in name or "<" in name:
        raise ConfigError(
            f"extra_columns_fn {fn!r} must be a top-level function (it is imported by name in "
            "worker processes); or pass 'module:function'"
        )
    return f"{mod}:{name}"


def _av_info(kf: dict, fmap: dict[str, str]) -> dict[str, Any]:
    """``{"av": {"fields": {field: [member extensions]}}}`` for info.yaml ({} without AV)."""
    if not kf:
        return {}
    fields = {}
    for f in kf:
        exts = [f]  # crude datasets: the field is the member extension
        if f in fmap:
            exts = [
                a.ext[:-3] if a.ext.endswith(".gz") else a.ext
                for a in parse_field_spec(fmap[f])
                if not a.path and av_meta.is_av_ext(a.ext)
            ]
        fields[f] = exts
    return {"av": {"fields": fields}}


def _merge_parts(root: Path, keyframes: list | None = None) -> tuple[IndexData, int]:
    parts_dir = root / PARTS_DIR
    found: dict[int, dict[int, Path]] = {}
    for d in parts_dir.glob("part-*-of-*") if parts_dir.is_dir() else ():
        try:
            _, i, _, n = d.name.split("-")
            found.setdefault(int(n), {})[int(i)] = d
        except ValueError:
            continue
    if len(found) != 1:
        raise ConfigError(
            f"{parts_dir}: expected parts of one run (part-i-of-n), found "
            f"{sorted(found) or 'none'}; run `fpipe prepare DIR --part i/n` for every i first"
        )
    ((n, parts),) = found.items()
    missing = [i for i in range(n) if i not in parts]
    if missing:
        raise ConfigError(f"{parts_dir}: parts {missing} of {n} are missing")
    datas = [read_index_data(parts[i]) for i in range(n)]
    if keyframes is not None:  # audio/video keyframes of each part
        from fpipe.storage.tar_index import read_info

        for i, d in zip(range(n), datas):
            fields = (read_info(parts[i]).get("av") or {}).get("fields")
            keyframes.append((len(d.shard_id), av_meta.read_keyframes(parts[i], fields)))
    return concat_index(datas), n


def _prepare_table(
    path: Path, *, root, media_columns, aux, fields, sample_type, t0: float, probe_av: bool = True
) -> PrepareReport:
    folder = path.parent
    arrays, problems = tables.table_index(
        path,
        root=root,
        media_columns=None if media_columns is None else list(media_columns),
        aux=aux,
        probe_av=probe_av,
    )
    info = arrays.pop("_info")
    info["table"]["path"] = path.name
    info["table"]["root"] = os.path.relpath(root if root is not None else folder, folder)
    info["table"]["aux"] = None if aux is None else os.path.relpath(aux, folder)
    rel_problems = [
        (os.path.relpath(a, folder) if os.path.isabs(a) else a, k, r) for a, k, r in problems
    ]
    out = folder / INDEX_DIR
    write_folder(out, arrays, info, rel_problems)
    config = DatasetConfig(
        sample_type=sample_type or _guess_sample_type(fields or {}), field_map=dict(fields or {})
    )
    dump_yaml(out / "dataset.yaml", config)
    return PrepareReport(
        path=str(path),
        index_dir=str(out),
        kind="table",
        source="table",
        num_samples=int(info["num_samples"]),
        num_shards=0,
        problems=tuple(Problem(*q) for q in rel_problems),
        columns=tuple(info["columns"]),
        members=tuple(info["table"]["media_columns"]),
        splits={},
        elapsed_s=time.perf_counter() - t0,
    )


def image_fields(field_map: dict[str, str]) -> list[str]:
    """Fields of a field map that name image members (they get width/height columns)."""
    return [
        f
        for f, s in field_map.items()
        if any(not a.path and _kind(a.ext) == "image" for a in parse_field_spec(s))
    ]
