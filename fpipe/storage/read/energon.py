"""Megatron-Energon datasets: the ``"energon"`` layout, read as ``energon prepare`` wrote it.

What is read (see ``docs/energon_migration.md``):

- ``.nv-meta/dataset.yaml``: ``sample_type`` (``__class__`` name), ``field_map``,
  ``subflavors``; ``sample_loader`` / ``part_filter`` are recorded, never executed; a crude
  dataset (``__class__: CrudeWebdataset``) has no sample type;
- ``.nv-meta/split.yaml``: ``split_parts`` (shard names, brace ranges such as
  ``part-{00000..00007}.tar`` expanded) and ``exclude``;
- ``.nv-meta/.info.yaml`` (or ``.info.json``): ``shard_counts`` (shard name -> samples);
- ``<shard>.tar.idx`` next to each shard: little-endian uint64 byte offsets of the first tar
  header of every sample, plus one final offset (the end of the last sample).

Nothing under ``.nv-meta`` or next to the shards is written.
"""

from __future__ import annotations

import io
import json
import os
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.decode.limits import DecodeLimits
from fpipe.storage.config.dataset_yaml import (
    DatasetConfig,
    SplitConfig,
    dataset_config_from_obj,
    split_config_from_obj,
)
from fpipe.storage.config.safe_yaml import safe_load
from fpipe.storage.read.reader import FileCache, members_to_dict, read_each
from fpipe.storage.read.record import ArrayStore, IndexRecord, ShardEntry
from fpipe.storage.read.webdataset import (
    ShardError,
    iter_samples,
    open_shard,
    shard_stem,
    split_name,
)

__all__ = [
    "EnergonMeta",
    "EnergonReader",
    "energon_arrays",
    "energon_record",
    "exclude_to_keys",
    "exclude_to_keys_by_walk",
    "has_shard_counts",
    "is_energon",
    "read_energon_meta",
    "read_energon_yaml",
    "walk_energon_meta",
]

META_DIR = ".nv-meta"
IDX_SUFFIX = ".idx"  # "<shard>.tar" -> "<shard>.tar.idx"


def is_energon(root: str | Path) -> bool:
    """True if ``root`` has an Energon ``.nv-meta`` folder."""
    return (Path(root) / META_DIR).is_dir()


class EnergonMeta:
    """The parts of ``.nv-meta`` fpipe uses."""

    def __init__(self, config: DatasetConfig, split: SplitConfig | None, counts: dict[str, int]):
        self.config = config  #: parsed dataset.yaml
        self.split = split  #: parsed split.yaml (braces expanded), None if absent
        self.shard_counts = counts  #: shard name -> sample count, in file order


def _load(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f) if path.suffix == ".json" else safe_load(f)
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: cannot read: {e}") from None


def _first(meta: Path, names: tuple[str, ...]) -> Path | None:
    return next((meta / n for n in names if (meta / n).exists()), None)


def read_energon_yaml(root: str | Path) -> tuple[DatasetConfig, SplitConfig | None]:
    """``dataset.yaml`` and ``split.yaml`` of ``.nv-meta`` (a default config and no split when
    absent): all that a folder holds before ``energon prepare`` wrote ``.info.yaml``, the
    layout Energon's guide shows."""
    meta = Path(root) / META_DIR
    ds_yaml = meta / "dataset.yaml"
    config = (
        dataset_config_from_obj(_load(ds_yaml), str(ds_yaml)) if ds_yaml.exists() else None
    ) or DatasetConfig()
    split_path = _first(meta, ("split.yaml", "split.json"))
    split = None if split_path is None else split_config_from_obj(_load(split_path), split_path)
    return config, split


def has_shard_counts(root: str | Path) -> bool:
    """True if ``.nv-meta`` has the ``.info.yaml`` (or ``.info.json``) of ``energon prepare``:
    the folder can be read without ``fpipe prepare``."""
    return _first(Path(root) / META_DIR, _INFO_NAMES) is not None


_INFO_NAMES = (".info.yaml", ".info.json")


