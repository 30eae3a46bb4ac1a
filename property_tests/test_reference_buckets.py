"""Invariant 8 for grouped batching: ``bucket_batches`` (OpenSora's ``bucket_config``) and
``group_batches`` (a criterion on metadata rows) equal the slow reference of their documented
rules (:mod:`property_tests.reference.buckets`, docs/design/buckets.md "The exact rules").

Random small configurations (:mod:`property_tests.reference_group_runs`): one dataset of 1-60
samples with random widths, heights and frame counts (some unfit: no size, NaN frames), its
slice shuffle (fixed, Energon's shards, none), a random ``bucket_config`` (probabilities
between 0 and 1 included) or a criterion over int and string groups, windows, the in-group
shuffle on or off, ``num_epochs`` or endless, ``drop_last``, 1-4 ranks, skipped steps, the
plan's ``advance`` (what a seek runs: whole windows passed on counts) to random steps, and an
elastic restore on another world size at a cut.

The default profile runs a few dozen examples (a few seconds); ``HYPOTHESIS_PROFILE=long``
runs ten times as many.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, note

import property_tests.reference as ref
from fpipe.core import Pipeline
from property_tests.reference import buckets as ref_buckets
from property_tests.reference_cases import scaled
from property_tests.reference_group_runs import (
    BucketCase,
    bucket_cases,
    compare_buckets,
    described,
    fast_source,
    ref_group_steps,
)

# ---------------------------------------------------------------------------------------------
# the properties: bucketed and grouped batching


def test_bucket_rule_examples():
    """The reference's bucket rule on the docs' example (docs/buckets.md)."""
    table = ref_buckets.buckets({"1:1": {256: {1: (1.0, 8), 17: (1.0, 2)}}})
    one = ref.Ref(0, 0, 0, {})
    got = [
        ref_buckets.bucket_of(table, 7, one, w, h, t)
        for w, h, t in [(300, 300, 1), (300, 280, 40), (100, 100, 1), (300, 300, 10)]
    ]
    assert got == [0, 1, ref_buckets.UNFIT, ref_buckets.UNFIT]


@scaled(40)
@given(case=bucket_cases())
def test_grouped_batching_equals_the_reference(case):
    note(repr(case))
    compare_buckets(case)


def test_counters_equal_the_reference():
    """The plan's unfit, rejected and group_remainder counts after whole epochs are the
    reference's (a config with probabilities between 0 and 1, a window, kept remainders)."""
    rnd = np.random.default_rng(3)
    n = 57
    case = BucketCase(
        seed=11, n=n, slices=("fixed", 4), kind="bucket",
        config={"1:1": {32: {1: (0.6, 2), 5: (0.5, 1)}, 16: {1: (1.0, 3)}},
                "16:9": {"18x32": {1: (1.0, 1), 9: (0.6, 2)}}},
        group_bs=(1,) * 5, width=tuple(int(x) for x in rnd.integers(0, 80, n)),
        height=tuple(int(x) for x in rnd.integers(10, 80, n)),
        frames=tuple(float(x) for x in rnd.integers(0, 12, n)), labels=(0,) * n, window=20,
        shuffle=True, num_epochs=2, drop_last=False, world=2,
    )  # fmt: skip
    counters = ref.Counters()
    expected = list(ref_group_steps(case, counters=counters))
    plan = Pipeline(fast_source(case, 0, 2), seed=case.seed)
    state, out = plan.next(plan.init(), 10_000)
    assert [described(r)[1:3] + described(r)[4:] for r in out] == [
        (s.ident, s.shape, [x.triple for x in s.ranks[0]]) for s in expected
    ]
    stats = plan.stats(state)["bucket"]
    assert {k: stats[k] for k in ("unfit", "rejected", "group_remainder")} == {
        k: counters.get(k, 0) for k in ("unfit", "rejected", "group_remainder")
    }
    assert min(counters.get(k, 0) for k in ("unfit", "rejected", "group_remainder")) > 0
