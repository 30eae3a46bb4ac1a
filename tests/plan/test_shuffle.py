"""slice_shuffle and window_shuffle: contract, coverage, golden order."""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fpipe.core import ConfigError, Pipeline, Refs, chain
from fpipe.core.testing import check_pipeline, check_stage, run
from fpipe.plan import batch, in_memory, repeat, samples, slice_shuffle, window_shuffle


@pytest.mark.parametrize("n,k", [(1, 1), (10, 3), (10, 10), (10, 20), (97, 7), (100, 10)])
def test_slice_shuffle_is_a_permutation_of_slices(n, k):
    v = slice_shuffle(samples(n), k)
    for epoch in range(3):
        idx = v.gather(5, epoch, np.arange(n)).index
        assert sorted(idx.tolist()) == list(range(n))
        # consecutive samples stay together inside each slice
        runs = np.split(idx, np.flatnonzero(np.diff(idx) != 1) + 1)
        # (adjacent slices may happen to join into a longer run; each run is whole slices)
        assert all(r[0] % k == 0 and ((r[-1] + 1) % k == 0 or r[-1] == n - 1) for r in runs)
        # random access agrees with the full epoch
        pos = np.array([n - 1, 0, n // 2])
        assert v.gather(5, epoch, pos).index.tolist() == idx[pos].tolist()


def test_slice_shuffle_changes_per_epoch_and_seed():
    v = slice_shuffle(samples(1000), 10)
    e0 = v.gather(1, 0, np.arange(1000)).index.tolist()
    assert e0 != v.gather(1, 1, np.arange(1000)).index.tolist()
    assert e0 != v.gather(2, 0, np.arange(1000)).index.tolist()


def test_window_shuffle_contract():
    check_stage(
        lambda: window_shuffle(7),
        lambda: repeat(in_memory(Refs.of(index=np.arange(50))), 2),
        cut_points=[0, 1, 6, 7, 8, 49],
    )


def test_window_shuffle_permutes_within_blocks():
    p = Pipeline(chain(repeat(samples(20), 1), window_shuffle(8)), seed=3)
    _, out = run(p)
    idx = [r.index[0] for r in out]
    assert sorted(idx[:8]) == list(range(8)) and sorted(idx[8:16]) == list(range(8, 16))
    assert sorted(idx[16:]) == list(range(16, 20)) and idx != list(range(20))


def test_golden_order():
    """ITERATION ORDER: changing this output is a declared break (docs/compatibility.md)."""
    p = Pipeline(
        chain(repeat(slice_shuffle(samples(30), 4), 2), window_shuffle(6), batch(5)), seed=42
    )
    _, out = run(p, limit=3)
    assert [r.refs.index.tolist() for r in out] == GOLDEN


GOLDEN = [[8, 14, 13, 12, 15], [9, 21, 11, 28, 29], [10, 20, 0, 23, 1]]


def test_bad_config():
    with pytest.raises(ConfigError, match="shuffle_buffer_size"):
        window_shuffle(0)
    with pytest.raises(ConfigError, match="max_samples_per_sequence"):
        slice_shuffle(samples(3), 0)


def test_full_chain_contract():
    def make():
        return Pipeline(
            chain(repeat(slice_shuffle(samples(40), 3), 2), window_shuffle(9), batch(4)), 1
        )

    check_pipeline(make, cut_points=[0, 1, 9, 10, 19])


@given(
    n=st.integers(1, 5000),
    k=st.integers(1, 40),
    epoch=st.integers(0, 3),
    bounds=st.tuples(st.integers(0, 5000), st.integers(0, 5000)),
)
@example(n=3001, k=2, epoch=1, bounds=(100, 2990))  # 1,501 slices: two blocks of slot orders
@example(n=30000, k=17, epoch=1, bounds=(17000, 18000))  # slice by slice, across two blocks
@example(n=4100, k=1, epoch=0, bounds=(1000, 4100))
def test_slice_shuffle_range_path_equals_general_path(n, k, epoch, bounds):
    v = slice_shuffle(samples(n), k)
    start, stop = sorted(min(b, n) for b in bounds)
    fast = v.take_range(9, epoch, start, stop)
    assert fast == v.gather(9, epoch, np.arange(start, stop, dtype=np.int64))
