"""Invariants 5 and 7 on the fast plan, checked against what was asked (not against fpipe).

- coverage: no ``(dataset, sample, epoch)`` twice; every sample of every asked epoch delivered
  (in a delivered or a skipped step), filtered by the predicate given, or counted as dropped,
  with exact counts;
- shares: after every online weight change, over the positions drawn under it, the shares of
  samples within binomial bounds of the weights passed, and by tokens within a sample of them.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from hypothesis import example, given, note
from hypothesis import strategies as st

from fpipe.plan.online_mix import entry_weights, weights32
from property_tests.reference_cases import Case, _case, cases, scaled
from property_tests.reference_runs import delivered, fast_plan, mix_changes

# ---------------------------------------------------------------------------------------------
# invariants against the request, on the fast plan alone


def all_recipes(case: Case) -> tuple[dict, dict]:
    """Every recipe of every rank to the end of the stream (skipped steps included: skipping
    only leaves out delivery), and the drop counters of rank 0's final state."""
    out, stats = {}, {}
    for r in range(case.world):
        plan = fast_plan(case, r, case.world)
        state, recipes = plan.init(), []
        while True:
            state, got = plan.next(state, 1)
            if not len(got):
                break
            recipes.append(got[0])
        out[r] = recipes
        if r == 0:
            stats = plan.stats(state)
    return out, stats


@scaled(15)
@given(case=cases(heads=("repeat", "weighted", "epochized", "tokens")), data=st.data())
def test_every_sample_once_per_epoch_and_every_epoch_covered(case, data):
    epochs = data.draw(st.integers(1, 2))
    case = dataclasses.replace(case, num_epochs=epochs, changes=(), cut=None)
    note(repr(case))
    recipes, stats = all_recipes(case)
    seen = [t for rs in recipes.values() for rc in rs for t in rc.refs.triples()]
    assert len(seen) == len(set(seen)), "a (dataset, sample, epoch) delivered twice"
    # refs counted as dropped: the short last global batch (and a rank's short batch)
    dropped = sum(v for c in stats.values() for k, v in c.items() if "remainder" in k)
    filtered = sum(c.get("filtered", 0) for c in stats.values())
    limit = case.token_limit
    kept = [
        {i for i, t in enumerate(case.tokens(d)) if not limit or t < limit}
        for d in range(len(case.sizes))
    ]
    missing = 0
    for d in range(len(case.sizes)):
        mine = [(i, e) for dd, i, e in seen if dd == d]
        assert {i for i, _ in mine} <= kept[d], f"dataset {d}: a filtered sample was delivered"
        if case.head == "repeat":
            passes = epochs  # the asked epochs of each dataset
        elif case.head == "epochized":
            passes = epochs * case.reps[d]
        else:  # weighted: whole epochs of the dataset below the last one it reached
            passes = max((e for _, e in mine), default=0)
        for e in range(passes):
            missing += len(kept[d] - {i for i, ee in mine if ee == e})
        if case.head in ("repeat", "epochized"):
            assert all(e < passes for _, e in mine), f"dataset {d}: an epoch past the end"
    if case.head in ("repeat", "epochized"):
        assert missing == dropped, "refs neither delivered nor counted as dropped"
        drawn = sum(
            (epochs if case.head == "repeat" else epochs * case.reps[d]) * (n - len(kept[d]))
            for d, n in enumerate(case.sizes)
        )
        assert filtered == drawn, "filtered refs miscounted"
    else:
        assert missing <= dropped


Z = 5.5  # standard deviations allowed to a count of a random share


def _within_binomial(count: int, total: int, p: float) -> bool:
    if p == 0:
        return count == 0
    return abs(count - total * p) <= Z * math.sqrt(total * p * (1 - p)) + 1


SHARE_STEPS = 60


@st.composite
def online_changes(draw) -> list:
    """Weight changes of a three-dataset blend at steps 1..50 (after equal weights at 0)."""
    rows = st.lists(st.sampled_from([0.0, 1.0, 2.0, 5.0]), min_size=3, max_size=3).filter(any)
    points = sorted(set(draw(st.lists(st.integers(1, SHARE_STEPS - 10), max_size=3))))
    return [(0, (1.0, 1.0, 1.0))] + [(s, tuple(draw(rows))) for s in points]


@scaled(10)
@given(
    unit=st.sampled_from([None, "tokens"]),
    window=st.sampled_from([None, 4, 8, 16]),
    per_step=st.sampled_from([2, 4, 8]),
    seed=st.integers(0, 2**31),
    changes=online_changes(),
)
# by tokens, a change whose frontier is a multiple of the window (step 4 of 4 refs, window 8)
@example(unit="tokens", window=8, per_step=4, seed=0, changes=[(0, (1.0, 1.0, 1.0)),
         (4, (1.0, 1.0, 5.0))])  # fmt: skip
@example(unit="tokens", window=None, per_step=2, seed=0, changes=[(0, (1.0, 1.0, 1.0)),
         (5, (1.0, 1.0, 5.0))])  # fmt: skip
def test_shares_follow_the_weights_in_force(unit, window, per_step, seed, changes):
    """After each online change, the shares of samples (binomial bounds) or of tokens (the
    blend's deterministic bound) over the positions drawn under it are the weights passed, from
    the end of the lookahead drawn before the change (one window) to the next change."""
    steps = SHARE_STEPS
    note(f"changes={changes}")
    case = _case(
        seed=seed, sizes=(50, 40, 30), slices=("fixed", 4), head="tokens" if unit else "weighted",
        weights=(1, 1, 1), reps=(1, 1, 1), window=window, sizes_kind=("fixed", per_step),
        changes=tuple((s, tuple(entry_weights(weights32(w)))) for s, w in changes),
    )  # fmt: skip
    plan = fast_plan(case, 0, 1)
    got = delivered(plan, plan.init(), (), mix_changes(case), steps)
    order = [t for _, rc in got for t in rc.refs.triples()]  # global order: one rank
    assert len(order) == steps * per_step
    w = window or 1
    for j, (step, row) in enumerate(changes):
        # positions surely drawn under these weights: from the first window boundary at or
        # after the change's step, to the last one before the next change's step
        lo = -(-(step * per_step) // w) * w
        end = changes[j + 1][0] * per_step if j + 1 < len(changes) else len(order)
        hi = end // w * w
        if hi - lo < 24:
            continue
        part = order[lo:hi]
        p = np.asarray(row) / sum(row)
        if unit is None:
            counts = np.bincount([d for d, _, _ in part], minlength=3)
            for d in range(3):
                assert _within_binomial(int(counts[d]), len(part), float(p[d])), (
                    f"positions {lo}..{hi}: dataset {d} has {counts[d]} of {len(part)}, "
                    f"weights {row}"
                )
        else:
            tok = np.zeros(3)
            for d, i, _ in part:
                tok[d] += case.tokens(d)[i]
            longest = max(max(case.tokens(d)) for d in range(3))
            # docs/metadataset.md: every dataset within about half a sample of its share at
            # every position, so over positions lo..hi within one sample; twice that allowed
            bound = 2 * longest
            dev = np.abs(tok - p * tok.sum())
            assert (dev <= bound).all(), (
                f"positions {lo}..{hi}: tokens {tok.tolist()} for weights {row} (bound {bound})"
            )
