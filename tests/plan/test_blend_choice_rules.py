"""The blend's choice of dataset as documented (docs/design/blend.md, docs/metadataset.md):

* ``pick``: with ``cdf`` the running float64 sums of the row in dataset order and
  ``x = u * cdf[-1]``, the dataset is the first ``d`` with ``cdf[d] > x``, or the last dataset
  of weight > 0 when there is none (a dataset of weight 0 is never chosen);
* a linear segment from rows ``A`` to ``B`` at fraction ``t = (i - p_j) / (p_{j+1} - p_j)``
  picks row ``B`` when ``u < lam`` (``lam = t|B| / ((1 - t)|A| + t|B|)``), else row ``A``;
* a schedule starts at position 0, its positions increase, it has one row per point, every row
  has one finite weight >= 0 per dataset and not all 0; ``WeightSchedule.of`` names datasets
  (left out: weight 0; unknown: refused) and changes in steps unless ``linear=True``.
"""

import itertools

import numpy as np
import pytest

from fpipe.core import ConfigError
from fpipe.core.rng import uniform_array
from fpipe.plan.blend_choice import WeightSchedule, choose_weighted, pick


def reference_pick(row, u):
    """The documented rule, one position at a time in plain Python."""
    cdf = list(itertools.accumulate(float(w) for w in row))
    x = u * cdf[-1]
    for d, c in enumerate(cdf):
        if c > x:
            return d
    return max(d for d, w in enumerate(row) if w > 0)


# -- pick: boundaries of the running sums ----------------------------------------------------

ALMOST_ONE = 1.0 - 2.0**-53


@pytest.mark.parametrize(
    "row, u, expected",
    [
        ((1.0, 1.0), 0.5, 1),  # x == cdf[0]: not > x, so the next dataset
        ((1.0, 1.0, 2.0), 0.25, 1),
        ((1.0, 1.0, 2.0), 0.5, 2),
        ((1.0, 1.0, 2.0), 0.0, 0),
        ((0.0, 1.0), 0.0, 1),  # u == 0 never lands on a leading dataset of weight 0
        ((0.0, 0.0, 3.0), 0.0, 2),
        ((2.0, 0.0, 2.0), 0.5, 2),  # nor on a zero-weight dataset in the middle
        ((1.0, 2.0, 0.0), ALMOST_ONE, 1),  # u * 3 rounds up to 3: the last of weight > 0
        ((3.0, 0.0, 0.0), ALMOST_ONE, 0),
    ],
)
def test_pick_takes_the_first_running_sum_above_u_times_the_total(row, u, expected):
    assert reference_pick(row, u) == expected
    assert pick(row, np.array([u])).tolist() == [expected]


@pytest.mark.parametrize("row", [(1.0, 3.0), (0.0, 2.0, 0.0, 2.0), (0.5, 0.25, 0.25, 0.0)])
def test_pick_matches_the_rule_at_every_quarter_and_its_neighbours(row):
    us = sorted(
        {
            min(max(q / 8 + e, 0.0), ALMOST_ONE)
            for q in range(9)
            for e in (-(2.0**-53), 0.0, 2.0**-53)
        }
    )
    got = pick(row, np.array(us)).tolist()
    assert got == [reference_pick(row, u) for u in us]
    assert all(row[d] > 0 for d in got)


# -- linear segments: the side is B exactly when u < lam --------------------------------------


def test_linear_segment_takes_row_b_exactly_when_u_is_below_lam():
    """From A = (1, 0) to B = (0, 1) (equal sums, so lam = t) dataset 1 is chosen exactly when
    u < t. Points are placed so that at a chosen position t equals its uniform exactly."""
    key, seen = 29, 0
    for i in range((1 << 60) + 1, (1 << 60) + 200):
        u = float(uniform_array(key, np.array([i]))[0])
        if u < 0.5:
            continue  # (1 - t) + t is then exactly 1, so lam == t == u
        k = int(u * 2.0**53)
        p = i - k
        s = WeightSchedule(
            points=(0, p, p + (1 << 53)), weights=((1.0, 1.0), (1.0, 0.0), (0.0, 1.0)), linear=True
        )
        positions = np.array([i - 1, i, i + 1], dtype=np.int64)
        t = (positions - p) / 2.0**53
        us = uniform_array(key, positions)
        expected = [int(uu < tt) for uu, tt in zip(us, t)]
        assert t[1] == us[1] and expected[1] == 0  # u == lam: row A
        assert choose_weighted(key, s, positions).tolist() == expected
        seen += 1
    assert seen > 50


def test_linear_segment_side_follows_u_and_lam_at_many_positions():
    s = WeightSchedule(points=(0, 1000), weights=((1.0, 0.0), (0.0, 3.0)), linear=True)
    positions = np.arange(0, 1200)
    us = uniform_array(5, positions)
    got = choose_weighted(5, s, positions).tolist()
    for i, u, d in zip(positions.tolist(), us.tolist(), got):
        t = min(i / 1000, 1.0)
        lam = 1.0 if i >= 1000 else t * 3 / ((1 - t) * 1 + t * 3)
        assert d == int(u < lam), i


# -- what a schedule refuses -------------------------------------------------------------------


@pytest.mark.parametrize(
    "points, weights, message",
    [
        ((), (), r"^a weight schedule starts at position 0, got \(\)$"),
        ((3,), ((1.0,),), r"^a weight schedule starts at position 0, got \(3,\)$"),
        ((0, 5), ((1.0,),), r"^a weight schedule needs one row of weights per point$"),
        ((0, 5, 5), ((1.0,),) * 3, r"^schedule positions must increase: \(0, 5, 5\)$"),
        ((0, 10, 5, 20), ((1.0,),) * 4, r"^schedule positions must increase"),
        ((0, 4), ((1.0, 1.0), (1.0,)), r"^schedule row at 4 has 1 weights, not 2$"),
        ((0,), ((float("inf"), 1.0),), r"^schedule row at 0: weights must be finite"),
        ((0, 2), ((1.0, 1.0), (1.0, float("inf"))), r"^schedule row at 2: weights must be"),
        ((0,), ((float("nan"), 1.0),), r"^schedule row at 0: weights must be finite"),
        ((0,), ((-1.0, 2.0),), r"^schedule row at 0: weights must be finite, >= 0"),
        ((0,), ((0.0, 0.0),), r"^schedule row at 0: weights must be finite, >= 0 and not all 0"),
    ],
)
def test_a_bad_schedule_is_refused_saying_what_is_wrong(points, weights, message):
    with pytest.raises(ConfigError, match=message):
        WeightSchedule(points=points, weights=weights)


def test_a_schedule_by_name_refuses_unknown_datasets_naming_them():
    with pytest.raises(ConfigError, match=r"schedule at 10 names unknown datasets \['x', 'z'\]"):
        WeightSchedule.of([(0, {"a": 1}), (10, {"z": 1, "a": 2, "x": 1})], ["a", "b"])


def test_a_schedule_by_name_changes_in_steps_unless_linear():
    points = [(0, {"a": 1}), (100, {"b": 1})]
    steps = WeightSchedule.of(points, ["a", "b"])
    linear = WeightSchedule.of(points, ["a", "b"], linear=True)
    assert not steps.linear and linear.linear
    assert steps.at(50).tolist() == [1.0, 0.0] and steps.at(100).tolist() == [0.0, 1.0]
    assert linear.at(50).tolist() == [0.5, 0.5] and linear.at(100).tolist() == [0.0, 1.0]
    ids = choose_weighted(3, steps, np.arange(100))
    assert not ids.any()  # weight 0 for b before its point: never chosen
