"""Randomness reaches every decision: different blocks, epochs and seeds give different orders.

Each property only compares orders with enough freedom that a chance collision is negligible
(at least 5! orders per block, 10! per epoch); a step that reuses one key (one permutation for
every block, the same slice order every epoch, a seed that does not reach a view) fails them.
"""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from fpipe.core import Pipeline, chain
from fpipe.core.testing import run
from fpipe.plan import repeat, samples, slice_shuffle, window_shuffle

seeds = st.integers(0, 2**63)


def _indices(p: Pipeline) -> np.ndarray:
    _, out = run(p)
    return np.array([r.index[0] for r in out])


@given(seed=seeds, window=st.integers(5, 12), blocks=st.integers(3, 5))
def test_window_shuffle_blocks_get_different_permutations(seed, window, blocks):
    n = window * blocks
    order = _indices(Pipeline(chain(repeat(samples(n), 1), window_shuffle(window)), seed))
    perms = {tuple(order[b * window : (b + 1) * window] - b * window) for b in range(blocks)}
    assert len(perms) > 1, f"every block of {window} refs got the same permutation"


@given(seed=seeds, slice_size=st.integers(1, 4), slices=st.integers(10, 30), window=st.none()
       | st.integers(2, 8))  # fmt: skip
def test_epochs_get_different_orders(seed, slice_size, slices, window):
    n = slice_size * slices
    stages = [window_shuffle(window)] if window else []
    p = Pipeline(chain(repeat(slice_shuffle(samples(n), slice_size), 2), *stages), seed)
    _, out = run(p)
    by_epoch = [[r.index[0] for r in out if r.epoch[0] == e] for e in (0, 1)]
    assert sorted(by_epoch[0]) == sorted(by_epoch[1]) == list(range(n))
    assert by_epoch[0] != by_epoch[1], "epoch 1 repeats the order of epoch 0"


@given(
    seeds=st.lists(seeds, min_size=2, max_size=2, unique=True),
    slice_size=st.integers(1, 4),
    slices=st.integers(10, 30),
    window=st.none() | st.integers(5, 8),
)
def test_seeds_get_different_orders(seeds, slice_size, slices, window):
    n = slice_size * slices

    def make(seed, shuffle_slices):
        view = slice_shuffle(samples(n), slice_size) if shuffle_slices else samples(n)
        stages = [window_shuffle(window)] if window else []
        return Pipeline(chain(repeat(view, 1), *stages), seed)

    a, b = (_indices(make(s, True)) for s in seeds)
    assert not np.array_equal(a, b), "two seeds give the same order"
    if window:  # the window shuffle alone must also depend on the seed
        a, b = (_indices(make(s, False)) for s in seeds)
        assert not np.array_equal(a, b), "two seeds give the same window-shuffle order"
