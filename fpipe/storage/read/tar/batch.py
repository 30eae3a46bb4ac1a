"""Reading a batch of samples of a prepared tar dataset at once (``Dataset.read_many``).

The index is looked up for the whole batch with numpy, through the index layout's accessor
(:mod:`fpipe.storage.read.tar.samples`): shard ids, keys and every member's row
(:meth:`fpipe.storage.read.members.FlatMembers.rows` and its compact counterpart), checked
as :meth:`TarReader.members` checks one sample (rows and extension ids inside the table, every
member inside its shard). Each sound sample whose wanted members lie in one byte range is then
one range, its members sliced out (a lone member is the range itself); close ranges of small
samples are read with one ``pread`` (:mod:`fpipe.storage.read.coalesce`). Samples that are not
(a ``.gz`` member wanted, members far apart, an entry failing a check, an index of format 1)
go through :meth:`TarReader.key` and :meth:`TarReader.read`, which raise the errors they
always raise; an error is returned in the sample's place, not raised. As
:meth:`TarReader.read` does, each read checks one tar header against the index (the second
member's, between the members read; a lone member's read starts at its own header), so a shard
changed after prepare gives a "stale shard" error, not other samples' bytes.
"""

from __future__ import annotations

import numpy as np

from fpipe.core.errors import BadSampleError
from fpipe.decode.extensions import is_gz, strip_gz
from fpipe.decode.limits import DecodeLimits
from fpipe.storage.read._validate import header_mismatch, header_names, stale_reason
from fpipe.storage.read.coalesce import read_spans
from fpipe.storage.read.members import MemberRows
from fpipe.storage.read.reader import read_each
from fpipe.storage.read.tar.index import READ_GAP, TAR_HEADER

__all__ = ["byte_ranges", "read_many"]


def read_many(
    reader, idx: np.ndarray, exts: frozenset[str] | None, limits: DecodeLimits | None = None
) -> list[tuple]:
    """``(key, members | exception)`` of samples ``idx`` of ``reader`` (a
    :class:`~fpipe.storage.read.tar.reader.TarReader`), in order; ``.gz`` members are inflated
    within ``limits`` (by :meth:`TarReader.read`)."""
    out: list[tuple] = [()] * len(idx)
    plan = _plan(reader, idx, exts)
    slow = list(range(len(idx))) if plan is None else _read_planned(reader, plan, out)
    done = read_each(
        (int(idx[j]) for j in slow), lambda i: (reader.key(i), reader.read(i, exts, limits))
    )
    for j, sample in zip(slow, done):
        out[j] = sample
    return out


def byte_ranges(reader, idx: np.ndarray, exts: frozenset[str] | None) -> list[tuple] | None:
    """``(path, offset, size)`` of the reads :func:`read_many` (and ``reader.read``) make for
    the samples ``idx`` it plans at once, in sample order; None where the index cannot be
    planned so (format 1). A sample the plan leaves to ``reader.read`` (or whose entry is bad)
    gets ``reader``'s own ranges for it (:meth:`TarReader.byte_ranges` of that sample alone)."""
    plan = _plan(reader, idx, exts, with_keys=False)
    if plan is None:
        return None
    ranges: list[tuple] = []
    paths = reader._paths
    for j, good in enumerate(plan.ok.tolist()):
        if not good:
            ranges.extend(reader.byte_ranges_each([int(idx[j])], exts))
            continue
        s, a, b = plan.sid[j], plan.lo[j], plan.hi[j]
        if b <= a:
            continue  # no wanted member: no read
        path = paths.get(s)
        if path is None:
            try:
                path = reader.cached_shard_path(s)
            except OSError:
                continue  # the read names the shard that cannot be opened
        ranges.append((path, a, b - a))
    return ranges


class _Plan:
    """Per sample of the batch: sound and readable in one range (``ok``), shard id, member
    key, byte range ``lo..hi``; the wanted members' rows from ``first[j]`` to ``first[j+1]``."""

    __slots__ = ("first", "hi", "keys", "lo", "names", "offset", "ok", "raw", "sid", "size")

    def __init__(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)


def _plan(
    reader, idx: np.ndarray, exts: frozenset[str] | None, with_keys: bool = True
) -> _Plan | None:
    rec = reader._record
    index = reader._samples  # the index layout's accessor (.samples)
    if not index.batched or not len(idx) or not rec.members:  # format 1: one at a time
        return None
    n = len(idx)
    sid = index.shard_ids(idx)
    ok = (sid >= 0) & (sid < len(rec.shards))
    sid = np.where(ok, sid, 0)
    if with_keys:
        raw, good_keys = index.keys(idx)
        ok &= good_keys
    rows: MemberRows = index.members.rows(idx)
    ok &= rows.ok
    owner, off, size = rows.owner, rows.offset, rows.size
    # every member inside its shard (gzip shards: offsets are in the decompressed copy)
    # the batch's shards only: O(batch), whatever the number of shards in the index
    uniq, inv = np.unique(sid, return_inverse=True)
    sizes = np.asarray([rec.shards[s].bytes for s in uniq.tolist()], dtype=np.int64)
    gz = np.asarray([reader._gz[s] for s in uniq.tolist()], dtype=bool)
    limit, gz_shard = sizes[inv][owner], gz[inv][owner]
    bad = (off < TAR_HEADER) | (size < 0) | ((limit >= 0) & (off + size > limit) & ~gz_shard)
    names = list(rec.members)
    wanted = np.asarray([exts is None or strip_gz(e) in exts for e in names], dtype=bool)
    gz_member = np.asarray([is_gz(e) for e in names], dtype=bool)
    w = wanted[rows.ext]
    bad |= w & gz_member[rows.ext]  # gunzipped under the base name within limits by read()
    ok &= np.bincount(owner[bad], minlength=n) == 0
    wo, woff, wsize = owner[w], off[w], size[w]
    count = np.bincount(wo, minlength=n)
    lo = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(lo, wo, woff)
    hi = np.zeros(n, dtype=np.int64)
    np.maximum.at(hi, wo, woff + wsize)
    total = np.zeros(n, dtype=np.int64)
    np.add.at(total, wo, wsize)
    some = count > 0
    lo = np.where(some, lo, 0)
    ok &= ~some | (hi - lo <= total + READ_GAP)  # else one read per member: read() does it
    lo = np.where(count == 1, lo - TAR_HEADER, lo)  # a lone member's read starts at its header
    first = np.zeros(n + 1, np.int64)
    np.cumsum(count, out=first[1:])
    if not with_keys:
        raw = []
    elif not ok.all():
        raw = [k if good else b"" for k, good in zip(raw, ok.tolist())]
    return _Plan(
        ok=ok,
        sid=sid.tolist(),
        raw=raw,
        keys=[k.decode("utf-8", "surrogateescape") for k in raw],
        lo=lo.tolist(),
        hi=hi.tolist(),
        first=first.tolist(),
        names=[names[e] for e in rows.ext[w].tolist()],
        offset=woff.tolist(),
        size=wsize.tolist(),
    )


