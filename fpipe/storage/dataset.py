"""Random-access datasets over a prepared index: ``open_dataset(path)``.

Every dataset kind (fpipe-prepared shards, Energon-prepared shards, JSONL/CSV tables) offers
the same small surface, :class:`Dataset`: length, metadata columns (memory-mapped), split
indices, sample keys and raw member bytes by index. Objects are cheap to build, hold no open
file across ``fork`` or pickling (only the path is pickled; arrays are re-mapped lazily), and
never decide order.
"""

from __future__ import annotations

import gzip
import os
import shutil
import zlib
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.storage.config import (
    DatasetConfig,
    SplitConfig,
    load_dataset_config,
    load_split_config,
)
from fpipe.storage.reader import FileCache
from fpipe.storage.tar_index import INDEX_DIR, load_array, read_info
from fpipe.storage.webdataset import is_gzip_shard, shard_stem

__all__ = ["Dataset", "IndexedDataset", "open_dataset", "resolve_split"]

#: extra bytes allowed between members before a sample is read with one pread per member.
_GAP = 64 * 1024


@runtime_checkable
class Dataset(Protocol):
    """What every dataset kind offers (see ``docs/format.md``)."""

    path: str
    config: DatasetConfig

    def __len__(self) -> int: ...

    @property
    def column_names(self) -> tuple[str, ...]: ...

    def column(self, name: str) -> np.ndarray: ...

    def split_indices(self, name: str) -> np.ndarray: ...

    def key(self, i: int) -> str: ...

    def read(self, i: int) -> dict[str, bytes]: ...


def resolve_split(
    split: SplitConfig | None,
    name: str,
    shard_names: list[str],
    shard_starts: np.ndarray,
    shard_id: np.ndarray,
    index_of_key,
    where: str,
) -> np.ndarray:
    """Sample indices of split ``name`` after excludes (all samples when ``split`` is None).

    Exclude entries are a shard name, ``"<shard name>/<index within shard>"`` or a sample key
    ``"<shard stem>/<member key>"``.
    """
    n = len(shard_id)
    if split is None:
        return np.arange(n, dtype=np.int64)
    if name not in split.split_parts:
        raise ConfigError(f"{where}: no split {name!r}; split.yaml has {sorted(split.split_parts)}")
    pos = {s: i for i, s in enumerate(shard_names)}
    ids = []
    for s in split.split_parts[name] or ():
        if s not in pos:
            raise ConfigError(f"{where}: split {name!r} names shard {s!r}, not in the index")
        ids.append(pos[s])
    mask = np.isin(shard_id, np.asarray(ids, dtype=np.int64))
    for entry in split.exclude or ():
        if entry in pos:
            mask[shard_starts[pos[entry]] : shard_starts[pos[entry] + 1]] = False
            continue
        head, _, tail = entry.rpartition("/")
        if head in pos and tail.isdigit():
            j = shard_starts[pos[head]] + int(tail)
            if j < shard_starts[pos[head] + 1]:
                mask[j] = False
            continue
        j = index_of_key(entry)
        if j is not None:
            mask[j] = False
    return np.flatnonzero(mask).astype(np.int64)


def _gunzip_member(path: str, key: str, ext: str, data: bytes) -> bytes:
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:
        raise BadSampleError(path, key, f"member {ext!r}: corrupt gzip data: {e}") from None


def members_to_dict(path: str, key_fn, parts: list[tuple[str, bytes]]) -> dict[str, bytes]:
    """Member bytes by extension; ``.gz`` members decompressed under their base extension.

    ``key_fn()`` gives the sample key for error messages (computed only on error).
    """
    out: dict[str, bytes] = {}
    for ext, data in parts:
        if ext.endswith(".gz"):
            base = ext[:-3]
            if base not in out:
                out[base] = _gunzip_member(path, key_fn(), ext, data)
        else:
            out[ext] = data
    return out


