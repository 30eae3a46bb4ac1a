"""The pieces of a blend by units (``unit="tokens"``), as documented (docs/design/blend.md, "By
units"; docs/steering.md, token blends):

* a sample counts ``max(1, round(value))`` units of its column; a missing column, a negative
  value or a non-number is refused with a ConfigError naming the dataset (and the sample);
* segments of constant weights start at every schedule point; a linear schedule's every
  1,024 positions from a point, each with the weights at its middle ``(lo + hi - 1) // 2``;
* within a segment the position goes to the smallest tag ``(2 S_d + l) / (2 w_d)``, ties to
  the lower dataset; a dataset of weight 0 is never chosen;
* the state's unit counters are 6 bytes each, little-endian, and refused past 2**48.
"""

import numpy as np
import pytest

from fpipe.core import ConfigError, Refs
from fpipe.plan._blend_units import (
    COUNTER_BYTES,
    LINEAR_STEP,
    check_counter,
    pack_counters,
    segment,
    take_by_units,
    units_of,
    unpack_counters,
)
from fpipe.plan.blend_choice import WeightSchedule


def refs_with(tokens, start=0):
    return Refs.of(index=np.arange(start, start + len(tokens)), tokens=np.asarray(tokens))


# -- units of a sample ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "values, units",
    [
        ([5, 1, 12], [5, 1, 12]),
        ([0, 1, 2], [1, 1, 2]),  # at least one unit
        ([0.2, 1.4, 1.6, 2.5, 7.0], [1, 1, 2, 2, 7]),  # rounded (half to even)
        ([2**40], [2**40]),
    ],
)
def test_a_sample_counts_its_rounded_value_and_at_least_one_unit(values, units):
    got = units_of(refs_with(values), "tokens", "web")
    assert got.tolist() == units and got.dtype == np.int64


def test_units_of_an_object_column_of_numbers():
    got = units_of(refs_with(np.array([3, 4.0, 1], dtype=object)), "tokens", "web")
    assert got.tolist() == [3, 4, 1]


def test_a_missing_column_names_the_dataset_and_the_columns_it_has():
    with pytest.raises(ConfigError) as err:
        units_of(Refs.of(index=[0, 1]), "tokens", "web")
    msg = str(err.value)
    assert "dataset 'web' has no index column 'tokens'" in msg
    assert "['dataset', 'epoch', 'index']" in msg
    assert "prepare it with that column or pick another unit" in msg


@pytest.mark.parametrize(
    "values, bad_index, shown",
    [
        ([3, -1, 4], 11, "-1.0"),
        ([3, 2, -0.5], 12, "-0.5"),
        ([np.nan, 1, 1], 10, "nan"),
        ([1, np.inf, 1], 11, "inf"),
        ([1, 2, -np.inf], 12, "-inf"),
        ([1, None, -1], 11, "None"),
    ],
)
def test_a_negative_or_non_number_is_refused_naming_dataset_and_sample(values, bad_index, shown):
    refs = refs_with(np.array(values, dtype=object if None in values else np.float64), start=10)
    with pytest.raises(ConfigError) as err:
        units_of(refs, "tokens", "web")
    msg = str(err.value)
    assert f"dataset 'web', sample index {bad_index}: tokens is {shown}" in msg
    assert "needs finite values >= 0" in msg


def test_the_first_bad_sample_is_named():
    with pytest.raises(ConfigError, match="sample index 1: tokens is -2"):
        units_of(refs_with([1, -2, -3]), "tokens", "web")


# -- segments -------------------------------------------------------------------------------


STEPPED = WeightSchedule(points=(0, 100, 250), weights=((1, 1), (1, 3), (3, 1)))


@pytest.mark.parametrize(
    "position, start, stop, weights",
    [
        (0, 0, 100, [0.5, 0.5]),
        (99, 0, 100, [0.5, 0.5]),
        (100, 100, 250, [0.25, 0.75]),
        (249, 100, 250, [0.25, 0.75]),
        (250, 250, None, [0.75, 0.25]),
        (10**9, 250, None, [0.75, 0.25]),
    ],
)
def test_a_stepped_schedule_has_one_segment_per_point(position, start, stop, weights):
    lo, hi, w = segment(STEPPED, position)
    assert (lo, hi) == (start, stop)
    assert np.allclose(w, weights)


