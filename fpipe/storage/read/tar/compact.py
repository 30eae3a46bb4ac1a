"""The compact per-sample layout of a tar index (format 4): what ``fpipe prepare`` writes.

The flat layout (formats 2 and 3) spends ~117 bytes per image + caption sample: a shard id,
key offsets and key bytes, a member start, and per member an extension id, an offset and a
size, all int32/int64, plus int64 columns. Most of it follows from something else:

- the shard of a sample follows from the shards' sample counts (a ``searchsorted``);
- WebDataset keys are usually consecutive decimal numbers of one width (``%06d``): a shard of
  them is stored as its first number and the width;
- samples usually have the same members in the same tar order (``jpg`` then ``txt``): one
  *pattern* for the index, so no member start and no extension ids;
- in a plain tar (no pax or GNU long-name header between a sample's members) the next
  member's data starts one 512-byte header after the previous one's data, rounded up to 512:
  one offset per sample, the others derived; and that one is a multiple of 512 and grows
  through the shard: stored in 512-byte units as the offset of its block of ``block`` (64)
  samples plus a small difference (uint16 unless a block spans 32 MB);
- ``bytes`` (the sum of a sample's member sizes) and ``<field>.bytes`` (one member's size)
  are the member sizes again: derived, not stored.

What remains is stored in the smallest dtype that holds it (uint8/16/32/64 by the array's
largest value). Files under ``.fpipe/compact/``::

    shard/keys_at.npy      int64 (S,)   first row of the shard's keys in keys.npy; -1: numeric
    shard/key_first.npy    int64 (S,)   number of the shard's first key (numeric shards)
    shard/key_width.npy    uint8 (S,)   width of its keys, zero-padded decimal
    shard/members_at.npy   int64 (S,)   first row of the shard's samples in explicit/; -1:
                                        the shard follows the pattern
    shard/blocks_at.npy    int64 (S,)   the shard's first block in offset_base.npy
    keys.npy, keys.offsets.npy          keys of the other shards (as the flat layout)
    offset_base.npy        uint (B,)    offset / 512 of the first sample of each block
    offset.npy             uint (n,)    the sample's first member's data offset / 512, less
                                        its block's base: (base + this) x 512
    size.<k>.npy           uint (n,)    size of the pattern's k-th member
    explicit/{start,ext,offset,size}.npy  the flat member table of the samples of the
                                        shards that do not follow the pattern
    columns/<name>.npy     (n,)         stored columns, smallest dtype

Per-sample arrays hold zeros at samples of shards whose members are explicit. ``info.yaml``
says ``version: 4`` and, under ``compact``, the pattern, the derived columns and the stored
columns' dtypes (``columns`` keeps the dtype the reader gives). The reader is
:class:`fpipe.storage.read.tar.samples.CompactSamples`; every read is O(1) per sample.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

__all__ = ["CompactInfo", "compact_files", "smallest_dtype"]

#: extensions of the pattern encoded as one int64 (bits per id x members < 63)
_CODE_BITS = 62


class CompactInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What ``info.yaml`` says of a compact index (``compact:``)."""

    pattern: tuple[str, ...] = ()  #: member extensions of a pattern sample, in tar order
    block: int = 64  #: samples per block of offsets (one base each, see offset_base.npy)
    sums: tuple[str, ...] = ()  #: columns equal to the sum of the sample's member sizes
    sizes: dict[str, str] = msgspec.field(default_factory=dict)  #: column -> member ext
    stored: dict[str, str] = msgspec.field(default_factory=dict)  #: column -> stored dtype


def smallest_dtype(arr: np.ndarray) -> np.dtype:
    """The smallest integer dtype holding every value of ``arr`` (unsigned when none is
    negative); floats stay float64 unless float32 holds them exactly; bools stay bools."""
    arr = np.asarray(arr)
    if arr.dtype.kind == "f":
        if arr.dtype == np.float32 or np.array_equal(
            arr.astype(np.float32).astype(arr.dtype), arr, equal_nan=True
        ):
            return np.dtype(np.float32)
        return arr.dtype
    if arr.dtype.kind not in "iu" or not len(arr):
        return arr.dtype if arr.dtype.kind not in "iu" else np.dtype(np.uint8)
    lo, hi = int(arr.min()), int(arr.max())
    kinds = (
        (np.uint8, np.uint16, np.uint32, np.uint64)
        if lo >= 0
        else (np.int8, np.int16, np.int32, np.int64)
    )
    for t in kinds:
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return np.dtype(t)
    return arr.dtype


