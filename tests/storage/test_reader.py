"""FileCache: bounded LRU of descriptors, positional reads, fork and pickle safety."""

from __future__ import annotations

import os
import pickle

import pytest

from fpipe.storage import FileCache, open_dataset, prepare_dataset
from tests.storage.helpers import make_image_caption_dataset


def test_lru_bound_and_pread(tmp_path):
    files = []
    for i in range(5):
        p = tmp_path / f"f{i}"
        p.write_bytes(bytes(range(256)) * 4)
        files.append(str(p))
    fc = FileCache(max_open=2)
    for i, f in enumerate(files):
        assert fc.pread(f, 10 + i, 3) == bytes([10 + i, 11 + i, 12 + i])
        assert len(fc) <= 2
    assert fc.pread(files[0], 1020, 10) == bytes([252, 253, 254, 255])  # short at EOF
    fc.close()
    assert len(fc) == 0
    with pytest.raises(ValueError):
        FileCache(0)


def test_pread_many_reads_what_pread_reads_and_keeps_each_error_with_its_range(tmp_path):
    """Ranges of several files in any order, one past a file's end, one of a file that does not
    exist: each gets ``pread``'s bytes, or its own open error; every lease is given back."""
    from fpipe.storage.read import reader as reader_mod

    paths = []
    for i in range(3):
        p = tmp_path / f"f{i}"
        p.write_bytes(bytes((i * 7 + k) % 256 for k in range(1000)))
        paths.append(str(p))
    missing = str(tmp_path / "gone")
    ranges = [
        (paths[2], 5, 10),
        (paths[0], 0, 1),
        (missing, 0, 4),
        (paths[2], 990, 50),  # past the end: the 10 bytes there are
        (paths[1], 400, 300),
        (paths[0], 999, 1),
        (missing, 8, 4),
    ]
    fc = FileCache(max_open=1)  # each file evicts the one before: leases outlive evictions
    got = fc.pread_many(ranges)
    for r, g in zip(ranges, got, strict=True):
        if r[0] == missing:
            assert isinstance(g, FileNotFoundError) and g.filename == missing
        else:
            assert g == FileCache().pread(*r)
    assert len(got[3]) == 10
    assert not any(reader_mod._BUSY.values())  # no read holds a descriptor any more
    fc.close()


def test_pickle_carries_no_descriptors(tmp_path):
    make_image_caption_dataset(tmp_path, shards=2, per_shard=2)
    prepare_dataset(tmp_path)
    ds = open_dataset(tmp_path)
    first = ds.read(0)
    assert len(ds._files) == 1 and len(ds._array)
    blob = pickle.dumps(ds)
    assert len(blob) < 500  # path only, no mapped arrays
    ds2 = pickle.loads(blob)
    assert len(ds2._files) == 0 and not len(ds2._array)
    assert ds2.read(0) == first


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_reads_after_fork_use_own_descriptors(tmp_path):
    expected = make_image_caption_dataset(tmp_path, shards=2, per_shard=3)
    prepare_dataset(tmp_path)
    ds = open_dataset(tmp_path)
    ds.read(0)
    parent_fd = next(iter(ds._files._fds.values()))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: read everything, report whether it reused the parent's descriptor
        try:
            os.close(r)
            ok = all(ds.read(i) == e["members"] for i, e in enumerate(expected))
            fresh = ds._files._pid == os.getpid()
            os.write(w, b"1" if ok and fresh else b"0")
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.waitpid(pid, 0)
    os.close(r)
    os.fstat(parent_fd)  # the parent's descriptor is still open and usable
    assert ds.read(5) == expected[5]["members"]


def test_torch_dataloader_workers(tmp_path):
    torch = pytest.importorskip("torch")
    expected = make_image_caption_dataset(tmp_path, shards=2, per_shard=4)
    prepare_dataset(tmp_path)
    ds = open_dataset(tmp_path)
    ds.read(0)  # the parent holds a descriptor before the workers fork

    class Wrap(torch.utils.data.Dataset):
        def __len__(self):
            return len(ds)

        def __getitem__(self, i):
            return ds.read(i)["txt"]

    loader = torch.utils.data.DataLoader(Wrap(), batch_size=None, num_workers=2)
    assert list(loader) == [e["members"]["txt"] for e in expected]


def test_consecutive_samples_are_consecutive_ranges(tmp_path):
    make_image_caption_dataset(tmp_path, shards=1, per_shard=6)
    prepare_dataset(tmp_path)
    ds = open_dataset(tmp_path)
    placed = [ds.reader.members(i) for i in range(6)]
    assert all(sorted(e for e, _, _ in p) == ["jpg", "json", "txt"] for p in placed)
    spans = [(p[0][1], p[-1][1] + p[-1][2]) for p in placed]  # one byte range per sample
    assert spans == sorted(spans) and all(a[1] < b[0] for a, b in zip(spans, spans[1:]))


def test_prefetch_checks_a_batch_of_indices_as_one_by_one(tmp_path):
    import numpy as np

    make_image_caption_dataset(tmp_path, shards=2, per_shard=3)
    prepare_dataset(tmp_path)
    ds = open_dataset(tmp_path)
    ds.prefetch(np.arange(6), frozenset({"jpg"}))  # in range: nothing to say
    for bad in (np.asarray([0, 6]), np.asarray([-1, 2]), [1, 7]):
        with pytest.raises(IndexError) as info:
            ds.prefetch(bad, frozenset({"jpg"}))
        wrong = int([i for i in bad if not 0 <= i < 6][0])
        assert str(info.value) == f"sample index {wrong} out of range for 6 samples"
