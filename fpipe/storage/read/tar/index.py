"""The on-disk index in ``DIR/.fpipe/``: columnar ``.npy`` files plus ``info.yaml``.

Every array is a plain ``.npy`` file loaded with ``np.load(mmap_mode="r", allow_pickle=False)``,
so opening a billion-sample index reads only ``info.yaml``. See ``docs/format.md``.

Layout::

    .fpipe/info.yaml                 format, version, shards, members, columns, counts
    .fpipe/dataset.yaml, split.yaml  sample type + field map; split parts + excludes
    .fpipe/problems.jsonl            one JSON object per left-out sample (path, key, reason)
    .fpipe/shard_id.npy              int32 (n,)     shard of each sample (into info.shards)
    .fpipe/keys.npy                  uint8 (bytes,) UTF-8 member keys, concatenated
    .fpipe/keys.offsets.npy          int64 (n+1,)   key i is keys[off[i]:off[i+1]]
    .fpipe/members/start.npy         int64 (n+1,)   sample i's members: rows start[i]:start[i+1]
    .fpipe/members/ext.npy           int32 (m,)     member extension (position in info.members)
    .fpipe/members/offset.npy        int64 (m,)     byte offset of the member's data in its shard
    .fpipe/members/size.npy          int64 (m,)     member size in bytes
    .fpipe/columns/<name>.npy        int64 / float64 (n,) metadata columns

That is the flat layout (formats 1 to 3, ~117 bytes per image + caption sample). ``fpipe
prepare`` writes the compact layout (format 4, :mod:`.compact`) instead unless asked for the
flat one: the same values, most of them derived, the rest in the smallest dtypes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import yaml

from fpipe._version import __version__
from fpipe.core.errors import ConfigError
from fpipe.core.temp_names import beside
from fpipe.storage.config.yaml_record import load_yaml_file
from fpipe.storage.read.members import MemberTable, concat_members, member_files
from fpipe.storage.read.tar.compact import compact_files
from fpipe.storage.read.tar.shard_table import (
    SHARD_ARRAYS_FROM,
    ShardTable,
    load_array,
    shard_table_files,
)

__all__ = [
    "FORMAT",
    "INDEX_DIR",
    "IndexData",
    "READ_GAP",
    "TAR_HEADER",
    "VERSION",
    "concat_index",
    "load_array",
    "read_index_data",
    "read_info",
    "write_folder",
    "write_index",
]

#: a tar header: read before a sample's first member to check the member's name.
TAR_HEADER = 512
#: extra bytes allowed between members before a sample is read with one pread per member.
READ_GAP = 64 * 1024

INDEX_DIR = ".fpipe"
FORMAT = "fpipe-index"
#: 4: the compact per-sample layout (``compact/``, :mod:`.compact`), the shard list in
#: ``info.yaml`` or as arrays; 3: the shard list as arrays (``shards/*.npy``,
#: :mod:`.shard_table`), written from ``SHARD_ARRAYS_FROM`` shards on; 2: one flat member table
#: (``members/start|ext|offset|size.npy``), shards listed in ``info.yaml``; 1: two arrays per
#: extension (``members/<ext>.offset|size.npy``). All four are read.
VERSION = 4


class IndexData(msgspec.Struct, kw_only=True):
    """An index held in memory (used while preparing and merging)."""

    shards: list[dict[str, Any]]  #: [{name, samples, bytes}] in shard-id order
    shard_id: np.ndarray  #: int32 (n,)
    keys: np.ndarray  #: uint8 blob of UTF-8 keys
    key_offsets: np.ndarray  #: int64 (n+1,)
    members: MemberTable  #: where each sample's members lie
    columns: dict[str, np.ndarray]  #: name -> (n,) values
    problems: list[tuple[str, str, str]] = msgspec.field(default_factory=list)
    shard_errors: int = 0


def encode_keys(keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """List of strings -> (uint8 blob, int64 offsets of length n+1)."""
    enc = [k.encode("utf-8", "surrogateescape") for k in keys]
    offsets = np.zeros(len(enc) + 1, np.int64)
    if enc:
        np.cumsum([len(e) for e in enc], out=offsets[1:])
    return np.frombuffer(b"".join(enc), np.uint8).copy(), offsets


def _fill(dtype: np.dtype) -> float | int:
    return np.nan if dtype.kind == "f" else -1


def concat_index(parts: list[IndexData]) -> IndexData:
    """Concatenate indexes in order (shard ids are renumbered; missing columns are filled)."""
    n = sum(len(p.shard_id) for p in parts)
    shard_base = np.cumsum([0] + [len(p.shards) for p in parts])
    starts = np.cumsum([0] + [len(p.shard_id) for p in parts])
    col_dtype: dict[str, np.dtype] = {}
    for p in parts:
        for name, arr in p.columns.items():
            old = col_dtype.get(name)
            col_dtype[name] = arr.dtype if old is None else np.promote_types(old, arr.dtype)
    columns = {name: np.full(n, _fill(dt), dt) for name, dt in col_dtype.items()}
    key_offsets = np.zeros(n + 1, np.int64)
    key_base = 0
    for p, s0 in zip(parts, starts[:-1]):
        s1 = s0 + len(p.shard_id)
        for name, arr in p.columns.items():
            columns[name][s0:s1] = arr
        key_offsets[s0 + 1 : s1 + 1] = p.key_offsets[1:] + key_base
        key_base += int(p.key_offsets[-1])
    return IndexData(
        shards=[s for p in parts for s in p.shards],
        shard_id=np.concatenate(
            [np.asarray(p.shard_id, np.int32) + b for p, b in zip(parts, shard_base[:-1])]
        ).astype(np.int32)
        if parts
        else np.zeros(0, np.int32),
        keys=np.concatenate([p.keys for p in parts]) if parts else np.zeros(0, np.uint8),
        key_offsets=key_offsets,
        members=concat_members([p.members for p in parts]),
        columns=columns,
        problems=[q for p in parts for q in p.problems],
        shard_errors=sum(p.shard_errors for p in parts),
    )


def write_folder(
    out: str | Path,
    files: dict[str, np.ndarray],
    info: dict[str, Any],
    problems: list[tuple[str, str, str]],
) -> None:
    """Write ``.npy`` files, ``problems.jsonl`` and ``info.yaml`` as folder ``out``, atomically.

    A previous folder is replaced as a whole (its dataset.yaml and split.yaml are kept unless
    new ones are written afterwards).
    """
    out = Path(out)
    tmp = beside(out)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    for rel, arr in files.items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        np.save(tmp / rel, arr, allow_pickle=False)
    with open(tmp / "problems.jsonl", "w", encoding="utf-8") as f:
        for path, key, reason in problems:
            f.write(json.dumps({"path": path, "key": key, "reason": reason}) + "\n")
    info = {
        "format": FORMAT,
        "version": 2,  # 3 only where the shard list is arrays (the caller's info says so)
        "created_by": f"fpipe {__version__}",
        **info,
        "problems": len(problems),
    }
    with open(tmp / "info.yaml", "w", encoding="utf-8") as f:
        yaml.safe_dump(info, f, sort_keys=False, allow_unicode=True)
    for keep in ("dataset.yaml", "split.yaml"):
        if (out / keep).exists():
            shutil.copy2(out / keep, tmp / keep)
    old = beside(out, "old")
    if out.exists():
        out.rename(old)
    tmp.rename(out)
    if old.exists():
        shutil.rmtree(old)


def write_index(
    out: str | Path, data: IndexData, info_extra: dict[str, Any], compact: bool = True
) -> None:
    """Write ``data`` as an index folder at ``out``, replacing any previous one atomically:
    in the compact layout (format 4, :mod:`.compact`), or the flat one (``compact=False``:
    formats 2 and 3, which older fpipe versions read)."""
    extra: dict[str, Any] = {}
    if compact:
        files, layout = compact_files(data)
        extra = {"compact": msgspec.to_builtins(layout)}
    else:
        files = {
            "shard_id.npy": np.asarray(data.shard_id, np.int32),
            "keys.npy": np.asarray(data.keys, np.uint8),
            "keys.offsets.npy": np.asarray(data.key_offsets, np.int64),
        }
        files.update(member_files(data.members))
        for name, arr in data.columns.items():
            files[f"columns/{name}.npy"] = arr
    # many shards: arrays, not a YAML list every rank parses (format 3); else the readable list
    if len(data.shards) >= SHARD_ARRAYS_FROM:
        files.update(shard_table_files(data.shards))
        shards: dict[str, Any] = {"version": 3, "num_shards": len(data.shards)}
    else:
        shards = {"version": 2, "shards": data.shards}
    if compact:
        shards["version"] = 4
    info = {
        "kind": "webdataset",
        "num_samples": int(len(data.shard_id)),
        **shards,
        "members": list(data.members.exts),
        "num_members": int(len(data.members.ext)),
        "columns": {k: str(v.dtype) for k, v in data.columns.items()},
        "shard_errors": int(data.shard_errors),
        **extra,
        **info_extra,
    }
    write_folder(out, files, info, data.problems)


def read_info(index_dir: str | Path, data: bytes | None = None) -> dict[str, Any]:
    """Parse and check ``info.yaml`` of an index folder (``data``: its bytes, read already)."""
    path = Path(index_dir) / "info.yaml"
    try:
        info = load_yaml_file(path, data)  # the value prepare recorded for these bytes, or parsed
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: cannot read index info: {e}") from None
    if not isinstance(info, dict) or info.get("format") != FORMAT:
        raise ConfigError(f"{path}: not an fpipe index")
    version = info.get("version", VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ConfigError(
            f"{path}: bad index info: version must be an integer from 1 to {VERSION}, got "
            f"{version!r}; re-run `fpipe prepare`"
        )
    if version > VERSION:
        raise ConfigError(
            f"{path}: index version {version} is newer than this fpipe reads "
            f"({VERSION}); upgrade fpipe or re-run `fpipe prepare`"
        )
    _check_member_names(info.get("members"), path)
    return info


def _check_member_names(members: Any, path: Path) -> None:
    """``members`` lists extensions: each one a name (``jpg``, ``seg.png``), never a path.
    They name tar members (``<key>.<ext>``) and, in a version 1 index, the files
    ``members/<ext>.offset.npy``: a path separator (``../../x``) would read outside the index
    folder."""
    if members is None:
        return
    if not isinstance(members, list):
        raise ConfigError(f"{path}: bad index info: members must be a list of extensions")
    for ext in members:
        if not isinstance(ext, str) or not ext or any(c in ext for c in "/\\\0"):
            raise ConfigError(
                f"{path}: bad index info: members entry {ext!r} is not a member extension "
                "(a name like 'jpg' or 'seg.png', without '/' or '\\'); re-run `fpipe prepare`"
            )


def read_index_data(index_dir: str | Path) -> IndexData:
    """Load a whole index folder into memory (used by ``--merge``)."""
    d = Path(index_dir)
    info = read_info(d)
    if int(info.get("version", 0)) < 2:
        raise ConfigError(
            f"{d}: part written by an older fpipe (index format version {info.get('version')}); "
            "run its `fpipe prepare DIR --part i/n` again before merging"
        )
    if "compact" in info:  # parts are written flat (prepare.shards.write_part)
        raise ConfigError(
            f"{d}: a compact index (format 4), not a part of a `fpipe prepare DIR --part i/n` "
            "run; run its `fpipe prepare DIR --part i/n` again before merging"
        )
    problems = []
    with open(d / "problems.jsonl", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                o = json.loads(line)
                problems.append((o["path"], o["key"], o["reason"]))
    if "num_shards" in info:
        table = ShardTable(d, int(info["num_shards"]))
        shards = [msgspec.structs.asdict(e) for e in table]
    else:
        shards = list(info["shards"])
    return IndexData(
        shards=shards,
        shard_id=load_array(d / "shard_id.npy", mmap=False),
        keys=load_array(d / "keys.npy", mmap=False),
        key_offsets=load_array(d / "keys.offsets.npy", mmap=False),
        members=MemberTable(
            exts=list(info["members"]),
            **{
                name: load_array(d / "members" / f"{name}.npy", mmap=False)
                for name in ("start", "ext", "offset", "size")
            },
        ),
        columns={c: load_array(d / "columns" / f"{c}.npy", mmap=False) for c in info["columns"]},
        problems=problems,
        shard_errors=int(info.get("shard_errors", 0)),
    )