def _sums(start: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per-sample sums of member ``values`` (rows ``start[i]:start[i+1]``)."""
    cs = np.zeros(len(values) + 1, np.int64)
    np.cumsum(values, out=cs[1:])
    return cs[start[1:]] - cs[start[:-1]]


def _per_shard_all(flags: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per shard (samples ``starts[s]:starts[s+1]``): whether ``flags`` holds for all."""
    bad = np.zeros(len(flags) + 1, np.int64)
    np.cumsum(~flags, out=bad[1:])
    return (bad[starts[1:]] - bad[starts[:-1]]) == 0


def _pattern(members, counts: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
    """(per sample: has the index's pattern, the pattern's extension ids): the most frequent
    (member count, extension ids in tar order) of the samples."""
    n = len(counts)
    k_all, k_n = np.unique(counts, return_counts=True) if n else (np.zeros(0), np.zeros(0))
    if not n:
        return np.zeros(0, bool), ()
    k = int(k_all[np.argmax(k_n)])
    bits = max(int(len(members.exts)).bit_length(), 1)
    if k == 0 or k * bits > _CODE_BITS:
        return np.zeros(n, bool), ()
    sel = np.flatnonzero(counts == k)
    rows = members.start[sel][:, None] + np.arange(k)
    codes = np.zeros(len(sel), np.int64)
    for j in range(k):
        codes = (codes << bits) | members.ext[rows[:, j]].astype(np.int64)
    uniq, freq = np.unique(codes, return_counts=True)
    best = int(uniq[np.argmax(freq)])
    has = np.zeros(n, bool)
    has[sel] = codes == best
    ids = tuple(int(members.ext[rows[np.argmax(codes == best), j]]) for j in range(k))
    return has, ids


def _numeric_keys(
    keys: np.ndarray, key_offsets: np.ndarray, starts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per shard: (keys are consecutive decimal numbers of one width, first number, width)."""
    n = len(key_offsets) - 1
    lengths = np.diff(key_offsets)
    value = np.full(n, -1, np.int64)
    for w in np.unique(lengths).tolist():
        if not 1 <= w <= 18:
            continue
        idx = np.flatnonzero(lengths == w)
        digits = keys[key_offsets[idx][:, None] + np.arange(w)].astype(np.int64) - ord("0")
        ok = np.all((digits >= 0) & (digits <= 9), axis=1)
        value[idx[ok]] = digits[ok] @ (10 ** np.arange(w - 1, -1, -1, dtype=np.int64))
    first = np.zeros(n, bool)
    first[starts[:-1][starts[:-1] < n]] = True
    follows = np.ones(n, bool)
    follows[1:] = (value[1:] == value[:-1] + 1) & (lengths[1:] == lengths[:-1])
    good = (value >= 0) & (first | follows)
    numeric = _per_shard_all(good, starts)
    at = np.minimum(starts[:-1], max(n - 1, 0))
    key_first = np.where(numeric & (starts[1:] > starts[:-1]), value[at] if n else 0, 0)
    width = np.where(numeric & (starts[1:] > starts[:-1]), lengths[at] if n else 0, 0)
    return numeric, key_first.astype(np.int64), width.astype(np.uint8)


def _rows_of(start: np.ndarray, samples: np.ndarray) -> np.ndarray:
    """Member rows of ``samples``, in order."""
    a, b = start[samples], start[samples + 1]
    counts = b - a
    first = np.zeros(len(samples) + 1, np.int64)
    np.cumsum(counts, out=first[1:])
    return np.arange(first[-1], dtype=np.int64) + np.repeat(a - first[:-1], counts)


def _columns(data, members, counts: np.ndarray) -> tuple[dict[str, np.ndarray], CompactInfo]:
    """Stored column files and which columns are derived from member sizes."""
    start = np.asarray(members.start, np.int64)
    size = np.asarray(members.size, np.int64)
    n = len(counts)
    owner = np.repeat(np.arange(n, dtype=np.int64), counts)
    by_ext: dict[str, np.ndarray] = {}
    for e, name in enumerate(members.exts):
        col = np.full(n, -1, np.int64)
        hit = members.ext == e
        col[owner[hit]] = size[hit]
        by_ext[name] = col
    total = _sums(start, size)
    files: dict[str, np.ndarray] = {}
    sums, sizes, stored = [], {}, {}
    for name, arr in data.columns.items():
        if arr.dtype.kind in "iu":
            if np.array_equal(arr, total):
                sums.append(name)
                continue
            ext = next((e for e, col in by_ext.items() if np.array_equal(arr, col)), None)
            if ext is not None:
                sizes[name] = ext
                continue
        dt = smallest_dtype(arr)
        files[f"compact/columns/{name}.npy"] = np.asarray(arr).astype(dt)
        stored[name] = str(dt)
    return files, CompactInfo(sums=tuple(sums), sizes=sizes, stored=stored)


def _offset_blocks(
    firsts: np.ndarray, starts: np.ndarray, follows: np.ndarray, block: int
) -> dict[str, np.ndarray]:
    """``offset_base.npy``, ``offset.npy`` and ``shard/blocks_at.npy`` of the first members'
    offsets in 512-byte units ``firsts`` (blocks of ``block`` samples inside each shard that
    follows the pattern)."""
    counts = np.diff(starts)
    blocks = np.where(follows, -(-counts // block), 0)
    blocks_at = np.zeros(len(blocks) + 1, np.int64)
    np.cumsum(blocks, out=blocks_at[1:])
    sid = np.repeat(np.arange(len(counts)), counts)
    pos = np.arange(len(firsts), dtype=np.int64) - starts[:-1][sid]
    mine = np.repeat(follows, counts)
    block_of = blocks_at[:-1][sid] + pos // block
    base = np.full(int(blocks_at[-1]), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(base, block_of[mine], firsts[mine])
    delta = np.where(mine, firsts - base[np.where(mine, block_of, 0)] if len(base) else 0, 0)
    return {
        "compact/shard/blocks_at.npy": blocks_at[:-1],
        "compact/offset_base.npy": base.astype(smallest_dtype(base)),
        "compact/offset.npy": delta.astype(smallest_dtype(delta)),
    }


def compact_files(data) -> tuple[dict[str, np.ndarray], CompactInfo]:
    """The ``.npy`` files (by name relative to the index folder) of the compact layout of
    ``data`` (an :class:`~fpipe.storage.read.tar.index.IndexData`) and its ``compact:`` info."""
    members = data.members
    start = np.asarray(members.start, np.int64)
    offset = np.asarray(members.offset, np.int64)
    size = np.asarray(members.size, np.int64)
    counts = np.diff(start)
    starts = np.zeros(len(data.shards) + 1, np.int64)
    np.cumsum([int(s["samples"]) for s in data.shards], out=starts[1:])
    has, ids = _pattern(members, counts)
    k = len(ids)
    # plain tar: member j+1's data starts one header after member j's data, rounded to 512
    plain = has.copy()
    reg = np.flatnonzero(has)
    plain[reg] &= offset[start[reg]] % 512 == 0
    for j in range(k - 1):
        r = start[reg] + j
        want = offset[r] + (size[r] + 511) // 512 * 512 + 512
        plain[reg] &= offset[r + 1] == want
    follows = _per_shard_all(plain, starts)
    per_sample = np.repeat(follows, np.diff(starts))
    explicit = np.flatnonzero(~per_sample)
    done = np.zeros(len(follows) + 1, np.int64)
    np.cumsum(np.where(follows, 0, np.diff(starts)), out=done[1:])
    files: dict[str, np.ndarray] = {
        "compact/shard/members_at.npy": np.where(follows, -1, done[:-1]).astype(np.int64)
    }
    first = np.where(per_sample, start[:-1], 0)
    firsts = np.where(per_sample, offset[np.minimum(first, max(len(offset) - 1, 0))], 0) // 512
    files.update(_offset_blocks(firsts, starts, follows, CompactInfo().block))
    for j in range(k):
        sz = np.where(per_sample, size[np.minimum(first + j, max(len(size) - 1, 0))], 0)
        files[f"compact/size.{j}.npy"] = sz.astype(smallest_dtype(sz))
    rows = _rows_of(start, explicit)
    e_start = np.zeros(len(explicit) + 1, np.int64)
    np.cumsum(counts[explicit], out=e_start[1:])
    files.update(
        {
            "compact/explicit/start.npy": e_start,
            "compact/explicit/ext.npy": np.asarray(members.ext[rows], np.int32),
            "compact/explicit/offset.npy": offset[rows],
            "compact/explicit/size.npy": size[rows],
        }
    )
    koff = np.asarray(data.key_offsets, np.int64)
    kbytes = np.asarray(data.keys, np.uint8)
    numeric, key_first, width = _numeric_keys(kbytes, koff, starts)
    kexp = np.flatnonzero(~np.repeat(numeric, np.diff(starts)))
    kdone = np.zeros(len(numeric) + 1, np.int64)
    np.cumsum(np.where(numeric, 0, np.diff(starts)), out=kdone[1:])
    k_off = np.zeros(len(kexp) + 1, np.int64)
    np.cumsum(koff[kexp + 1] - koff[kexp], out=k_off[1:])
    files.update(
        {
            "compact/shard/keys_at.npy": np.where(numeric, -1, kdone[:-1]).astype(np.int64),
            "compact/shard/key_first.npy": key_first,
            "compact/shard/key_width.npy": width,
            "compact/keys.npy": kbytes[_rows_of(koff, kexp)],
            "compact/keys.offsets.npy": k_off,
        }
    )
    col_files, info = _columns(data, members, counts)
    files.update(col_files)
    pattern = tuple(members.exts[e] for e in ids)
    return files, msgspec.structs.replace(info, pattern=pattern)


def compact_info(info: CompactInfo) -> dict[str, Any]:
    """``info`` as ``info.yaml`` holds it."""
    return msgspec.to_builtins(info)
