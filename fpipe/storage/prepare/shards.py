"""Shard work of ``fpipe prepare``: scan shards into an index, write a part, merge parts.

For a cluster, ``--part i/n`` indexes the i-th of n contiguous slices of the sorted shard list
into ``DIR/.fpipe-parts/part-i-of-n/`` (:func:`write_part`); ``--merge`` combines all n parts
(:func:`merge_parts`) and the caller writes the final index.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.decode.extensions import strip_gz
from fpipe.samples.field_spec import parse_field_spec
from fpipe.storage.paths import PathEscapeError, contained
from fpipe.storage.prepare._progress import progress_bar
from fpipe.storage.prepare.journal import Journal
from fpipe.storage.prepare.scan import ScanOptions, ShardScan, dense_column, scan_shard
from fpipe.storage.read import av_meta
from fpipe.storage.read.tar.index import (
    IndexData,
    concat_index,
    encode_keys,
    read_index_data,
    read_info,
    write_index,
)

__all__ = [
    "Keyframes",
    "MAX_EXTENSION_FIELDS",
    "MIN_EXTENSION_FRACTION",
    "PARTS_DIR",
    "merge_parts",
    "part_slice",
    "scan_shards",
    "write_index_with_av",
    "write_part",
]

PARTS_DIR = ".fpipe-parts"
#: audio/video keyframes of an index: field -> (times concatenated, offsets (n+1,))
Keyframes = dict[str, tuple[np.ndarray, np.ndarray]]
#: Without a field map every extension is a field with its own columns (``<ext>.bytes``...).
#: Only the most frequent :data:`MAX_EXTENSION_FIELDS` extensions present in at least
#: :data:`MIN_EXTENSION_FRACTION` of the samples get them, so that a dataset whose samples
#: have distinct extensions keeps memory and files linear in its members.
MAX_EXTENSION_FIELDS = 64
MIN_EXTENSION_FRACTION = 0.01


def _extension_fields(scans: list[ShardScan]) -> set[str]:
    """The extensions (without ``.gz``) that get per-field columns in a crude index."""
    counts: dict[str, int] = {}
    for scan in scans:
        for ext, c in scan.members.counts().items():
            counts[strip_gz(ext)] = counts.get(strip_gz(ext), 0) + c
    n = sum(len(scan.keys) for scan in scans)
    least = max(1.0, MIN_EXTENSION_FRACTION * n)
    ranked = sorted((-c, e) for e, c in counts.items() if c >= least)
    return {e for _, e in ranked[:MAX_EXTENSION_FIELDS]}


def _to_index(scan: ShardScan, shard_stat: tuple[int, int], fields: set[str] | None) -> IndexData:
    """One shard's index; without a field map (``fields`` given) columns of other extensions
    are left out (see :data:`MAX_EXTENSION_FIELDS`)."""
    keys, offsets = encode_keys(scan.keys)
    n = len(scan.keys)
    user = set(scan.user_columns)
    columns = {
        name: dense_column(n, col)
        for name, col in scan.columns.items()
        if fields is None or name in user or "." not in name or name.rsplit(".", 1)[0] in fields
    }
    return IndexData(
        shards=[
            {"name": scan.name, "samples": n, "bytes": shard_stat[0], "mtime_ns": shard_stat[1]}
        ],
        shard_id=np.zeros(n, np.int32),
        keys=keys,
        key_offsets=offsets,
        members=scan.members,
        columns=columns,
        problems=list(scan.problems),
        shard_errors=int(scan.shard_error is not None),
    )


def _stat(root: str, name: str) -> tuple[int, int]:
    """(size, mtime in ns) of a shard, recorded so that opening can tell it changed since."""
    try:
        st = os.stat(os.path.join(root, name))
    except OSError:
        return -1, -1
    return st.st_size, st.st_mtime_ns


def scan_shards(
    root: str,
    shards: list[str],
    opts: ScanOptions,
    workers: int,
    progress: bool,
    journal: Journal | None = None,
) -> tuple[IndexData, Keyframes]:
    """Index ``shards`` (in ``workers`` spawn-started processes when > 1), in order. A shard
    whose name leads out of ``root`` (named by Energon's ``.info.yaml``, or a symbolic link
    out of the folder) is left out of the index, reported, and never opened. With a
    ``journal``, shards it recorded unchanged are taken from it, not read, and each shard
    scanned is recorded as it finishes (:mod:`.journal`)."""
    refused = []
    for name in shards:
        try:
            contained(root, name, what="shard")
        except PathEscapeError as e:
            refused.append((name, "", e.reason))
    if refused:
        out = {q[0] for q in refused}
        shards = [name for name in shards if name not in out]
    stats = [_stat(root, name) for name in shards]  # before reading: a later change shows
    recorded = journal.load(dict(zip(shards, stats))) if journal is not None else {}
    todo = [i for i, name in enumerate(shards) if name not in recorded]
    bar = progress_bar(len(shards), "prepare", enabled=progress)
    bar.update(len(shards) - len(todo))
    samples = 0
    found: dict[str, ShardScan] = dict(recorded)
    names = [shards[i] for i in todo]
    if workers <= 1 or len(names) <= 1:
        scans = (scan_shard(root, name, opts) for name in names)
        ex = None
    else:
        ex = ProcessPoolExecutor(min(workers, len(names)), mp_context=get_context("spawn"))
        scans = ex.map(scan_shard, repeat(root), names, repeat(opts))
    try:
        for i, scan in zip(todo, scans):
            found[shards[i]] = scan
            if journal is not None:
                journal.add(shards[i], stats[i], scan)
            samples += len(scan.keys)
            bar.set_postfix_str(f"{samples:,} samples", refresh=False)
            bar.update(1)
    finally:
        if ex is not None:
            ex.shutdown(cancel_futures=True)
        if journal is not None:
            journal.close()
    bar.close()
    done = [found[name] for name in shards]
    fields = None if opts.field_map else _extension_fields(done)
    datas = []
    for scan, st in zip(done, stats):
        size = scan.size if scan.size >= 0 else st[0]  # streamed from object storage
        datas.append(_to_index(scan, (size, st[1]), fields))
    keyframes = [
        (len(scan.keys), {f: v for f, v in scan.keyframes.items() if fields is None or f in fields})
        for scan in done
    ]
    index = concat_index(datas)
    index.problems[:0] = refused
    index.shard_errors += len(refused)
    return index, av_meta.concat_keyframes(keyframes)


def _av_info(kf: Keyframes, fmap: dict[str, str]) -> dict[str, Any]:
    """``{"av": {"fields": {field: [member extensions]}}}`` for info.yaml ({} without AV)."""
    if not kf:
        return {}
    fields = {}
    for f in kf:
        exts = [f]  # crude datasets: the field is the member extension
        if f in fmap:
            exts = [
                a.base_ext
                for a in parse_field_spec(fmap[f])
                if not a.path and av_meta.is_av_ext(a.ext)
            ]
        fields[f] = exts
    return {"av": {"fields": fields}}


def write_index_with_av(
    out: Path, data: IndexData, kf: Keyframes, info: dict[str, Any], compact: bool = True
) -> None:
    """Write an index folder plus its audio/video keyframe arrays (the compact layout unless
    ``compact`` is False: see :func:`~fpipe.storage.read.tar.index.write_index`)."""
    write_index(out, data, {**info, **_av_info(kf, info.get("field_map") or {})}, compact)
    av_meta.write_keyframes(out, kf)


def write_part(
    root: Path, part: tuple[int, int], data: IndexData, kf: Keyframes, info: dict[str, Any]
) -> Path:
    """Write part ``(i, n)`` to ``root/.fpipe-parts/part-i-of-n``; returns that folder (in the
    flat layout, which :func:`merge_parts` reads whole)."""
    out = root / PARTS_DIR / f"part-{part[0]}-of-{part[1]}"
    out.parent.mkdir(exist_ok=True)
    write_index_with_av(out, data, kf, {**info, "part": list(part), "aliases": {}}, False)
    return out


def part_slice(shards: list[str], part: tuple[int, int]) -> list[str]:
    """The i-th of n contiguous slices of ``shards``."""
    i, n = part
    return shards[i * len(shards) // n : (i + 1) * len(shards) // n]


def merge_parts(root: Path) -> tuple[IndexData, Keyframes]:
    """Combine the parts of one ``--part i/n`` run, in part order."""
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
    keyframes = []
    for i, d in enumerate(datas):
        fields = (read_info(parts[i]).get("av") or {}).get("fields")
        keyframes.append((len(d.shard_id), av_meta.read_keyframes(parts[i], fields)))
    data = concat_index(datas)
    if not data.shards:
        raise ConfigError(f"{root}: the parts hold no shards")
    return data, av_meta.concat_keyframes(keyframes)
