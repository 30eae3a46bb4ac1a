"""slice_shuffle's documented rules (docs/design/rng.md): slot s of epoch e reads slice pi(s),
each slice in order, the key passed on to the input; reading a range in order (what repeat
does) gives what random access gives, on every path."""

from __future__ import annotations

import numpy as np
import pytest

from fpipe.core import ConfigError
from fpipe.core.stage import View
from fpipe.plan import samples, slice_shuffle, window_shuffle


def _checked(view):
    """``view`` behind a check of View.gather's contract: an int epoch, int64 positions."""

    def gather(root, epoch, positions):
        assert isinstance(epoch, (int, np.integer)), epoch
        assert isinstance(positions, np.ndarray) and positions.dtype == np.int64, positions
        return view.gather(root, epoch, positions)

    return View(name="checked", config=view.config, size=view.size, gather=gather, inputs=(view,))


def _keyed(n):
    # a keyed input (it reads root), so a shuffle above must hand it the key unchanged
    return _checked(slice_shuffle(samples(n, columns={"t": np.arange(n)}), 3, name="below"))


@pytest.mark.parametrize("n, k", [(10, 4), (2, 1), (7, 10), (3000, 1), (2600, 2), (200, 20)])
def test_the_shuffle_reads_its_input_at_the_slice_order_with_the_same_key(n, k):
    inner = _keyed(n)
    v = slice_shuffle(inner, k)
    assert (v.size, v.inputs) == (n, (inner,))
    plain = slice_shuffle(samples(n), k)
    for epoch in (0, 1):
        src = plain.gather(4, epoch, np.arange(n)).index
        full = v.gather(4, epoch, np.arange(n))
        assert full == inner.gather(4, epoch, src)
        # ranges read in order, on each path (long runs of short slices, slice by slice,
        # across blocks of slots, empty), give what random access gives
        ranges = [(0, n), (1, n), (n // 3, n // 2 + 1), (1023, 1100), (1000, 1025)]
        ranges += [(1100, 1200), (2040, 2100), (0, 50), (1, 3), (5, 5), (n, n)]
        for start, stop in ranges:
            start, stop = min(start, n), min(stop, n)
            assert v.take_range(4, epoch, start, stop) == full[start:stop], (start, stop)
        pos = np.array([n - 1, 0, n // 2])
        assert v.gather(4, epoch, pos) == full[pos]
        assert len(v.gather(4, epoch, np.zeros(0, dtype=np.int64))) == 0


def test_two_slices_swap_in_some_epochs():
    v = slice_shuffle(samples(4), 2)
    firsts = {int(v.gather(1, e, np.arange(4)).index[0]) for e in range(12)}
    assert firsts == {0, 2}


def test_window_of_one_is_valid():
    window_shuffle(1)
    with pytest.raises(ConfigError, match=r"shuffle_buffer_size\) must be >= 1, got 0"):
        window_shuffle(0)