def read_energon_meta(root: str | Path) -> EnergonMeta:
    """Parse ``.nv-meta`` of an Energon WebDataset folder.

    Raises:
      ConfigError: no ``.info.yaml``; the message gives the ``fpipe prepare`` command that
        indexes the folder (reading its ``dataset.yaml`` and ``split.yaml`` as they are).
    """
    meta = Path(root) / META_DIR
    config, split = read_energon_yaml(root)
    info_path = _first(meta, _INFO_NAMES)
    if info_path is None:
        have = ", ".join(sorted(p.name for p in meta.iterdir())) or "nothing"
        raise ConfigError(
            f"{meta}: holds {have} but no .info.yaml (the shard counts `energon prepare` "
            f"writes); index the shards once with `fpipe prepare {shlex.quote(str(root))}`: it "
            f"reads .nv-meta/dataset.yaml and split.yaml as they are (nothing in .nv-meta is "
            f"changed) and writes {Path(root) / '.fpipe'}, which is opened from then on"
        )
    info = _load(info_path) or {}
    counts = info.get("shard_counts") if isinstance(info, dict) else None
    if not isinstance(counts, dict):
        raise ConfigError(f"{info_path}: no shard_counts mapping")
    return EnergonMeta(config, split, {str(k): int(v) for k, v in counts.items()})


def energon_record(meta: EnergonMeta) -> IndexRecord:
    """The index record of an Energon folder: its shards and counts, a ``bytes`` column."""
    shards = tuple(ShardEntry(name, n) for name, n in meta.shard_counts.items())
    return IndexRecord(
        layout="energon",
        num_samples=sum(meta.shard_counts.values()),
        shards=shards,
        columns={"bytes": "int64"},
        source="energon",
    )


def _read_tar_idx(shard_path: str, count: int) -> np.ndarray:
    """Sample start offsets (count + 1 entries) from Energon's ``<shard>.tar.idx``."""
    path = shard_path + IDX_SUFFIX
    try:
        arr = np.fromfile(path, dtype="<u8").astype(np.int64)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read Energon tar index: {e}") from None
    if len(arr) != count + 1 or (len(arr) > 1 and np.any(np.diff(arr) <= 0)):
        raise ConfigError(
            f"{path}: has {len(arr)} offsets, .info says {count} samples (+1 end offset); "
            "the Energon index is stale: re-run `energon prepare` or `fpipe prepare`"
        )
    return arr


def energon_arrays(root: str, record: IndexRecord, offsets: dict[str, np.ndarray] | None = None):
    """``make(name)`` for :class:`~fpipe.storage.read.record.ArrayStore`: ``shard_id.npy`` from the
    counts, ``columns/bytes.npy`` from every ``.tar.idx``, ``idx/<shard id>`` offsets
    (``offsets``: shard name -> its offsets as :func:`walk_energon_meta` found them, for a
    folder without ``.tar.idx`` files)."""

    def make(name: str) -> np.ndarray:
        if name == "shard_id.npy":
            counts = [s.samples for s in record.shards]
            return np.repeat(np.arange(len(counts), dtype=np.int32), counts)
        if name.startswith("idx/"):
            s = record.shards[int(name[4:])]
            if offsets is not None:
                return offsets[s.name]
            return _read_tar_idx(os.path.join(root, s.name), s.samples)
        if name == "columns/bytes.npy":
            parts = [np.diff(make(f"idx/{s}")) for s in range(len(record.shards))]
            return np.concatenate(parts) if parts else np.zeros(0, np.int64)
        raise KeyError(name)

    return make