class IndexedDataset:
    """A WebDataset folder indexed by ``fpipe prepare`` (``DIR/.fpipe``)."""

    def __init__(self, path: str | os.PathLike, *, max_open_files: int = 64):
        self.path = str(path)
        self._max_open = max_open_files
        self._dir = Path(self.path) / INDEX_DIR
        info = read_info(self._dir)
        if info.get("kind", "webdataset") != "webdataset":
            raise ConfigError(f"{self._dir}: index of kind {info.get('kind')!r}, not shards")
        self._info = info
        self.config: DatasetConfig = load_dataset_config(self._dir / "dataset.yaml")
        self._split: SplitConfig | None = load_split_config(self._dir / "split.yaml")
        self._shards: list[str] = [s["name"] for s in info["shards"]]
        self._stems = [shard_stem(s) for s in self._shards]
        counts = [int(s["samples"]) for s in info["shards"]]
        self._starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        self._n = int(info["num_samples"])
        self._exts: list[str] = list(info["members"])
        self._aliases: dict[str, str] = dict(info.get("aliases") or {})
        self._arrays: dict[str, np.ndarray] = {}
        self._key_index: dict[str, int] | None = None
        self._files = FileCache(max_open_files)
        self._av_fields: dict[str, list[str]] = dict((info.get("av") or {}).get("fields") or {})
        self._av_index = None

    # pickling carries the path only: no descriptors, no mapped arrays
    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "max_open_files": self._max_open}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], max_open_files=state["max_open_files"])

    def __repr__(self) -> str:
        return f"IndexedDataset({self.path!r}, samples={self._n}, shards={len(self._shards)})"

    def __len__(self) -> int:
        return self._n

    def _array(self, rel: str) -> np.ndarray:
        arr = self._arrays.get(rel)
        if arr is None:  # a plain ndarray view of the map: fast scalar indexing
            arr = self._arrays[rel] = load_array(self._dir / rel).view(np.ndarray)
        return arr

    @property
    def shards(self) -> tuple[str, ...]:
        """Shard paths relative to :attr:`path`, in shard-id order."""
        return tuple(self._shards)

    @property
    def column_names(self) -> tuple[str, ...]:
        """Metadata columns: ``shard_id``, ``bytes``, ``<field>.<stat>``, user columns."""
        return ("shard_id", *self._info["columns"], *self._aliases)

    def column(self, name: str) -> np.ndarray:
        """Values of column ``name`` for every sample (memory-mapped, read-only)."""
        if name == "shard_id":
            return self._array("shard_id.npy")
        name = self._aliases.get(name, name)
        if name not in self._info["columns"]:
            raise KeyError(f"{self.path}: no column {name!r}; columns: {self.column_names}")
        return self._array(f"columns/{name}.npy")

    @property
    def split_names(self) -> tuple[str, ...]:
        """Split names from split.yaml (empty when there is none)."""
        return tuple(self._split.split_parts) if self._split else ()

    def split_indices(self, name: str) -> np.ndarray:
        """Sample indices of split ``name`` (all samples without a split.yaml)."""
        return resolve_split(
            self._split,
            name,
            self._shards,
            self._starts,
            self.column("shard_id"),
            self.index_of_key,
            str(self._dir / "split.yaml"),
        )

    def _check(self, i: int) -> int:
        i = int(i)
        if not 0 <= i < self._n:
            raise IndexError(f"sample index {i} out of range for {self._n} samples")
        return i

    def key(self, i: int) -> str:
        """``"<shard stem>/<member key>"`` of sample ``i`` (WebDataset's ``__key__``)."""
        i = self._check(i)
        off = self._array("keys.offsets.npy")
        raw = self._array("keys.npy")[off[i] : off[i + 1]].tobytes()
        sid = int(self._array("shard_id.npy")[i])
        return f"{self._stems[sid]}/{raw.decode('utf-8', 'surrogateescape')}"

    def index_of_key(self, key: str) -> int | None:
        """Index of the sample with this key, or None (builds a dict on first use)."""
        if self._key_index is None:
            self._key_index = {self.key(i): i for i in range(self._n)}
        return self._key_index.get(key)

    def shard_path(self, shard_id: int) -> str:
        """File to read shard ``shard_id`` from (a decompressed copy for gzip shards)."""
        name = self._shards[shard_id]
        path = os.path.join(self.path, name)
        if not is_gzip_shard(name):
            return path
        return _decompressed_copy(path, self._dir / "decompressed" / (shard_stem(name) + ".tar"))

    def read(self, i: int) -> dict[str, bytes]:
        """Raw member bytes of sample ``i`` by extension (``.gz`` members decompressed)."""
        i = self._check(i)
        sid = int(self._array("shard_id.npy")[i])
        placed = []
        for ext in self._exts:
            off = int(self._array(f"members/{ext}.offset.npy")[i])
            if off >= 0:
                placed.append((ext, off, int(self._array(f"members/{ext}.size.npy")[i])))
        try:
            path = self.shard_path(sid)
        except OSError as e:
            raise BadSampleError(self._shards[sid], self.key(i), f"cannot open: {e}") from None
        if not placed:
            return {}
        lo = min(p[1] for p in placed)
        hi = max(p[1] + p[2] for p in placed)
        parts = []
        try:
            if hi - lo <= sum(p[2] for p in placed) + _GAP:
                buf = self._files.pread(path, lo, hi - lo)
                if len(buf) < hi - lo:
                    raise BadSampleError(
                        path,
                        self.key(i),
                        f"shard truncated: wanted bytes {lo}..{hi}, file ends at {lo + len(buf)}",
                    )
                mv = memoryview(buf)
                parts = [(ext, bytes(mv[o - lo : o - lo + s])) for ext, o, s in placed]
            else:
                for ext, o, s in placed:
                    data = self._files.pread(path, o, s)
                    if len(data) < s:
                        raise BadSampleError(path, self.key(i), f"member {ext!r} truncated")
                    parts.append((ext, data))
        except OSError as e:
            raise BadSampleError(path, self.key(i), f"read failed: {e}") from None
        return members_to_dict(path, lambda: self.key(i), parts)

    def av_metadata(self, i: int) -> dict[str, Any]:
        """Audio/video stream metadata stored by ``fpipe prepare`` for sample ``i``, by the
        member extension :meth:`read` returns it under: ``{"mp4": AVMetadata}`` (empty when the
        dataset has no probed audio/video field). See :mod:`fpipe.storage.av_meta`."""
        if not self._av_fields:
            return {}
        if self._av_index is None:
            from fpipe.storage.av_meta import AVIndex

            self._av_index = AVIndex(self._av_fields, self._array)
        i = self._check(i)
        out: dict[str, Any] = {}
        for field, exts in self._av_fields.items():
            # the member the field was probed from: its first alternative present
            ext = next(
                (
                    e
                    for e in exts
                    if any(
                        x in self._exts and self._array(f"members/{x}.offset.npy")[i] >= 0
                        for x in (e, e + ".gz")
                    )
                ),
                None,
            )
            if ext is None or ext in out:
                continue
            meta = self._av_index.metadata(field, i)
            if meta is not None:
                out[ext] = meta
        return out

    def close(self) -> None:
        """Close open shard files of this process (reopened on the next read)."""
        self._files.close()


