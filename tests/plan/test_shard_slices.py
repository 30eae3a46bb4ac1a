"""Energon's slices (fpipe/plan/shard_slices.py): starts along shards and worker parts, cut by
Energon's rule, visited in a keyed order; and the interleave of such slices."""

from __future__ import annotations

import numpy as np
import pytest

from fpipe.core.errors import ConfigError
from fpipe.plan import samples, slice_shuffle
from fpipe.plan.shard_slices import RaggedSlices, ragged_slice_shuffle, shard_slice_starts
from fpipe.plan.slice_order import interleave


def _runs(order: list[int], starts: np.ndarray, size: int) -> list[list[int]]:
    """``order`` cut where it leaves a slice: each run must be one whole slice, in order."""
    bounds = list(starts) + [size]
    slices = [list(range(a, b)) for a, b in zip(bounds, bounds[1:])]
    runs, i = [], 0
    while i < len(order):
        s = next(s for s in slices if s[0] == order[i])
        runs.append(order[i : i + len(s)])
        assert runs[-1] == s
        i += len(s)
    return runs


def test_no_limit_gives_one_slice_per_shard():
    ids = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2])
    assert shard_slice_starts(ids, 9, None).tolist() == [0, 3, 5]
    assert shard_slice_starts(None, 9, None).tolist() == [0]  # a table: one shard


def test_a_limit_cuts_long_shards_as_energon_does():
    # Energon's _split_shard: more than 1.5 * k samples -> round(n / k) slices starting at
    # int(i * n / count); 7 / 2 = 3.5 rounds half to even (4 slices of 1.75)
    assert shard_slice_starts(None, 7, 2).tolist() == [0, 1, 3, 5]
    assert shard_slice_starts(None, 10, 3).tolist() == [0, 3, 6]
    assert shard_slice_starts(None, 4, 3).tolist() == [0]  # 4 <= 4.5: whole
    ids = np.repeat([0, 1], [10, 4])
    assert shard_slice_starts(ids, 14, 3).tolist() == [0, 3, 6, 10]


def test_cuts_start_slices_inside_a_shard():
    ids = np.zeros(10, dtype=np.int64)
    assert shard_slice_starts(ids, 10, None, cuts=[0, 5, 5, 10]).tolist() == [0, 5]


def test_bad_limit():
    with pytest.raises(ConfigError, match="max_samples_per_sequence"):
        shard_slice_starts(None, 5, 0)


@pytest.mark.parametrize("n, k", [(23, 4), (20, 5), (9, 1), (7, 10)])
def test_equal_slices_keep_slice_shuffles_order(n, k):
    fixed = slice_shuffle(samples(n), k)
    ragged = ragged_slice_shuffle(samples(n), RaggedSlices(np.arange(0, n, k), n))
    for epoch in range(3):
        a = fixed.gather(5, epoch, np.arange(n)).index
        assert np.array_equal(a, ragged.gather(5, epoch, np.arange(n)).index)


def test_each_slice_whole_and_in_order_in_a_new_order_per_epoch():
    starts = shard_slice_starts(np.repeat(np.arange(6), [5, 1, 7, 3, 9, 2]), 27, None)
    view = ragged_slice_shuffle(samples(27), RaggedSlices(starts, 27))
    orders = []
    for epoch in range(4):
        order = view.gather(3, epoch, np.arange(27)).index.tolist()
        assert sorted(order) == list(range(27))
        orders.append([run[0] for run in _runs(order, starts, 27)])
    assert len({tuple(o) for o in orders}) > 1
    # random access agrees with reading in order
    pos = np.array([26, 0, 13, 5])
    assert np.array_equal(view.gather(3, 1, pos).index, view.gather(3, 1, np.arange(27)).index[pos])