def _walk_offsets(root: str | Path, name: str) -> np.ndarray:
    """The offsets Energon's ``<shard>.tar.idx`` holds for shard ``name`` (each sample's first
    tar header, then the end of its last member), found by reading its tar headers."""
    import tarfile

    f, _size = open_shard(str(root), name)
    offsets: list[int] = []
    last = None
    try:
        with f, tarfile.open(fileobj=f, mode="r:") as tf:
            for member in tf:
                parts = split_name(member.name)
                if parts is None or not member.isfile():
                    continue
                if parts[0] != last:
                    offsets.append(member.offset)
                    last = parts[0]
            offsets.append(tf.offset)
    except (OSError, tarfile.TarError) as e:
        raise ConfigError(
            f"{Path(root) / name}: cannot read the shard's tar headers: {e}"
        ) from None
    return np.asarray(offsets, dtype=np.int64)


def walk_energon_meta(root: str | Path) -> tuple[EnergonMeta, dict[str, np.ndarray]]:
    """The meta of a ``.nv-meta`` holding ``dataset.yaml`` and ``split.yaml`` but no
    ``.info.yaml`` (the layout Energon's guide shows), and each shard's sample offsets: the
    shards are those ``split.yaml`` names (every split part, in file order), counted by reading
    their tar headers now (nothing is written; each process that opens the folder reads them).

    Raises:
      ConfigError: no split file, or a shard that cannot be read or leads out of ``root``.
    """
    meta_dir = Path(root) / META_DIR
    config, split = read_energon_yaml(root)
    if split is None:
        have = ", ".join(sorted(p.name for p in meta_dir.iterdir())) or "nothing"
        raise ConfigError(
            f"{meta_dir}: holds {have} but neither split.yaml nor .info.yaml: fpipe cannot tell "
            f"which shards make each split; index the shards with "
            f"`fpipe prepare {shlex.quote(str(root))}` (or `energon prepare`)"
        )
    names = list(dict.fromkeys(n for part in split.split_parts.values() for n in part))
    offsets = {n: _walk_offsets(root, n) for n in names}
    counts = {n: len(o) - 1 for n, o in offsets.items()}
    return EnergonMeta(config, split, counts), offsets


class LinkMember(Exception):
    """A sample's range holds a link member (symbolic or hard), which is never followed."""

    def __init__(self, member: str, target: str):
        super().__init__(
            f"member {member!r} is a link to {target!r}; links in shards are never followed"
        )


def _refuse_link(member: str, target: str) -> None:
    raise LinkMember(member, target)


def parse_sample(buf: bytes) -> tuple[str, list[tuple[str, bytes]]]:
    """(key, [(ext, bytes)]) of the one sample a byte range of a tar file holds.

    Raises:
      ShardError: the range does not hold exactly one whole sample: no tar header at its
        start, a member cut at its end, or a second sample in it (a shard that no longer
        matches its ``.tar.idx``).
      LinkMember: a member of the sample is a link.
    """
    samples = iter_samples(io.BytesIO(buf), len(buf), lambda e: -1, _refuse_link)
    first = next(samples, None)
    if first is None:
        raise ShardError("no tar member in the sample's byte range")
    key, exts, _offs, _sizes, content = first
    try:
        extra = next(samples, None)
    except ShardError as e:  # the range ends after the sample: no end-of-archive marker in it
        if not e.reason.startswith("no end-of-archive marker"):
            raise
        extra = None
    if extra is not None:
        raise ShardError(f"a second sample ({extra[0]!r}) follows sample {key!r} in the range")
    return key, [(e, content[e]) for e in exts]


def _header_key(head: bytes) -> bytes | None:
    """The sample key of a tar member from its 512-byte header (``name`` field, with the
    POSIX ``prefix``), or None when the header is not a plain file's (long names, pax)."""
    if len(head) < 512 or head[156:157] not in (b"0", b"\0"):
        return None
    name = head[:100].split(b"\0", 1)[0]
    if head[257:263] == b"ustar\x00":
        prefix = head[345:500].split(b"\0", 1)[0]
        if prefix:
            name = prefix + b"/" + name
    parts = split_name(name.decode("utf-8", "surrogateescape"))
    return None if parts is None else parts[0].encode("utf-8", "surrogateescape")