def _read_planned(reader, plan: _Plan, out: list) -> list[int]:
    """Read the sound samples of ``plan`` into ``out``; the positions left to read one by
    one. Close ranges are read together (:func:`fpipe.storage.read.coalesce.read_spans`,
    within the file layer's ``merge_budget``: none on object storage, whose ``prefetch``
    groups its GETs itself); each sample is still checked, and fails, on its own bytes."""
    slow = np.flatnonzero(~plan.ok).tolist()
    files = reader._files
    paths = reader._paths
    sid, lo, hi, keys, raw = plan.sid, plan.lo, plan.hi, plan.keys, plan.raw
    names, offset, size, first = plan.names, plan.offset, plan.size, plan.first
    # a lone member's header is checked against b"<key>.<ext>": the ".<ext>" ends made once
    dotted = {n: b"." + n.encode("utf-8", "surrogateescape") for n in set(names)}
    # The loops below run per sample: what is per shard (its file, its key's "<stem>/") is
    # looked up once per shard of the batch.
    shard_of: dict[int, tuple[str, str] | None] = {}
    todo: list[int] = []
    ranges: list[tuple[str, int, int]] = []
    for j in np.flatnonzero(plan.ok).tolist():
        s = sid[j]
        shard = shard_of.get(s, False)
        if shard is False:
            path = paths.get(s)  # reader.cached_shard_path(s) once it succeeded
            if path is None:
                try:
                    path = reader.cached_shard_path(s)
                except OSError:
                    path = None  # read() names the shard that cannot be opened
            shard = shard_of[s] = None if path is None else (path, f"{reader._stems[s]}/")
        if shard is None:
            slow.append(j)
            continue
        todo.append(j)
        a, b = lo[j], hi[j]
        ranges.append((shard[0], a, b - a if b > a else 0))
    spans = read_spans(
        files.pread,
        ranges,
        getattr(files, "merge_budget", 0),
        getattr(files, "pread_many", None),
    )
    for j, got, (path, a, n) in zip(todo, spans, ranges):
        key = shard_of[sid[j]][1] + keys[j]  # type: ignore[index]  # a readable shard's
        if type(got) is not tuple:
            failed = BadSampleError(path, key, f"read failed: {got}")
            failed.__cause__ = got  # raised later, as it would be here: no descriptor left, say
            out[j] = (key, failed)
            continue
        buf, at = got
        if len(buf) - at < n:
            wanted = f"wanted bytes {a}..{hi[j]}, file ends at {a + len(buf) - at}"
            out[j] = (key, BadSampleError(path, key, f"shard truncated: {wanted}"))
            continue
        r0, r1 = first[j], first[j + 1]
        if r1 == r0 + 1:  # one member: the read is its header and its bytes
            name = names[r0]
            if header_names(buf, at, raw[j] + dotted[name]):
                out[j] = (key, {name: buf[at + TAR_HEADER : at + n]})
                continue
        if at or len(buf) != n:
            buf = buf[at : at + n]  # the sample's own bytes: a group's read is shared
        stale = _check_header(reader, plan, j, buf, path, key) if r1 > r0 else None
        if stale is not None:
            out[j] = (key, stale)
        elif r1 == r0 + 1:
            out[j] = (key, {names[r0]: buf[TAR_HEADER:]})
        else:
            mv = memoryview(buf)
            cut = {}
            for r in range(r0, r1):
                o = offset[r] - a
                cut[names[r]] = bytes(mv[o : o + size[r]])
            out[j] = (key, cut)
    return slow


def _check_header(reader, plan: _Plan, j: int, buf: bytes, path: str, key: str):
    """None if the tar header checked for sample ``j`` (read in ``buf``, from ``plan.lo[j]``)
    names the member the index has there, else the "stale shard" :class:`BadSampleError`."""
    r0, r1 = plan.first[j], plan.first[j + 1]
    r = r0 if r1 == r0 + 1 else sorted(range(r0, r1), key=plan.offset.__getitem__)[1]
    at = plan.offset[r] - TAR_HEADER - plan.lo[j]
    expected = plan.raw[j] + b"." + plan.names[r].encode("utf-8", "surrogateescape")
    found = header_mismatch(buf[at : at + TAR_HEADER], expected)
    if found is None:
        return None
    shard = reader._record.shards[plan.sid[j]].name
    want = expected.decode("utf-8", "replace")
    return BadSampleError(
        path, key, stale_reason(reader.path, shard, plan.offset[r] - TAR_HEADER, want, found)
    )
