"""Records of ``fpipe prepare``: its checked options, what it reports, a left-out sample.

:func:`make_options` turns the arguments of :func:`fpipe.storage.prepare.prepare_dataset` into
a frozen :class:`PrepareOptions`, raising :class:`~fpipe.core.errors.ConfigError` for anything
malformed before any file is read.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgspec

from fpipe.core.errors import ConfigError
from fpipe.samples.field_spec import ColumnSpec, field_spec_value, parse_column
from fpipe.storage.config.dataset_yaml import SplitConfig
from fpipe.storage.read.remote import StorageOptions

__all__ = [
    "FieldMapValue",
    "PrepareOptions",
    "PrepareReport",
    "Problem",
    "make_options",
    "user_sample_type",
]

#: a field map as dataset.yaml stores it: field -> source, or a list of alternatives.
FieldMapValue = dict[str, "str | list[str]"]


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
    kind: str  #: "webdataset" | "table" | "parquet"
    source: str  #: "webdataset" | "energon" | "table" | "parquet" | "arrow"
    num_samples: int  #: samples in the index
    num_shards: int  #: shards indexed
    problems: tuple[Problem, ...]  #: left-out samples and unreadable shard tails
    columns: tuple[str, ...]  #: metadata columns written
    members: tuple[str, ...]  #: member extensions seen
    splits: dict[str, int]  #: split name -> shards (empty for parts)
    elapsed_s: float  #: wall time
    part: tuple[int, int] | None = None  #: (i, n) when this was one part
    sample_type: str = ""  #: sample type written to dataset.yaml ("" for a part)
    field_map: dict[str, str | list[str]] = msgspec.field(default_factory=dict)  #: written too

    @property
    def samples_per_s(self) -> float:
        """Indexing throughput."""
        return self.num_samples / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def problems_file(self) -> str:
        """The file listing every left-out sample, one JSON object (path, key, reason) a
        line: ``problems.jsonl`` in :attr:`index_dir`."""
        return f"{self.index_dir.rstrip('/')}/problems.jsonl"

    def left_out_summary(self, examples: int = 3) -> str:
        """One line on what was left out: how many, counted by reason, the first
        ``examples`` samples (shard and key) and where all of them are listed; "" when
        nothing was.

        Example: ``left out 10 samples (missing field 'caption' (txt): 10), first
        shard-0.tar: shard-0/0000, shard-0.tar: shard-0/0003; all of them (shard, key,
        reason) in data/.fpipe/problems.jsonl``
        """
        if not self.problems:
            return ""
        counts: dict[str, int] = {}
        for p in self.problems:
            kind = p.reason.split(": ", 1)[0]
            counts[kind] = counts.get(kind, 0) + 1
        by_reason = ", ".join(f"{k}: {n}" for k, n in sorted(counts.items(), key=lambda x: -x[1]))
        first = ", ".join(f"{p.path}: {p.key or '(shard)'}" for p in self.problems[:examples])
        n = len(self.problems)
        return (
            f"left out {n} sample{'s' if n != 1 else ''} ({by_reason}), first {first}; all of "
            f"them (shard, key, reason) in {self.problems_file}"
        )


class PrepareOptions(msgspec.Struct, frozen=True, kw_only=True):
    """The checked options of one ``prepare_dataset`` call (see its docstring)."""

    fields: FieldMapValue | None = None  #: field map; None: keep the existing one
    split: Any = None  #: ratios text, {split: shard globs}, a SplitConfig, or None
    sample_type: str | None = None  #: None: existing, else guessed from the field names
    workers: int = 1  #: processes scanning shards
    part: tuple[int, int] | None = None  #: (i, n): index only slice i of n
    merge: bool = False  #: combine the parts of a ``part`` run
    columns: tuple[ColumnSpec, ...] = ()  #: user columns from JSON members
    extra_columns_fn: str | None = None  #: "module:function" computing more columns
    progress: bool = False  #: progress bar on stderr
    shards: tuple[str, ...] = ()  #: shard patterns; empty: all shards
    exclude: tuple[str, ...] = ()  #: split.yaml exclude entries to add
    split_seed: int | None = None  #: shuffle shards before splitting by ratio
    subflavors: dict[str, Any] | None = None  #: None: keep the existing ones
    root: str | None = None  #: tables: media folder
    media_columns: tuple[str, ...] | None = None  #: tables: media columns (None: guessed)
    aux: str | None = None  #: tables: prepared tar dataset holding media
    probe_av: bool = True  #: probe audio/video members for stream metadata and keyframes
    index_dir: str | None = None  #: URL datasets: local folder for the index (else the bucket)
    storage: StorageOptions | None = None  #: URL datasets: how to reach the bucket
    #: tar datasets: the compact index layout (format 4, for indexes too large to keep flat);
    #: False (the default): the flat one (format 2 / 3), faster to read per sample
    compact_index: bool = False


def _field_map(fields: Mapping[str, Any] | Iterable[str] | None) -> FieldMapValue | None:
    """``{"image": "jpg,png"}``, ``{"image": ["jpg", "png"]}`` or ``["image=jpg,png"]`` ->
    ``{"image": ["jpg", "png"]}`` (one source stays a string)."""
    if fields is None:
        return None
    if isinstance(fields, Mapping):
        items = [(str(k), v) for k, v in fields.items()]
    else:
        items = []
        for item in fields:
            if "=" not in item:
                raise ConfigError(f"bad field {item!r}: use NAME=SPEC, e.g. image=jpg")
            k, v = item.split("=", 1)
            items.append((k.strip(), v.strip()))
    out = {}
    for k, v in items:
        try:
            out[k] = field_spec_value(v)
        except ConfigError as e:
            raise ConfigError(f"field {k!r}: {e}") from None
    return out


def _part(part: tuple[int, int] | str | None) -> tuple[int, int] | None:
    if isinstance(part, str):
        try:
            i, n = (int(x) for x in part.split("/"))
        except ValueError:
            raise ConfigError(f"bad part {part!r}: use i/n with 0 <= i < n, e.g. 0/8") from None
        part = (i, n)
    if part is not None and not 0 <= part[0] < part[1]:
        raise ConfigError(f"bad part {part[0]}/{part[1]}: need 0 <= i < n")
    return None if part is None else (int(part[0]), int(part[1]))


def _callable_ref(fn: str | Callable | None) -> str | None:
    if fn is None or isinstance(fn, str):
        return fn
    mod, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not mod or "." in name or "<" in name:
        raise ConfigError(
            f"extra_columns_fn {fn!r} must be a top-level function (it is imported by name in "
            "worker processes); or pass 'module:function'"
        )
    return f"{mod}:{name}"


def user_sample_type(ref: str | type) -> str:
    """The dataset.yaml name of the user's own sample type, given as the class or as
    ``"package.module:Class"``, registered (:func:`fpipe.samples.register_sample_type`) so
    the field map is checked against it: ``"package.module.Class"``.

    The module is imported here: naming it (on the command line or in this call) is the
    caller's choice. A class named inside dataset.yaml is never imported; the training code
    registers it (see ``docs/samples.md``).
    """
    from fpipe.samples import register_sample_type

    if isinstance(ref, str):
        mod, _, name = ref.partition(":")
        if not mod or not name:
            raise ConfigError(f"sample type {ref!r}: use 'package.module:Class'")
        try:
            cls: Any = importlib.import_module(mod)
            for part in name.split("."):
                cls = getattr(cls, part)
        except (ImportError, AttributeError) as e:
            raise ConfigError(
                f"sample type {ref!r}: cannot import it: {e} (is {mod!r} importable from here? "
                f"e.g. PYTHONPATH=. fpipe prepare ... when {mod.replace('.', '/')}.py is in "
                "this folder)"
            ) from None
    else:
        cls = ref
    try:
        register_sample_type(cls)
    except TypeError as e:
        raise ConfigError(f"sample type {ref!r}: {e}") from None
    return f"{cls.__module__}.{cls.__qualname__}"


def make_options(
    *,
    fields: Mapping[str, str] | Iterable[str] | None = None,
    split: str | Mapping[str, Any] | SplitConfig | None = None,
    sample_type: str | type | None = None,
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
    index_dir: str | os.PathLike | None = None,
    storage: StorageOptions | Mapping[str, Any] | None = None,
    compact_index: bool = False,
) -> PrepareOptions:
    """Check and normalize the arguments of ``prepare_dataset`` (same names and meanings)."""
    opts = PrepareOptions(
        fields=_field_map(fields),
        split=split,
        sample_type=user_sample_type(sample_type)
        if isinstance(sample_type, type) or (isinstance(sample_type, str) and ":" in sample_type)
        else sample_type,
        workers=int(workers),
        part=_part(part),
        merge=bool(merge),
        columns=tuple(parse_column(c) for c in columns),
        extra_columns_fn=_callable_ref(extra_columns_fn),
        progress=bool(progress),
        shards=tuple(shards),
        exclude=tuple(exclude),
        split_seed=split_seed,
        subflavors=None if subflavors is None else dict(subflavors),
        root=None if root is None else str(root),
        media_columns=None if media_columns is None else tuple(media_columns),
        aux=None if aux is None else str(aux),
        probe_av=bool(probe_av),
        index_dir=None if index_dir is None else str(index_dir),
        storage=storage
        if storage is None or isinstance(storage, StorageOptions)
        else StorageOptions(**storage),
        compact_index=bool(compact_index),
    )
    if opts.part is not None and opts.merge:
        raise ConfigError("use either part (index one slice) or merge (combine slices)")
    return opts