class EnergonReader:
    """Raw members and keys of an Energon folder, through its ``.tar.idx`` sample offsets."""

    def __init__(self, path: str, record: IndexRecord, arrays, files: FileCache):
        self.path = path
        self._record = record
        self._array = arrays
        self._files = files
        self._starts = record.shard_starts()

    def _sample(self, i: int) -> tuple[str, str, list[tuple[str, bytes]]]:
        sid = int(np.searchsorted(self._starts, i, side="right") - 1)
        j = i - int(self._starts[sid])
        offs = self._array(f"idx/{sid}")
        lo, hi = int(offs[j]), int(offs[j + 1])
        name = self._record.shards[sid].name
        path = os.path.join(self.path, name)
        where = f"{shard_stem(name)}/#{j}"
        try:
            buf = self._files.pread(path, lo, hi - lo)
        except OSError as e:
            raise BadSampleError(path, where, f"read failed: {e}") from None
        if len(buf) < hi - lo:
            raise BadSampleError(path, where, f"shard truncated: bytes {lo}..{hi} not there")
        try:
            key, parts = parse_sample(buf)
        except LinkMember as e:
            raise BadSampleError(path, where, str(e)) from None
        except ShardError as e:
            raise BadSampleError(
                path,
                where,
                f"stale shard: bytes {lo}..{hi} of {name!r}, sample {j} by its {IDX_SUFFIX} "
                f"file: {e.reason}; the shard no longer matches its index (changed after "
                f"`energon prepare`): re-run `energon prepare {self.path}` (or `fpipe prepare`)",
            ) from None
        return path, f"{shard_stem(name)}/{key}", parts

    def byte_ranges(self, indices) -> list[tuple[str, int, int]]:
        """``(shard path, offset, size)`` of samples ``indices``: one range each (a sample's
        members are contiguous in its shard)."""
        out = []
        for i in indices:
            sid = int(np.searchsorted(self._starts, i, side="right") - 1)
            offs = self._array(f"idx/{sid}")
            j = int(i) - int(self._starts[sid])
            lo, hi = int(offs[j]), int(offs[j + 1])
            out.append((os.path.join(self.path, self._record.shards[sid].name), lo, hi - lo))
        return out

    def prefetch(self, indices, exts: frozenset[str] | None = None) -> None:
        """Start the ranged GETs of samples ``indices`` (object storage; a no-op on disk)."""
        fetch = getattr(self._files, "prefetch", None)
        if fetch is not None:
            fetch(self.byte_ranges(indices))

    def read_ahead(self, indices, exts: frozenset[str] | None = None):
        """``(files, ranges)`` of samples ``indices`` for a read-ahead window
        (:mod:`fpipe.storage.read.read_ahead`)."""
        return self._files, self.byte_ranges(indices)

    def key(self, i: int) -> str:
        """``"<shard stem>/<member key>"`` (reads the sample's tar headers)."""
        return self._sample(i)[1]

    def member_key(self, i: int) -> str:
        """The key of sample ``i`` inside its shard, from its first tar header (one 512-byte
        read; the whole sample when that header is not a plain file's, e.g. a long name)."""
        return self.member_keys(np.array([i]))[0].decode("utf-8", "surrogateescape")

    def member_keys(self, indices) -> np.ndarray:
        """:meth:`member_key` of samples ``indices`` as UTF-8 bytes (numpy ``S``)."""
        indices = np.asarray(indices, np.int64)
        sids = np.searchsorted(self._starts, indices, side="right") - 1
        out = []
        for i, sid in zip(indices.tolist(), sids.tolist()):
            name = self._record.shards[sid].name
            offs = self._array(f"idx/{sid}")
            lo = int(offs[i - int(self._starts[sid])])
            try:
                key = _header_key(self._files.pread(os.path.join(self.path, name), lo, 512))
            except OSError:
                key = None
            if key is None:  # not a plain ustar/GNU file header: parse the whole sample
                key = self._sample(i)[1][len(shard_stem(name)) + 1 :].encode(
                    "utf-8", "surrogateescape"
                )
            out.append(key)
        return np.array(out or [b""], dtype="S")[: len(out)]

    def read(
        self, i: int, exts: frozenset[str] | None = None, limits: DecodeLimits | None = None
    ) -> dict[str, bytes]:
        """Raw member bytes of sample ``i`` by extension (``.gz`` members decompressed within
        ``limits``). ``exts`` is ignored: the sample is one range of its shard, read whole."""
        path, key, parts = self._sample(i)
        return members_to_dict(path, lambda: key, parts, limits)

    def read_many(
        self, indices, exts: frozenset[str] | None = None, limits: DecodeLimits | None = None
    ) -> list[tuple]:
        """``(key, members)`` of each sample, each read once (:meth:`key` alone reads the
        sample's headers too); a failing sample holds its exception instead of members."""

        def read_one(i: int) -> tuple[str, dict[str, bytes]]:
            path, key, parts = self._sample(i)
            return key, members_to_dict(path, lambda: key, parts, limits)

        return read_each(indices.tolist() if hasattr(indices, "tolist") else indices, read_one)

    def av_names(self, field: str, i: int) -> tuple[str, ...]:
        """No stored audio/video metadata without an fpipe index."""
        return ()