def test_interleave_of_ragged_slices_reads_each_slice_in_order():
    starts = np.array([0, 5, 6, 13, 16, 25])
    slices = RaggedSlices(starts, 27)
    view = interleave(ragged_slice_shuffle(samples(27), slices), 2, 0, slices=slices)
    layout = ragged_slice_shuffle(samples(27), slices).gather(3, 0, np.arange(27)).index.tolist()
    order = view.gather(3, 0, np.arange(27)).index.tolist()
    assert sorted(order) == list(range(27))
    bounds = list(starts) + [27]
    for a, b in zip(bounds, bounds[1:]):
        assert [i for i in order if a <= i < b] == list(range(a, b))
    # each block holds two slices of the epoch's order
    runs = _runs(layout, starts, 27)
    first = set(runs[0] + runs[1])
    assert set(order[: len(first)]) == first
    assert order != layout


def test_edges_of_the_cutting_rule():
    assert shard_slice_starts(None, 0, 3).tolist() == []  # nothing to cut
    assert np.issubdtype(shard_slice_starts(None, 0, None).dtype, np.integer)
    assert shard_slice_starts(None, 1, None).tolist() == [0]
    assert shard_slice_starts(None, 3, 1).tolist() == [0, 1, 2]  # k = 1: one sample each
    assert shard_slice_starts(None, 3, 2).tolist() == [0]  # exactly 1.5 * k: still whole
    assert shard_slice_starts(None, 4, 2).tolist() == [0, 2]
    assert shard_slice_starts(None, 6, 4).tolist() == [0]
    assert shard_slice_starts(None, 5, None, cuts=[1]).tolist() == [0, 1]
    assert shard_slice_starts(np.array([0, 1, 1, 1]), 4, None).tolist() == [0, 1]
    with pytest.raises(ConfigError, match="shard_ids has 3 entries for 5 positions"):
        shard_slice_starts(np.zeros(3), 5, None)


@pytest.mark.parametrize("starts, size", [([], 5), ([1, 3], 5), ([0, 2, 2], 5), ([0, 5], 5)])
def test_slice_starts_must_increase_from_0_below_the_size(starts, size):
    with pytest.raises(ConfigError, match="slice starts must increase from 0 below 5"):
        RaggedSlices(np.array(starts, dtype=np.int64), size)


def test_the_config_names_the_slices():
    a, b = RaggedSlices([0, 2, 5], 8), RaggedSlices([0, 3, 5], 8)
    assert a.config.num_slices == 3 and a.config == RaggedSlices([0, 2, 5], 8).config
    assert a.config != b.config
    # the same slices given as another integer type are the same slices
    assert RaggedSlices(np.array([0, 2, 5], dtype=np.int32), 8).config == a.config


def test_the_view_wraps_its_input_and_passes_the_key_on():
    # position p reads the input at the ragged order's source position, with the same key
    base = slice_shuffle(samples(9, columns={"t": np.arange(9)}), 2)
    for starts in ([0, 4, 5], [0]):
        slices = RaggedSlices(np.array(starts), 9, name="shards")
        view = ragged_slice_shuffle(base, slices)
        assert (view.name, view.config, view.size, view.inputs) == ("shards", slices.config, 9,
                                                                    (base,))  # fmt: skip
        for epoch in range(3):
            src = ragged_slice_shuffle(samples(9), slices).gather(4, epoch, np.arange(9)).index
            assert view.gather(4, epoch, np.arange(9)) == base.gather(4, epoch, src)
    with pytest.raises(ConfigError, match="slices cover 9 positions, the view has 8"):
        ragged_slice_shuffle(samples(8), slices)


def test_two_slices_swap_in_some_epochs_and_one_slice_stays_put():
    two = ragged_slice_shuffle(samples(5), RaggedSlices([0, 2], 5))
    firsts = {int(two.gather(1, e, np.arange(5)).index[0]) for e in range(12)}
    assert firsts == {0, 2}
    one = RaggedSlices([0], 5)
    assert interleave(ragged_slice_shuffle(samples(5), one), 2, 0, slices=one).gather(
        1, 3, np.arange(5)
    ).index.tolist() == [0, 1, 2, 3, 4]


def test_the_memoized_layout_is_read_only():
    # the layout is shared between calls: a caller must not be able to change it
    shift, ends = RaggedSlices([0, 2, 3], 6).layout(1, 0)
    for arr in (shift, ends):
        with pytest.raises(ValueError):
            arr[0] = 99
