"""Invariant 5 (coverage): within an epoch every kept sample is emitted exactly once across all
ranks, for any world size; whatever is not emitted is counted (filtered, drop_last remainder)."""

from collections import Counter

from hypothesis import given

from fpipe.core.testing import run
from fpipe.plan import drop_counters
from property_tests.strategies import plan_specs


@given(spec=plan_specs(world_sizes=(1, 5)))
def test_every_sample_once_per_epoch_across_ranks(spec):
    seen = Counter()
    filtered = remainder = global_remainder = 0
    for rank in range(spec.world_size):
        plan = spec.build(rank)
        state, out = run(plan)
        for r in out:
            seen.update((e, i) for _, i, e in r.refs.triples())
        d = drop_counters(plan.stats(state))
        filtered = d["filtered"]  # same plan on every rank: same count
        global_remainder = d["global_remainder"]  # likewise
        remainder += d["batch_remainder"]
    remainder += global_remainder
    assert all(c == 1 for c in seen.values()), "a sample was emitted twice in one epoch"
    kept = set(spec.kept().tolist())
    total_kept = len(kept) * spec.num_epochs
    assert filtered == (spec.num_samples - len(kept)) * spec.num_epochs
    assert len(seen) + remainder == total_kept, "samples lost without being counted"
    if not spec.drop_last:
        assert remainder == 0
        for epoch in range(spec.num_epochs):
            assert {i for e, i in seen if e == epoch} == kept