def exclude_to_keys(root: str | Path, meta: EnergonMeta) -> list[str]:
    """Energon ``exclude`` entries with sample indices rewritten as sample keys
    (``"<shard>/<key in the shard>"``, as Energon reads it, becomes that key; a number that is
    no key of the shard is read as an index in it).

    fpipe's own index may leave bad samples out, so Energon's per-shard indices would point
    at other samples there; keys do not move.
    """
    if meta.split is None:
        return []
    record = energon_record(meta)
    reader = None
    starts = record.shard_starts()
    names = record.shard_names
    out = []
    for entry in meta.split.exclude:
        head, _, tail = entry.rpartition("/")
        if head in meta.shard_counts and tail.isdigit():
            if reader is None:
                arrays = ArrayStore(make=energon_arrays(str(root), record))
                reader = EnergonReader(str(root), record, arrays, FileCache(4))
            try:
                start = int(starts[names.index(head)])
                shard_keys = [reader.key(start + i) for i in range(meta.shard_counts[head])]
                key = f"{shard_stem(head)}/{tail}"
                j = int(tail)
                if key in shard_keys:  # Energon reads the entry as a key of the shard
                    out.append(key)
                elif j < len(shard_keys):
                    out.append(shard_keys[j])
                else:
                    raise IndexError(j)
            except (BadSampleError, IndexError, ConfigError):
                out.append(entry)
        else:
            out.append(entry)
    return out


def _walk_keys(root: str | Path, name: str) -> list[str]:
    """Sample keys of shard ``name`` in tar order (headers only), as Energon counts them."""
    f, size = open_shard(str(root), name)
    with f:
        return [f"{shard_stem(name)}/{key}" for key, *_ in iter_samples(f, size, lambda e: 0)]


def exclude_to_keys_by_walk(
    root: str | Path, split: SplitConfig | None, shards: list[str]
) -> list[str]:
    """:func:`exclude_to_keys` for a ``.nv-meta`` without ``.info.yaml`` and ``.tar.idx``
    files: a ``"<shard>/<index>"`` entry becomes the key of that sample, found by walking the
    shard's tar headers (only shards such an entry names are walked)."""
    if split is None:
        return []
    known = set(shards)
    keys: dict[str, list[str]] = {}
    out = []
    for entry in split.exclude:
        head, _, tail = entry.rpartition("/")
        if head in known and tail.isdigit():
            if head not in keys:
                try:
                    keys[head] = _walk_keys(root, head)
                except (OSError, ShardError, ConfigError):  # ConfigError: leads out, unopened
                    keys[head] = []
            j, key = int(tail), f"{shard_stem(head)}/{tail}"
            if key in keys[head]:  # Energon reads the entry as a key of the shard
                out.append(key)
            else:
                out.append(keys[head][j] if j < len(keys[head]) else entry)
        else:
            out.append(entry)
    return out