def _decompressed_copy(src: str, dst: Path) -> str:
    """Decompress a gzip shard once to ``dst`` (atomic rename; safe across processes)."""
    if dst.exists():
        return str(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f"{dst.name}.tmp-{os.getpid()}")
    with gzip.open(src, "rb") as fin, open(tmp, "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
    os.replace(tmp, dst)
    return str(dst)


def open_dataset(path: str | os.PathLike, **kwargs: Any) -> Dataset:
    """Open a prepared dataset folder (fpipe or Energon) or a ``.jsonl`` / ``.csv`` table.

    Args:
      path: folder with ``.fpipe/`` (from ``fpipe prepare``) or ``.nv-meta/`` (Energon), or a
        table file.
      **kwargs: for tables, see :class:`fpipe.storage.tables.TableDataset` (``root``,
        ``media_columns``, ``aux``...); ``max_open_files`` for shard datasets.

    Returns:
      A :class:`Dataset`.

    Example:
      >>> ds = open_dataset("data/coco")              # doctest: +SKIP
      >>> ds.read(0)["jpg"][:3]                       # doctest: +SKIP
      b'\\xff\\xd8\\xff'
    """
    p = Path(path)
    if p.is_file():
        from fpipe.storage.tables import TableDataset

        return TableDataset(p, **kwargs)
    if (p / INDEX_DIR / "info.yaml").exists():
        info = read_info(p / INDEX_DIR)
        if info.get("kind") == "table":
            from fpipe.storage.tables import PreparedTableDataset

            return PreparedTableDataset(p, **kwargs)
        return IndexedDataset(p, **kwargs)
    if (p / ".nv-meta").is_dir():
        from fpipe.storage.energon import EnergonDataset

        return EnergonDataset(p, **kwargs)
    if not p.exists():
        raise ConfigError(f"{p}: no such dataset")
    raise ConfigError(
        f"{p}: not a prepared dataset (no .fpipe/ or .nv-meta/ folder); run `fpipe prepare {p}`"
    )
