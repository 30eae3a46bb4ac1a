"""Index one shard: member offsets plus metadata columns, without decoding payloads.

:func:`scan_shard` is a top-level, spawn-safe function (its arguments and result are plain
data), run once per shard by ``fpipe prepare``, in worker processes when ``workers > 1``.

Columns it computes, per sample (``-1`` where a value does not apply):

- ``bytes``: bytes of all members of the sample;
- ``<field>.bytes`` for every field of the field map (every extension when there is none;
  :func:`~fpipe.storage.prepare.shards.scan_shards` then keeps the columns of the most frequent
  extensions only, see ``MAX_EXTENSION_FIELDS``);
- ``<field>.width`` / ``<field>.height`` for image fields, from the header only;
- ``<field>.chars`` for text fields and string-valued ``json[...]`` fields;
- for audio/video fields (``mp4``, ``webm``, ``wav``...; ``probe_av``, on by default): the
  stream metadata columns and keyframe times of :mod:`fpipe.storage.read.av_meta` (one demux pass
  per file, no decoding);
- user columns (``NAME=json[path]``, ``NAME=len(json[path])``, or a ``module:function``),
  stored as float64 (NaN when missing) or int64 when every value is an integer.

A sample whose required field is missing, whose image header is unreadable, whose gzip member
or JSON is corrupt, that has two members with one extension, or that has a link member (a
symbolic or hard link, never followed), is left out and reported.
"""

from __future__ import annotations

import codecs
import importlib
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import numpy as np

from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.decode.extensions import GZ, ext_kind, is_gz, strip_gz
from fpipe.decode.limits import DEFAULT_LIMITS, DecodeLimits, gunzip_chunks
from fpipe.samples.field_spec import ColumnSpec, FieldSpec, parse_field_spec
from fpipe.storage.paths import PathEscapeError
from fpipe.storage.prepare._image_header import HEADER_PREFIX, image_size, parse_image_size
from fpipe.storage.read import av_meta
from fpipe.storage.read.members import MemberTable, build_members
from fpipe.storage.read.reader import gunzip_member
from fpipe.storage.read.remote import StorageOptions
from fpipe.storage.read.webdataset import (
    ShardError,
    iter_samples,
    open_shard,
    shard_stem,
    split_name,
)

__all__ = [
    "ScanOptions",
    "ShardScan",
    "SparseColumn",
    "dense_column",
    "load_function",
    "path_number",
    "scan_shard",
]

#: a column of one shard as (sample indices having a value, their values)
SparseColumn = tuple[np.ndarray, np.ndarray]

_json_decode = msgspec.json.decode


class ScanOptions(msgspec.Struct, frozen=True, kw_only=True):
    """What to compute for every shard (plain data, sent to worker processes)."""

    field_map: dict[str, str | list[str]] = msgspec.field(default_factory=dict)
    columns: tuple[ColumnSpec, ...] = ()
    extra_columns_fn: str | None = None  #: "module:function" called with the member dict
    probe_av: bool = True  #: probe audio/video members: stream metadata and keyframes
    storage: StorageOptions | None = None  #: how to reach shards given by URL
    #: ``max_inflated_bytes`` bounds every ``.gz`` member inflated (over it: left out)
    limits: DecodeLimits = DEFAULT_LIMITS


class ShardScan(msgspec.Struct, kw_only=True):
    """Index of one shard, as returned by :func:`scan_shard`."""

    name: str  #: shard path relative to the dataset folder
    keys: list[str]  #: member keys of the kept samples
    members: MemberTable  #: where each kept sample's members lie
    #: metadata columns: the samples having a value and the values (see :func:`dense_column`)
    columns: dict[str, SparseColumn]
    user_columns: list[str] = msgspec.field(default_factory=list)  #: user-named columns found
    problems: list[tuple[str, str, str]]  #: (shard, key, reason) of left-out samples
    shard_error: str | None = None  #: why the shard could not be read to its end
    size: int = -1  #: shard size in bytes when read (-1: unknown, e.g. gzip)
    #: audio/video fields: field -> (keyframe times concatenated, offsets (n+1,))
    keyframes: dict[str, tuple[np.ndarray, np.ndarray]] = msgspec.field(default_factory=dict)


