"""Where the members of each sample lie: one flat member table for a whole index.

A prepared tar index (format version 2) stores one row per member, sorted by sample and, within
a sample, in tar order::

    members/start.npy   int64 (n+1,)  members of sample i are rows start[i]:start[i+1]
    members/ext.npy     int32 (m,)    extension id: position in info.yaml's ``members`` list
    members/offset.npy  int64 (m,)    byte offset of the member's data in its shard
    members/size.npy    int64 (m,)    member size in bytes

Memory, files and read cost are linear in the number of members whatever the number of
distinct extensions. Version 1 indexes stored two arrays per extension instead
(``members/<ext>.offset.npy`` / ``.size.npy``, ``-1`` where absent); they are still read
(:class:`PerExtensionMembers`). See ``docs/format.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain

import msgspec
import numpy as np

__all__ = [
    "CorruptIndex",
    "FlatMembers",
    "MemberRows",
    "MemberTable",
    "PerExtensionMembers",
    "build_members",
    "concat_members",
    "member_files",
]

#: (extension, offset, size) of one member
Placed = tuple[str, int, int]


class MemberTable(msgspec.Struct, frozen=True):
    """The member table of an index held in memory (see the module docstring)."""

    exts: list[str]  #: sorted extension names; ``ext`` holds positions in this list
    start: np.ndarray  #: int64 (n+1,)
    ext: np.ndarray  #: int32 (m,)
    offset: np.ndarray  #: int64 (m,)
    size: np.ndarray  #: int64 (m,)

    def counts(self) -> dict[str, int]:
        """Members per extension (samples having it: an extension appears once per sample)."""
        found = np.bincount(self.ext, minlength=len(self.exts))
        return {e: int(c) for e, c in zip(self.exts, found)}


def build_members(
    samples: Sequence[tuple[Sequence[str], Sequence[int], Sequence[int]]],
) -> MemberTable:
    """The table of ``samples``, each ``(extensions, offsets, sizes)`` of its members."""
    m = sum(len(s[0]) for s in samples)
    names = sorted({e for s in samples for e in s[0]})
    ids = {e: i for i, e in enumerate(names)}
    start = np.zeros(len(samples) + 1, np.int64)
    np.cumsum([len(s[0]) for s in samples], out=start[1:])
    return MemberTable(
        exts=names,
        start=start,
        ext=np.fromiter((ids[e] for s in samples for e in s[0]), np.int32, m),
        offset=np.fromiter(chain.from_iterable(s[1] for s in samples), np.int64, m),
        size=np.fromiter(chain.from_iterable(s[2] for s in samples), np.int64, m),
    )


def concat_members(parts: Sequence[MemberTable]) -> MemberTable:
    """Tables of consecutive sample ranges, concatenated (extension ids renumbered)."""
    names = sorted({e for p in parts for e in p.exts})
    ids = {e: i for i, e in enumerate(names)}
    starts = [np.zeros(1, np.int64)]
    base = 0
    for p in parts:
        starts.append(np.asarray(p.start[1:], np.int64) - int(p.start[0]) + base)
        base += int(p.start[-1] - p.start[0])
    remapped = [
        np.asarray([ids[e] for e in p.exts], np.int32)[p.ext]
        if len(p.ext)
        else np.zeros(0, np.int32)
        for p in parts
    ]
    return MemberTable(
        exts=names,
        start=np.concatenate(starts),
        ext=np.concatenate([np.zeros(0, np.int32), *remapped]).astype(np.int32),
        offset=np.concatenate([np.zeros(0, np.int64), *(p.offset for p in parts)]),
        size=np.concatenate([np.zeros(0, np.int64), *(p.size for p in parts)]),
    )


def member_files(table: MemberTable) -> dict[str, np.ndarray]:
    """The ``.npy`` files of ``table`` by name relative to the index folder."""
    return {
        "members/start.npy": np.asarray(table.start, np.int64),
        "members/ext.npy": np.asarray(table.ext, np.int32),
        "members/offset.npy": np.asarray(table.offset, np.int64),
        "members/size.npy": np.asarray(table.size, np.int64),
    }


class CorruptIndex(ValueError):
    """A member table entry that cannot be right (the caller names the dataset and sample)."""


class FlatMembers:
    """Members of sample ``i`` from the flat table of a version 2 index (O(its members))."""

    def __init__(self, exts: Sequence[str], array: Callable[[str], np.ndarray]):
        self._exts = tuple(exts)
        self._array = array

    def placed(self, i: int) -> list[Placed]:
        """``(ext, offset, size)`` of every member of sample ``i``, in tar order.

        Raises:
          CorruptIndex: the table points outside itself or at an unknown extension.
        """
        start = self._array("members/start.npy")
        a, b = int(start[i]), int(start[i + 1])
        ext = self._array("members/ext.npy")
        if not 0 <= a <= b <= len(ext):
            raise CorruptIndex(f"member rows {a}..{b} of a table of {len(ext)}")
        ids = ext[a:b].tolist()
        names = self._exts
        if any(not 0 <= e < len(names) for e in ids):
            raise CorruptIndex(f"extension ids {ids} with {len(names)} extensions")
        offs = self._array("members/offset.npy")[a:b].tolist()
        sizes = self._array("members/size.npy")[a:b].tolist()
        return [(names[e], o, s) for e, o, s in zip(ids, offs, sizes)]

    def rows(self, indices: np.ndarray) -> MemberRows:
        """The members of samples ``indices`` at once: :meth:`placed` of each, as arrays
        (a sample whose rows or extension ids are corrupt is marked not ``ok``; its rows are
        left out)."""
        start = self._array("members/start.npy")
        ext = self._array("members/ext.npy")
        a, b = start[indices], start[indices + 1]
        ok = (a >= 0) & (a <= b) & (b <= len(ext))
        counts = np.where(ok, b - a, 0)
        first = np.zeros(len(indices) + 1, np.int64)
        np.cumsum(counts, out=first[1:])
        rows = np.arange(first[-1], dtype=np.int64) + np.repeat(a - first[:-1], counts)
        owner = np.repeat(np.arange(len(indices)), counts)
        ids = ext[rows].astype(np.int64)
        bad = (ids < 0) | (ids >= len(self._exts))
        ok &= np.bincount(owner[bad], minlength=len(indices)) == 0
        return MemberRows(
            ok=ok,
            owner=owner,
            ext=np.where(bad, 0, ids),
            offset=self._array("members/offset.npy")[rows].astype(np.int64),
            size=self._array("members/size.npy")[rows].astype(np.int64),
        )


class MemberRows(msgspec.Struct, frozen=True):
    """The members of a batch of samples (:meth:`FlatMembers.rows`), one row per member in
    sample order, then tar order."""

    ok: np.ndarray  #: bool (n,): the sample's table entries are sound
    owner: np.ndarray  #: int64 (m,): position of the row's sample in the batch
    ext: np.ndarray  #: int64 (m,): extension id
    offset: np.ndarray  #: int64 (m,)
    size: np.ndarray  #: int64 (m,)


class PerExtensionMembers:
    """Members of sample ``i`` from a version 1 index: two arrays per extension, ``-1`` where
    a sample has no such member (O(extensions) per sample)."""

    def __init__(self, exts: Sequence[str], array: Callable[[str], np.ndarray]):
        self._exts = tuple(exts)
        self._array = array

    def placed(self, i: int) -> list[Placed]:
        """``(ext, offset, size)`` of every member of sample ``i``, in tar order."""
        out = []
        for ext in self._exts:
            off = int(self._array(f"members/{ext}.offset.npy")[i])
            if off >= 0:
                out.append((ext, off, int(self._array(f"members/{ext}.size.npy")[i])))
        return sorted(out, key=lambda p: p[1])
