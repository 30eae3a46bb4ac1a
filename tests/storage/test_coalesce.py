"""Close ranges of a batch read with one ``pread`` (``fpipe.storage.read.coalesce``): the same
bytes as one read per range, and each sample's error still its own."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from fpipe.core.errors import BadSampleError
from fpipe.storage import open_dataset, prepare_dataset
from fpipe.storage.read.coalesce import groups, read_grouped, read_spans
from tests.storage.helpers import file_reads, write_tar

_FILE = bytes(range(256)) * 160  # 40,960 bytes
_FILES = {"a": _FILE, "b": _FILE[::-1]}


def _pread(path: str, offset: int, size: int) -> bytes:
    return _FILES[path][offset : offset + size]


_RANGE = st.tuples(st.sampled_from(sorted(_FILES)), st.integers(0, 42_000), st.integers(0, 9000))


@settings(max_examples=150, deadline=None)
@given(ranges=st.lists(_RANGE, max_size=30), budget=st.sampled_from([0, 512, 8192, 1 << 16]))
def test_grouped_reads_give_each_range_its_own_bytes(ranges, budget):
    made: list[tuple] = []

    def pread(*r):
        made.append(r)
        return _pread(*r)

    assert read_grouped(pread, ranges, budget) == [_pread(*r) for r in ranges]
    assert len(made) == len(groups(ranges, budget)) <= sum(r[2] > 0 for r in ranges)
    spans = read_spans(_pread, ranges, budget)  # where each range lies in its group's read
    assert [buf[at : at + r[2]] for (buf, at), r in zip(spans, ranges)] == [
        _pread(*r) for r in ranges
    ]


@settings(max_examples=100, deadline=None)
@given(ranges=st.lists(_RANGE, min_size=1, max_size=20), bad=st.integers(0, 40_000))
def test_a_failing_group_read_fails_only_the_ranges_that_fail_alone(ranges, bad):
    """A group's read that raises is made again range by range: the error goes to the ranges
    over the bad byte, their neighbours get their bytes."""

    def pread(path, offset, size):
        if offset <= bad < offset + size:
            raise OSError(f"bad byte {bad}")
        return _pread(path, offset, size)

    def pread_many(rs):  # a file layer's batch of reads: each read's bytes or its error
        out = []
        for r in rs:
            try:
                out.append(pread(*r))
            except OSError as e:
                out.append(e)
        return out

    got = read_grouped(pread, ranges, 1 << 16)
    spans = read_spans(pread, ranges, 1 << 16)
    spans_many = read_spans(pread, ranges, 1 << 16, pread_many)
    for (path, off, size), g, span, many in zip(ranges, got, spans, spans_many):
        if off <= bad < off + size:
            assert isinstance(g, OSError) and isinstance(span, OSError)
            assert isinstance(many, OSError)
        else:
            buf, at = span
            assert g == _pread(path, off, size) == buf[at : at + size]
            buf, at = many
            assert buf[at : at + size] == g


def _text_set(root, n: int = 12):
    write_tar(root / "s-0.tar", [(f"{i:04d}", {"txt": f"text {i}".encode()}) for i in range(n)])
    prepare_dataset(root, fields={"text": "txt"})
    return open_dataset(root)


def _read_many_counted(ds, order) -> tuple[list, list]:
    """``ds.read_many(order)`` and the reads it made."""
    return file_reads(ds.reader._files, lambda: ds.read_many(order))


def test_a_batch_of_small_samples_is_one_read(tmp_path):
    ds = _text_set(tmp_path)
    got, made = _read_many_counted(ds, [7, 0, 3, 11, 5])
    assert [(k, v) for k, v in got] == [(ds.key(i), ds.read(i)) for i in (7, 0, 3, 11, 5)]
    assert len(made) == 1


def test_a_corrupt_sample_in_a_merged_read_is_its_own_error(tmp_path):
    """Sample 5's tar header rewritten after prepare (another name, same length): the merged
    read refuses sample 5 by its own key, and its neighbours in the same read are read."""
    ds = _text_set(tmp_path)
    shard = tmp_path / "s-0.tar"
    data = bytearray(shard.read_bytes())
    at = data.index(b"0005.txt")
    data[at : at + 8] = b"0099.txt"
    fd = os.open(shard, os.O_WRONLY)
    try:
        os.pwrite(fd, bytes(data[at : at + 8]), at)  # in place: the open reader sees it
    finally:
        os.close(fd)
    got, made = _read_many_counted(ds, [4, 5, 6, 2])
    assert len(made) == 1  # one read for the four samples
    errors = {k: v for k, v in got if isinstance(v, Exception)}
    assert list(errors) == ["s-0/0005"]
    err = errors["s-0/0005"]
    assert isinstance(err, BadSampleError) and "stale shard" in str(err) and err.key == "s-0/0005"
    rest = [v for k, v in got if k != "s-0/0005"]
    assert rest == [{"txt": f"text {i}".encode()} for i in (4, 6, 2)]


def test_a_shard_ending_inside_a_merged_read_fails_the_samples_past_its_end(tmp_path):
    """The shard cut short after prepare, inside sample 6: one read for the five samples; those
    before the end are read, each one after it is refused by its own key, "shard truncated"."""
    ds = _text_set(tmp_path)
    shard = tmp_path / "s-0.tar"
    data = shard.read_bytes()
    os.truncate(shard, data.index(b"text 6"))  # in place: the open reader sees it
    got, made = _read_many_counted(ds, [8, 4, 6, 5, 7])
    assert len(made) == 1
    assert [v for _, v in got[1:2] + got[3:4]] == [{"txt": b"text 4"}, {"txt": b"text 5"}]
    for (key, err), i in zip(got[0:1] + got[2:3] + got[4:5], (8, 6, 7)):
        assert isinstance(err, BadSampleError) and err.key == key == f"s-0/{i:04d}"
        assert "shard truncated" in err.reason and err.path.endswith("s-0.tar")