def test_constant_weights_are_one_open_segment_normalized():
    lo, hi, w = segment(WeightSchedule.constant([2, 6]), 5000)
    assert (lo, hi) == (0, None) and w.tolist() == [0.25, 0.75]


LINEAR = WeightSchedule(
    points=(0, 3000, 3000 + 2 * LINEAR_STEP + 10),
    weights=((1, 0), (0, 1), (1, 1)),
    linear=True,
)


@pytest.mark.parametrize(
    "position, lo, hi",
    [
        (0, 0, LINEAR_STEP),
        (LINEAR_STEP - 1, 0, LINEAR_STEP),
        (LINEAR_STEP, LINEAR_STEP, 2 * LINEAR_STEP),
        (2 * LINEAR_STEP + 5, 2 * LINEAR_STEP, 3000),  # the step cut at the next point
        (2999, 2 * LINEAR_STEP, 3000),
        (3000, 3000, 3000 + LINEAR_STEP),  # steps count from each point
        (3000 + LINEAR_STEP + 3, 3000 + LINEAR_STEP, 3000 + 2 * LINEAR_STEP),
        (3000 + 2 * LINEAR_STEP + 9, 3000 + 2 * LINEAR_STEP, 3000 + 2 * LINEAR_STEP + 10),
    ],
)
def test_a_linear_schedule_steps_every_1024_positions_with_the_middle_weights(position, lo, hi):
    got_lo, got_hi, w = segment(LINEAR, position)
    assert (got_lo, got_hi) == (lo, hi)
    assert np.array_equal(w, LINEAR.at((lo + hi - 1) // 2))


def test_the_last_point_of_a_linear_schedule_is_constant():
    lo, hi, w = segment(LINEAR, 10**6)
    assert (lo, hi) == (LINEAR.points[-1], None) and w.tolist() == [0.5, 0.5]


def test_the_middle_of_an_odd_step_rounds_down():
    # a step of 4 positions (0..3) has its middle at 1; of 5 positions (4..8) at 6
    sched = WeightSchedule(points=(0, 4, 9), weights=((1, 0), (0, 1), (1, 0)), linear=True)
    assert segment(sched, 0)[2].tolist() == sched.at(1).tolist() == [0.75, 0.25]
    assert np.allclose(segment(sched, 6)[2], [0.4, 0.6])


# -- counters -------------------------------------------------------------------------------


def test_counters_pack_to_six_little_endian_bytes_each():
    data = pack_counters(np.array([1, 0x0102030405, 2**48 - 1]))
    assert len(data) == 3 * COUNTER_BYTES == 18
    assert data[:6] == b"\x01\x00\x00\x00\x00\x00"
    assert data[6:12] == bytes([5, 4, 3, 2, 1, 0])
    assert data[12:] == b"\xff" * 6
    back = unpack_counters(data, 3)
    assert back.tolist() == [1, 0x0102030405, 2**48 - 1] and back.dtype == np.int64


def test_no_bytes_unpack_to_zero_counters():
    got = unpack_counters(b"", 4)
    assert got.tolist() == [0, 0, 0, 0] and got.dtype == np.int64
    assert pack_counters(np.zeros(0, dtype=np.int64)) == b""


def test_a_counter_past_2_48_is_refused():
    check_counter(2**48 - 1)
    with pytest.raises(ConfigError, match="past the 2\\*\\*48 a snapshot holds") as err:
        check_counter(2**48)
    assert "add a schedule point (the counters start again at each) or use a coarser unit" in str(
        err.value
    )
    with pytest.raises(ConfigError, match="counted 281474976710656 units"):
        pack_counters(np.array([0, 2**48]))


# -- the choice within a segment ------------------------------------------------------------


def streams(*units):
    """fetch(d, start, stop) over datasets whose refs have these units, repeated forever."""

    def fetch(d, start, stop):
        u = np.asarray(units[d])
        idx = np.arange(start, stop)
        return Refs.of(index=idx, dataset=d, tokens=u[idx % len(u)])

    return fetch


def reference(units, weights, taken, used, m):
    """The documented rule one position at a time: smallest tag, ties to the lower dataset."""
    taken, used, out = list(taken), list(used), []
    for _ in range(m):
        best = None
        for d, w in enumerate(weights):
            if w <= 0:
                continue
            u = units[d][taken[d] % len(units[d])]
            tag = (2 * used[d] + u) / (2 * w)
            if best is None or tag < best[0]:
                best = (tag, d)
        d = best[1]
        out.append((d, taken[d]))
        used[d] += units[d][taken[d] % len(units[d])]
        taken[d] += 1
    return out


@pytest.mark.parametrize(
    "units, weights, taken, used, m",
    [
        (([1], [1]), (0.5, 0.5), (0, 0), (0, 0), 10),  # ties: the lower dataset first
        (([3], [1]), (0.5, 0.5), (0, 0), (0, 0), 12),  # equal shares of units
        (([2, 9, 1], [4, 4, 5]), (0.25, 0.75), (3, 1), (7, 2), 40),
        (([1], [5], [2, 3]), (0.2, 0.0, 0.8), (0, 0, 0), (0, 0, 0), 30),  # weight 0: never
        (([100], [1]), (0.5, 0.5), (0, 0), (0, 0), 150),  # a long lookahead
        (([1, 50], [7], [3, 3, 40]), (0.1, 0.3, 0.6), (5, 0, 2), (1, 0, 9), 64),
        # the lookahead must grow, for the dataset whose unread samples could come first
        (([1], [15, 43]), (0.291, 0.709), (7, 6), (30, 40), 100),
        (([2], [2], [300]), (0.25, 0.5, 0.25), (2, 7, 0), (20, 14, 36), 100),
    ],
)
def test_each_position_goes_to_the_smallest_tag(units, weights, taken, used, m):
    refs, ids, got_units = take_by_units(
        streams(*units), "tokens", ["a", "b", "c"], np.array(weights), taken, used, m
    )
    expect = reference(units, weights, taken, used, m)
    assert list(zip(ids.tolist(), refs.index.tolist())) == expect
    assert ids.dtype == np.int32 and got_units.dtype == np.int64
    assert got_units.tolist() == [units[d][i % len(units[d])] for d, i in expect]
    assert refs.dataset.tolist() == ids.tolist()


def test_unit_shares_stay_within_a_sample_of_the_weights():
    units = ([1, 2, 3], [10, 30], [5])
    weights = np.array([0.5, 0.3, 0.2])
    _, ids, got = take_by_units(
        streams(*units), "tokens", "abc", weights, (0, 0, 0), (0, 0, 0), 500
    )
    per = np.bincount(ids, weights=got, minlength=3)
    assert np.all(np.abs(per - weights * per.sum()) <= 30)


def test_choices_do_not_depend_on_how_the_stream_is_cut():
    units, weights = ([4, 1, 7], [2, 2, 9]), np.array([0.4, 0.6])
    fetch = streams(*units)
    _, whole, _ = take_by_units(fetch, "tokens", "ab", weights, (0, 0), (0, 0), 60)
    taken, used, parts = np.zeros(2, int), np.zeros(2, int), []
    for k in (1, 7, 13, 39):
        _, ids, u = take_by_units(fetch, "tokens", "ab", weights, taken, used, k)
        taken = taken + np.bincount(ids, minlength=2)
        used = used + np.bincount(ids, weights=u, minlength=2).astype(int)
        parts.append(ids)
    assert np.concatenate(parts).tolist() == whole.tolist()


def test_a_dataset_of_weight_zero_is_not_read():
    def fetch(d, start, stop):
        assert d != 1, "a dataset of weight 0 was read"
        return Refs.of(index=np.arange(start, stop), dataset=d, tokens=np.ones(stop - start))

    _, ids, _ = take_by_units(
        fetch, "tokens", "abc", np.array([0.5, 0.0, 0.5]), (0,) * 3, (0,) * 3, 9
    )
    assert ids.tolist() == [0, 2, 0, 2, 0, 2, 0, 2, 0]


def test_a_bad_unit_names_the_dataset_it_came_from():
    def fetch(d, start, stop):
        tok = np.full(stop - start, -1 if d == 1 else 1)
        return Refs.of(index=np.arange(start, stop), dataset=d, tokens=tok)

    with pytest.raises(ConfigError, match="dataset 'code'"):
        take_by_units(fetch, "tokens", ["web", "code"], np.array([0.5, 0.5]), (0, 0), (0, 0), 4)
