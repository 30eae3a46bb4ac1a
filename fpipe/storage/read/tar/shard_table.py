"""The shard list of a large index as arrays (index format 3), read lazily.

An index lists its shards (name, samples, bytes, mtime) in ``info.yaml``. Parsing that list is
O(shards) Python objects: a million shards take minutes of ``yaml.safe_load`` and hundreds of
megabytes, on every rank, before the first batch. From :data:`SHARD_ARRAYS_FROM` shards
``fpipe prepare`` writes the list as ``.npy`` files instead (``info.yaml`` then says
``version: 3`` and ``num_shards``)::

    shards/samples.npy         int64 (S,)    samples of each shard in the index
    shards/bytes.npy           int64 (S,)    shard size when indexed (-1: unknown)
    shards/mtime_ns.npy        int64 (S,)    shard mtime when indexed (-1: unknown)
    shards/names.npy           uint8 (...)   UTF-8 shard paths, concatenated
    shards/names.offsets.npy   int64 (S+1,)  name i is names[off[i]:off[i+1]]

:class:`ShardTable` is a read-only sequence of :class:`ShardEntry` over those arrays: they are
mapped (nothing is parsed) and checked when first used, an entry is built when asked for, and
the sample counts are summed with numpy. Smaller indexes keep the readable list in
``info.yaml`` (version 2).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, overload

import msgspec
import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.storage.read.npy_files import map_plain_npy


class ShardEntry(msgspec.Struct, frozen=True):
    """One shard of a tar dataset."""

    name: str  #: path relative to the dataset folder, ``/``-separated, with its suffix
    samples: int  #: samples of the shard in the index
    bytes: int = -1  #: shard file size when indexed (-1: unknown)
    mtime_ns: int = -1  #: shard modification time when indexed, ns (-1: unknown)


def load_array(path: str | Path, mmap: bool = True) -> np.ndarray:
    """``np.load`` without pickle; memory-mapped when possible (empty arrays are not)."""
    # a str, not a Path: numpy's memmap resolves a Path (an lstat per folder of the path, for
    # each of the arrays every worker maps), a str it only makes absolute
    path = os.fspath(path)
    if mmap:
        try:
            arr = map_plain_npy(path)  # the header form np.save writes, parsed fast
        except ValueError:
            arr = None  # numpy's reader below says what is wrong
        if arr is not None:
            return arr
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except ValueError:
        if not mmap:
            raise
        return np.load(path, allow_pickle=False)  # mmap of an empty array fails


__all__ = ["SHARD_ARRAYS_FROM", "ShardEntry", "ShardTable", "load_array", "shard_table_files"]

#: from this many shards on, the shard list is written as arrays (format 3). Parsing the
#: YAML list costs ~30 us a shard in every process that opens the dataset (30 ms of a
#: 1,000-shard dataset's ~80 ms to its first batch); mapping the arrays costs ~1 ms.
SHARD_ARRAYS_FROM = 256

_FILES = ("samples", "bytes", "mtime_ns", "names", "names.offsets")


def shard_table_files(shards: Sequence[dict[str, Any]]) -> dict[str, np.ndarray]:
    """The ``.npy`` files of a shard list ``[{name, samples, bytes, mtime_ns}]`` by name
    relative to the index folder."""
    enc = [str(s["name"]).encode("utf-8", "surrogateescape") for s in shards]
    offsets = np.zeros(len(enc) + 1, np.int64)
    np.cumsum([len(e) for e in enc], out=offsets[1:])
    return {
        "shards/samples.npy": np.array([int(s["samples"]) for s in shards], np.int64),
        "shards/bytes.npy": np.array([int(s.get("bytes", -1)) for s in shards], np.int64),
        "shards/mtime_ns.npy": np.array([int(s.get("mtime_ns", -1)) for s in shards], np.int64),
        "shards/names.npy": np.frombuffer(b"".join(enc), np.uint8).copy(),
        "shards/names.offsets.npy": offsets,
    }


class ShardTable(Sequence):
    """The shards of a format 3 index, from its ``shards/*.npy`` files (module docstring).

    ``table[i]`` is a :class:`~fpipe.storage.read.record.ShardEntry`; ``samples`` /
    ``bytes`` / ``mtime_ns`` are the arrays themselves (read-only, memory-mapped)."""

    def __init__(self, index_dir: str | Path, count: int):
        self._dir = Path(index_dir)
        self._count = count
        # mapped when first used (a shard read, a slice by shard, the open checks of a reader):
        # planning a blend of 10,000 datasets maps none of their 50,000 files
        self._arrays: dict[str, np.ndarray] | None = None

    def _load(self) -> dict[str, np.ndarray]:
        """The five arrays, mapped and checked against the shard count (once)."""
        if self._arrays is not None:
            return self._arrays
        d, count = self._dir, self._count
        arrays = {}
        for name in _FILES:
            path = d / "shards" / f"{name}.npy"
            try:
                arrays[name] = load_array(path).view(np.ndarray)
            except (OSError, ValueError) as e:
                msg = f"{path}: unreadable shard table ({e}); re-run `fpipe prepare`"
                raise ConfigError(msg) from None
        for name in _FILES:
            want = count + 1 if name == "names.offsets" else count
            arr = arrays[name]
            if name != "names" and (
                arr.ndim != 1 or len(arr) != want or arr.dtype.kind not in "iu"
            ):
                raise ConfigError(
                    f"{d}/shards/{name}.npy: shape {arr.shape} / dtype {arr.dtype} do not fit "
                    f"{count} shards; the index is corrupt: re-run `fpipe prepare`"
                )
        off = arrays["names.offsets"]
        if count and (int(off[0]) != 0 or int(off[-1]) != len(arrays["names"])):
            raise ConfigError(f"{d}/shards/names.offsets.npy: the index is corrupt")
        self._arrays = arrays
        return arrays

    @property
    def samples(self) -> np.ndarray:
        """int64 ``(S,)``: samples of each shard."""
        return self._load()["samples"]

    @property
    def bytes(self) -> np.ndarray:
        """int64 ``(S,)``: shard sizes when indexed (-1: unknown)."""
        return self._load()["bytes"]

    @property
    def mtime_ns(self) -> np.ndarray:
        """int64 ``(S,)``: shard mtimes when indexed, ns (-1: unknown)."""
        return self._load()["mtime_ns"]

    @property
    def _names(self) -> np.ndarray:
        return self._load()["names"]

    @property
    def _offsets(self) -> np.ndarray:
        return self._load()["names.offsets"]

    def __len__(self) -> int:
        return self._count

    def name(self, i: int) -> str:
        """The path of shard ``i`` relative to the dataset folder."""
        names, offsets = self._names, self._offsets
        a, b = int(offsets[i]), int(offsets[i + 1])
        if not 0 <= a <= b <= len(names):
            raise ConfigError(f"shard table: name {i} at bytes {a}..{b} is out of range")
        return names[a:b].tobytes().decode("utf-8", "surrogateescape")

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> list: ...
    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._count))]
        i = int(i)
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError(f"shard {i} out of range for {self._count} shards")
        return ShardEntry(
            self.name(i), int(self.samples[i]), int(self.bytes[i]), int(self.mtime_ns[i])
        )

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(self._count))

    def starts(self) -> np.ndarray:
        """int64 ``(S + 1,)``: index of the first sample of each shard, then the total."""
        out = np.zeros(self._count + 1, np.int64)
        np.cumsum(self.samples, out=out[1:])
        return out

    def names_with(self, needle: bytes) -> np.ndarray:
        """Ids of the shards whose name contains ``needle`` (one scan of the name bytes)."""
        blob = self._names.tobytes()
        hits, at = [], blob.find(needle)
        while at >= 0:
            hits.append(at)
            at = blob.find(needle, at + 1)
        if not hits:
            return np.zeros(0, np.int64)
        return np.unique(np.searchsorted(self._offsets, np.asarray(hits), side="right") - 1)
