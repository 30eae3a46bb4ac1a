"""Energon's slice-order knobs as views (fpipe/plan/slice_order.py): tile
(``shuffle_over_epochs_multiplier``) and interleave (``parallel_shard_iters``), checked against
their documented behaviour, not their arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from fpipe.core.errors import ConfigError
from fpipe.core.stage import View
from fpipe.plan import samples, slice_shuffle
from fpipe.plan.shard_slices import RaggedSlices, ragged_slice_shuffle
from fpipe.plan.slice_order import (
    InterleaveConfig,
    TileConfig,
    highest_epoch,
    interleave,
    tile,
    tiles,
)


def _checked(view):
    """``view`` behind a check of View.gather's contract on what it is handed: an int epoch and
    int64 positions."""

    def gather(root, epoch, positions):
        assert isinstance(epoch, (int, np.integer)), epoch
        assert isinstance(positions, np.ndarray) and positions.dtype == np.int64, positions
        return view.gather(root, epoch, positions)

    return View(name="checked", config=view.config, size=view.size, gather=gather, inputs=(view,))


def _base(n: int):
    """A keyed view (it reads ``root``) that checks what it is handed."""
    return _checked(slice_shuffle(samples(n, columns={"t": np.arange(n) * 10}), 2))


def _all(view, root, epoch):
    return view.gather(root, epoch, np.arange(view.size, dtype=np.int64))


def test_tile_is_m_passes_each_with_its_own_epoch():
    inner = _base(7)
    v = tile(inner, 3)
    assert (v.size, v.name, v.config, v.inputs) == (21, "tile", TileConfig(times=3), (inner,))
    for epoch in (0, 2):
        full = _all(v, 5, epoch)
        for k in range(3):  # pass k of epoch e is the input's epoch e * 3 + k, in its order
            assert full[7 * k : 7 * (k + 1)] == _all(inner, 5, epoch * 3 + k)
        # random access, within one pass and across passes, agrees with the whole epoch
        for pos in ([9, 10], [20, 0, 8, 14, 7, 6], [13]):
            assert v.gather(5, epoch, np.array(pos)) == full[np.array(pos)]
    assert _all(v, 5, 0) != _all(v, 6, 0)  # the key reaches the input


def test_tile_of_one_pass_empty_views_and_bad_times():
    inner = _base(5)
    assert _all(tile(inner, 1), 3, 4) == _all(inner, 3, 4)
    assert len(tile(inner, 2).gather(3, 3, np.zeros(0, dtype=np.int64))) == 0
    one = tile(samples(1), 3)  # a one-sample view: that sample once per pass
    r = one.gather(0, 1, np.arange(3))
    assert r.index.tolist() == [0, 0, 0] and r.epoch.tolist() == [3, 4, 5]
    empty = tile(samples(0), 4)
    assert empty.size == 0 and len(_all(empty, 3, 1)) == 0
    with pytest.raises(ConfigError, match=r"shuffle_over_epochs_multiplier\) must be >= 1, got 0"):
        tile(inner, 0)


def test_tiles_finds_a_tile_anywhere_below():
    inner = _base(4)
    assert tiles(tile(inner, 2)) and tiles(slice_shuffle(tile(inner, 2), 3))
    assert not tiles(inner) and not tiles(interleave(inner, 2, 2))


@pytest.mark.parametrize("tiled", [False, True])
def test_highest_epoch_is_the_highest_epoch_of_the_refs_read(tiled):
    # The stream reads the view's epochs one after another; highest_epoch(start, stop) is the
    # highest ``epoch`` among its refs start..stop-1 (over a tile: the highest pass).
    view = slice_shuffle(tile(samples(4), 3), 2) if tiled else _base(12)
    stream = np.concatenate([_all(view, 7, e).epoch for e in range(4)])
    for start, stop in [(0, 1), (0, 12), (3, 12), (11, 13), (5, 20), (13, 14), (14, 24),
                        (20, 24), (12, 30), (30, 31), (0, 48), (40, 47)]:  # fmt: skip
        assert highest_epoch(view, 7, start, stop) == stream[start:stop].max(), (start, stop)


@pytest.mark.parametrize("parallel, slice_size", [(3, 4), (2, 5)])
def test_interleave_reads_each_block_of_slices_in_parallel(parallel, slice_size):
    n = 22  # the last block is short, and so may be its last slice
    inner = _base(n)
    v = interleave(inner, parallel, slice_size)
    assert (v.size, v.name, v.inputs) == (n, "interleave", (inner,))
    assert v.config == InterleaveConfig(parallel=parallel, slice_size=slice_size)
    block = parallel * slice_size
    orders = []
    for epoch in (0, 1):
        got = _all(v, 5, epoch).index.tolist()
        src = _all(inner, 5, epoch).index.tolist()  # the input's epoch, in its own order
        for b in range(0, n, block):
            assert sorted(got[b : b + block]) == sorted(src[b : b + block])
            for s in range(b, min(b + block, n), slice_size):  # each slice read in order
                piece = src[s : s + slice_size]
                assert [i for i in got[b : b + block] if i in piece] == piece
        assert got != src
        # random access, one position at a time, agrees with the whole epoch
        assert [v.gather(5, epoch, np.array([p])).index[0] for p in range(n)] == got
        pos = np.array([21, 3, 12])
        assert v.gather(5, epoch, pos).index.tolist() == [got[i] for i in pos]
        orders.append(got)
    assert orders[0] != orders[1]  # a new interleave every epoch
    assert _all(v, 5, 0).index.tolist() == orders[0]  # the same key, the same order
    assert _all(v, 6, 0).index.tolist() != orders[0]
    assert len(v.gather(5, 0, np.zeros(0, dtype=np.int64))) == 0


def test_interleave_of_one_slice_at_a_time_is_the_input():
    inner = _base(9)
    assert _all(interleave(inner, 1, 4), 2, 3) == _all(inner, 2, 3)
    starts = np.array([0, 4, 5])
    slices = RaggedSlices(starts, 9)
    ragged = ragged_slice_shuffle(inner, slices)
    assert _all(interleave(ragged, 1, 0, slices=slices), 2, 3) == _all(ragged, 2, 3)


def test_interleave_refuses_bad_knobs():
    inner = _base(4)
    for parallel, size in [(0, 2), (2, 0), (-1, 1)]:
        with pytest.raises(ConfigError, match="parallel_shard_iters.*>= 1"):
            interleave(inner, parallel, size)
    interleave(inner, 1, 1)  # the smallest valid knobs


@pytest.mark.parametrize("parallel", [2, 4])
def test_interleave_of_ragged_slices_takes_them_in_the_epochs_order(parallel):
    starts = np.array([0, 5, 6, 13, 16, 25])  # six slices: with 4 in parallel, a short block
    slices = RaggedSlices(starts, 27)
    inner = _checked(ragged_slice_shuffle(_base(27), slices))
    v = interleave(inner, parallel, 0, slices=slices)
    assert (v.size, v.name, v.inputs) == (27, "interleave", (inner,))
    assert v.config == InterleaveConfig(parallel=parallel, slice_size=0)
    lengths = np.diff(np.append(starts, 27))
    orders = []
    for epoch in (0, 1, 2):
        got = _all(v, 5, epoch).index.tolist()
        src = _all(inner, 5, epoch).index.tolist()
        # the slices in this epoch's order, as the input lays them out
        plain = _all(ragged_slice_shuffle(samples(27), slices), 5, epoch).index
        cut, pieces = 0, []
        while cut < 27:
            first = int(np.searchsorted(starts, plain[cut], side="right")) - 1
            pieces.append(src[cut : cut + lengths[first]])
            cut += lengths[first]
        at = 0
        for b in range(0, len(pieces), parallel):
            group = pieces[b : b + parallel]
            width = sum(len(p) for p in group)
            assert sorted(got[at : at + width]) == sorted(sum(group, []))
            for piece in group:
                assert [i for i in got[at : at + width] if i in piece] == piece
            at += width
        assert [v.gather(5, epoch, np.array([p])).index[0] for p in range(27)] == got
        orders.append(got)
    assert len({tuple(o) for o in orders}) > 1
    assert len(v.gather(5, 0, np.zeros(0, dtype=np.int64))) == 0