def load_function(ref: str | Callable) -> Callable:
    """Import ``"package.module:function"`` (or return a callable as is)."""
    if callable(ref):
        return ref
    mod, sep, fn = str(ref).partition(":")
    if not sep or not mod or not fn:
        raise ConfigError(f"bad function {ref!r}: use 'package.module:function'")
    try:
        return getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"cannot import {ref!r}: {e}") from None


class _Bad(Exception):
    pass


def _unzip(ext: str, data: bytes, limits: DecodeLimits) -> bytes:
    if not is_gz(ext):
        return data
    try:
        return gunzip_member("", "", ext, data, limits)
    except BadSampleError as e:
        raise _Bad(e.reason) from None


def _unzip_chunks(ext: str, data: bytes, limits: DecodeLimits) -> Iterator[bytes]:
    """:func:`_unzip` one chunk at a time (a ``.gz`` member is never held inflated whole)."""
    if not is_gz(ext):
        yield data
        return
    try:
        yield from gunzip_chunks(data, limits.max_inflated_bytes)
    except (OSError, EOFError, zlib.error, ValueError, MemoryError) as e:
        raise _Bad(f"corrupt gzip member {ext!r}: {type(e).__name__}: {e}") from None


def _access(value: Any, path: tuple[str, ...]) -> Any:
    for p in path:
        if isinstance(value, dict):
            value = value[p]
        elif isinstance(value, list):
            value = value[int(p)]
        else:
            raise KeyError(p)
    return value


class _Sample:
    """Lazy view of one raw sample: member bytes, decompressed and JSON-decoded on demand."""

    __slots__ = ("exts", "content", "_f", "_offs", "_sizes", "_json", "_limits")

    def __init__(self, f, exts, offs, sizes, content, limits: DecodeLimits = DEFAULT_LIMITS):
        self.exts, self.content, self._json = exts, content, {}
        self._f, self._offs, self._sizes = f, offs, sizes
        self._limits = limits

    def full(self, ext: str) -> bytes:
        """All bytes of member ``ext`` (read from the shard unless the walk read them)."""
        i = self.exts.index(ext)
        data = self.content.get(ext)
        if data is None or len(data) < self._sizes[i]:
            self._f.seek(self._offs[i])
            data = self._f.read(self._sizes[i])
            if len(data) < self._sizes[i]:
                raise _Bad(f"member {ext!r} is truncated")
            self.content[ext] = data
        return data

    def data(self, ext: str) -> bytes:
        return _unzip(ext, self.full(ext), self._limits)

    def chars(self, ext: str) -> int:
        """Characters of text member ``ext`` (UTF-8, bad bytes counted as one each), counted
        as it inflates: a ``.gz`` member costs one chunk of memory, not its inflated size."""
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        n = sum(len(decoder.decode(c)) for c in _unzip_chunks(ext, self.full(ext), self._limits))
        return n + len(decoder.decode(b"", final=True))

    def size(self, ext: str) -> int:
        """Bytes of member ``ext`` once inflated, counted as :meth:`chars` counts."""
        return sum(len(c) for c in _unzip_chunks(ext, self.full(ext), self._limits))

    def json(self, ext: str) -> Any:
        if ext not in self._json:
            try:
                self._json[ext] = _json_decode(self.data(ext))
            except msgspec.DecodeError as e:
                raise _Bad(f"member {ext!r} is not valid JSON: {e}") from None
        return self._json[ext]

    def resolve(self, alternatives: tuple[FieldSpec, ...]) -> tuple[str, Any] | None:
        """(ext, value) of the first alternative present; value is None for raw members."""
        exts = self.exts
        for alt in alternatives:
            ext = alt.ext
            if ext not in exts:
                ext += GZ
                if ext not in exts:
                    continue
            if not alt.path:
                return ext, None
            try:
                return ext, _access(self.json(ext), alt.path)
            except (KeyError, IndexError, ValueError, TypeError):
                continue
        return None


