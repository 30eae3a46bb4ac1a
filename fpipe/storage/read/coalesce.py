"""Close byte ranges of a batch read together: one read for neighbouring small samples.

A batch's samples are read through the index, one byte range each (a sample's members are
contiguous in its tar shard). Each read has a fixed cost beyond its bytes: a system call and
a few Python calls on a local file, a request on object storage. For small samples (text,
token ids) that fixed cost dominates: ``bench/loader.py``'s text rows spent 16% of fpipe's
time in one ``pread`` per sample. :func:`groups` sorts a batch's ranges by file and offset and
puts a range into the group before it when reading it that way costs fewer bytes than the
fixed cost of a read of its own; :func:`read_grouped` makes one read per group and hands each
range its own bytes (:func:`read_spans`: where they lie in the group's read, for a reader that
copies only a part of them, a tar member without its header).

The rule: a range joins the group before it (same file) when the bytes it adds to copy, the
gap before it plus its own bytes (sliced out of the group's read, a second copy), are at most
``budget``, the bytes one read's fixed cost would copy. Large samples (images) are read alone:
the copy of their bytes costs more than the read saved. A group spans at most
:data:`MAX_SPAN` bytes.

Budgets (measured, see :data:`LOCAL_BUDGET`): local files merge ranges within 8 KiB; object
storage (:meth:`~fpipe.storage.read.remote.RemoteFiles.prefetch`) within the 64 KiB a sample's
own read already spans between its members (``READ_GAP``), a GET costing milliseconds.

Errors stay with their samples: a group's read that fails is made again range by range, so
each range gets the error its own read gives; a file that ends inside a group gives each range
what lies before the end (the reader's "shard truncated" check then names that sample), and
what a range's bytes hold (a stale tar header, say) is checked per sample as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["Group", "LOCAL_BUDGET", "MAX_SPAN", "groups", "read_grouped", "read_spans"]

#: Bytes one local read's fixed cost copies. Measured on the 2-core benchmark machine (page
#: cache warm): ``FileCache.pread`` of 1-2 KiB took 1.3-1.4 us, each further KiB 0.12-0.18 us
#: (reads of 8 KiB to 1 MiB): 1.2 us / 0.16 us per KiB = 7.5 KiB. A batch's reads now go
#: through ``FileCache.pread_many`` (one lease per file): 1.0 us a read of 1-2 KiB, 0.27 us
#: each further KiB up to 8 KiB, about 4 KiB; the text rows of ``bench/loader.py`` ran alike
#: with 4 and 8 KiB (80-82k samples/s each, 75k without merging), so 8 KiB stays.
LOCAL_BUDGET = 8 << 10
#: The most bytes one group's read spans (bounds the buffer a batch holds at once).
MAX_SPAN = 4 << 20

Range = tuple[str, int, int]  # (path, offset, size)


class Group:
    """One read: ``path`` from ``lo`` to ``hi``, serving ``members`` (positions in the ranges
    given to :func:`groups`)."""

    __slots__ = ("hi", "lo", "members", "path")

    def __init__(self, path: str, lo: int, hi: int, member: int):
        self.path, self.lo, self.hi, self.members = path, lo, hi, [member]

    @property
    def range(self) -> Range:
        return self.path, self.lo, self.hi - self.lo


def groups(ranges: Sequence[Range], budget: int) -> list[Group]:
    """The reads for ``ranges``, by file and offset (see the module's docstring). Empty
    ranges are in no group; a budget of 0 gives one group per range."""
    # Sorted by the whole range: two ranges of one file start at one offset only where they
    # are the same range (a sample twice in a batch), so this is the order by (file, offset),
    # ties kept in their order, without a key function called per range.
    order = sorted([k for k, r in enumerate(ranges) if r[2] > 0], key=ranges.__getitem__)
    out: list[Group] = []
    cur: Group | None = None
    # The loop runs per sample: the open group's file and bounds kept in locals.
    cur_path, lo, hi = None, 0, 0
    for k in order:
        path, off, size = ranges[k]
        end = off + size
        if (
            path == cur_path
            and (off - hi if off > hi else 0) + size <= budget
            and (end if end > hi else hi) - lo <= MAX_SPAN
        ):
            if end > hi:
                hi = cur.hi = end  # type: ignore[union-attr]  # set with cur_path
            cur.members.append(k)  # type: ignore[union-attr]
            continue
        cur = Group(path, off, end, k)
        cur_path, lo, hi = path, off, end
        out.append(cur)
    return out


def read_grouped(
    pread: Callable[[str, int, int], bytes], ranges: Sequence[Range], budget: int
) -> list[bytes | OSError]:
    """The bytes of each of ``ranges`` (fewer where the file ends), or the ``OSError`` its
    read raised, read with one ``pread`` per group of :func:`groups`."""
    out: list[bytes | OSError] = []
    for got, (_, _, size) in zip(read_spans(pread, ranges, budget), ranges):
        if type(got) is tuple:
            buf, at = got
            # a range read alone is its read as it came (no copy); a group's, its slice
            got = buf if at == 0 and len(buf) <= size else buf[at : at + size]
        out.append(got)
    return out


def read_spans(
    pread: Callable[[str, int, int], bytes],
    ranges: Sequence[Range],
    budget: int,
    pread_many: Callable[[list[Range]], list] | None = None,
) -> list[tuple[bytes, int] | OSError]:
    """Each of ``ranges`` as ``(buf, at)``: its bytes are ``buf[at : at + size]`` (fewer where
    the file ends), ``buf`` being its group's read (:func:`groups`), shared with the group's
    other ranges; or the ``OSError`` its read raised. :func:`read_grouped` without the copy of
    each range's bytes, for a caller that takes the part of them it needs (a tar member
    without its header). ``pread_many`` (the file layer's, where it has one:
    :meth:`~fpipe.storage.read.reader.FileCache.pread_many`) makes the groups' reads in one
    call, each read's bytes or its ``OSError`` in order."""
    out: list = [(b"", 0)] * len(ranges)
    gs = groups(ranges, budget)
    reads = [g.range for g in gs]
    bufs = pread_many(reads) if pread_many is not None else [_try(pread, r) for r in reads]
    for g, buf in zip(gs, bufs):
        members = g.members
        if isinstance(buf, OSError):
            if len(members) == 1:
                out[members[0]] = buf
                continue
            for k in members:  # each range's own read says what is wrong with it
                alone = _try(pread, ranges[k])
                out[k] = alone if isinstance(alone, OSError) else (alone, 0)
            continue
        if len(members) == 1:
            out[members[0]] = (buf, 0)
            continue
        if type(buf) is not bytes:
            buf = bytes(buf)  # sliced by the caller (a memoryview's slice would be a view)
        lo = g.lo
        for k in members:
            out[k] = (buf, ranges[k][1] - lo)
    return out


def _try(pread, r: Range) -> bytes | OSError:
    try:
        return pread(*r)
    except OSError as e:
        return e