def _number(v: Any) -> float | int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, float)):
        return v
    return None


def path_number(value: Any, path: tuple[str, ...], length: bool) -> float | int | None:
    """What a ``--column`` source gives for a decoded JSON value (a JSON member's document,
    JSON text of a Parquet column, a table's cell): the number at ``path`` in it (booleans
    0/1), or with ``length`` the ``len()`` of what is there; None when the path leads nowhere
    or to no number (the next alternative is tried)."""
    try:
        v = _access(value, path)
    except (KeyError, IndexError, ValueError, TypeError):
        return None
    return _number(len(v) if length and hasattr(v, "__len__") else v)


def _row(
    s: _Sample, sizes: list[int], opts: ScanOptions, fields, extra, user: set[str]
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(metadata columns, keyframe times by audio/video field) of one sample; raises _Bad with
    the reason to leave it out."""
    exts = s.exts
    if len(exts) != len(set(exts)):
        dup = sorted({e for e in exts if exts.count(e) > 1})
        raise _Bad(f"duplicate members with extension(s) {dup}")
    row: dict[str, Any] = {"bytes": sum(sizes)}
    keyframes: dict[str, np.ndarray] = {}
    if fields is not None:
        items = fields
    else:  # crude: one field per extension, named without a .gz suffix
        bases = dict.fromkeys(strip_gz(e) for e in exts)
        items = [(b, (FieldSpec(b),), b) for b in bases]
    for fname, alts, spec in items:
        found = s.resolve(alts)
        if found is None:
            raise _Bad(f"missing field {fname!r} ({spec})")
        ext, value = found
        row[f"{fname}.bytes"] = sizes[exts.index(ext)]
        kind = ext_kind(ext)
        if value is not None:
            if isinstance(value, str):
                row[f"{fname}.chars"] = len(value)
        elif kind == "image":
            prefix = s.content.get(ext, b"")
            size = parse_image_size(prefix) if not is_gz(ext) else None
            if size is None:
                try:
                    size = image_size(s.data(ext))
                except ValueError as e:
                    raise _Bad(f"member {ext!r}: {e}") from None
            row[f"{fname}.width"], row[f"{fname}.height"] = int(size[0]), int(size[1])
        elif kind == "text":
            row[f"{fname}.chars"] = s.chars(ext)
        elif kind == "av" and opts.probe_av:
            try:
                stats, keyframes[fname] = av_meta.probe_stats(s.data(ext), fname, key=ext)
            except BadSampleError as e:
                raise _Bad(f"member {ext!r}: {e.reason}") from None
            row.update(stats)
    for col in opts.columns:
        found = s.resolve(col.alternatives)
        v = None
        if found is not None and found[1] is not None:
            v = len(found[1]) if col.length and hasattr(found[1], "__len__") else found[1]
        elif found is not None and col.length:
            v = s.size(found[0])
        row[col.name] = _number(v)
    if extra is not None:
        raw = {strip_gz(e): s.data(e) for e in exts}
        try:
            out = extra(raw)
        except Exception as e:  # noqa: BLE001 - user code: report, leave the sample out
            raise _Bad(f"extra column function failed: {type(e).__name__}: {e}") from None
        for name, v in dict(out).items():
            user.add(str(name))
            row[str(name)] = _number(v)
    return row, keyframes


def _read_plan(opts: ScanOptions, fields) -> Callable[[str], int]:
    if opts.extra_columns_fn:
        return lambda ext: -1
    json_exts: set[str] = set()
    field_exts: set[str] = set()
    for _, alts, _ in fields or ():
        for a in alts:
            (json_exts if a.path else field_exts).update((a.ext, a.ext + GZ))
    for col in opts.columns:
        for a in col.alternatives:
            json_exts.update((a.ext, a.ext + GZ))

    def plan(ext: str) -> int:
        if ext in json_exts:
            return -1
        if fields is not None and ext not in field_exts:
            return 0
        kind = ext_kind(ext)
        if kind == "image":
            return -1 if is_gz(ext) else HEADER_PREFIX
        return -1 if kind == "text" else 0

    return plan


def _columns(rows: list[dict[str, Any]], user: set[str]) -> dict[str, SparseColumn]:
    """Columns of ``rows`` in sparse form: O(values), whatever the number of column names
    (a shard whose samples have distinct extensions has as many names as samples)."""
    idx: dict[str, list[int]] = {}
    vals: dict[str, list[Any]] = {}
    for i, r in enumerate(rows):
        for name, v in r.items():
            if name not in idx:
                idx[name], vals[name] = [], []
            if v is not None:
                idx[name].append(i)
                vals[name].append(v)
    out = {}
    for name, values in vals.items():
        if name in user:  # int64 when every sample has an integer, else float64 with NaN
            whole = len(values) == len(rows) and all(isinstance(v, int) for v in values)
            dtype = np.int64 if whole else np.float64
        else:  # audio/video float statistics, else int64 with -1 where absent
            dtype = np.float64 if av_meta.is_float_column(name) else np.int64
        out[name] = (np.asarray(idx[name], np.int64), np.asarray(values, dtype))
    return out


def dense_column(n: int, column: SparseColumn) -> np.ndarray:
    """The ``(n,)`` array of a sparse column: -1 (int64) or NaN (float64) where absent."""
    idx, values = column
    out = np.full(n, np.nan if values.dtype.kind == "f" else -1, values.dtype)
    out[idx] = values
    return out


def scan_shard(root: str, name: str, opts: ScanOptions) -> ShardScan:
    """Walk one shard (``root/name``) and return its index; never raises for bad data."""
    stem = shard_stem(name)
    fields = None
    if opts.field_map:
        fields = [(f, parse_field_spec(s), s) for f, s in opts.field_map.items()]
    extra = load_function(opts.extra_columns_fn) if opts.extra_columns_fn else None
    user = {c.name for c in opts.columns}
    keys: list[str] = []
    rows: list[dict[str, Any]] = []
    placed: list[tuple[list[str], list[int], list[int]]] = []
    keyframes = av_meta.KeyframeBuilder()
    problems: list[tuple[str, str, str]] = []
    shard_error = None
    try:
        f, file_size = open_shard(root, name, opts.storage)
    except (OSError, PathEscapeError) as e:
        return ShardScan(
            name=name,
            keys=[],
            members=build_members([]),
            columns={},
            problems=[(name, "", f"cannot open shard: {e}")],
            shard_error=str(e),
        )
    linked: set[str] = set()  # keys of samples with a link member: refused

    def on_link(member: str, target: str) -> None:
        parts = split_name(member)
        key = parts[0] if parts else member
        if key not in linked:
            linked.add(key)
            problems.append(
                (
                    name,
                    f"{stem}/{key}",
                    f"member {member!r} is a link to {target!r}; links in shards are never "
                    "followed (write the file itself into the shard)",
                )
            )

    with f:
        try:
            for key, exts, offs, sizes, content in iter_samples(
                f, file_size, _read_plan(opts, fields), on_link
            ):
                if key in linked:
                    continue
                s = _Sample(f, exts, offs, sizes, content, opts.limits)
                try:
                    row, kf = _row(s, sizes, opts, fields, extra, user)
                except (_Bad, OSError, EOFError) as e:
                    problems.append((name, f"{stem}/{key}", str(e)))
                    continue
                keys.append(key)
                keyframes.add(kf)
                rows.append(row)
                placed.append((exts, offs, sizes))
        except ShardError as e:
            shard_error = e.reason
            problems.append((name, f"{stem}/{e.key}" if e.key else "", e.reason))
    return ShardScan(
        name=name,
        keys=keys,
        members=build_members(placed),
        columns=_columns(rows, user),
        user_columns=sorted(user),
        problems=problems,
        shard_error=shard_error,
        keyframes=keyframes.build(),
        size=-1 if file_size is None else int(file_size),
    )
