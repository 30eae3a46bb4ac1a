"""A blend's advance on counts (docs/design/blend.md, "The counters"; docs/steering.md, seek):
passing positions without gathering a ref reaches the very state ``next`` reaches, for every
kind of blend (weighted, scheduled, epochized, by tokens, with online weight changes, with an
end), and says what was passed: the positions, and the highest epoch of any dataset's refs.
Counts that would take longer than any run, or overflow a state, are refused."""

from __future__ import annotations

from unittest import mock

import msgspec
import numpy as np
import pytest

from fpipe.core import ConfigError, Pipeline
from fpipe.core.advance import STATE_INT_LIMIT, Passed
from fpipe.plan import _unit_count, blend, samples, slice_shuffle
from fpipe.plan import blend_advance as blend_advance_module
from fpipe.plan.blend import with_online_change
from fpipe.plan.blend_choice import WeightSchedule
from fpipe.plan.online_mix import weights32

SIZES = (7, 5, 11)


def views(sizes=SIZES):
    rng = np.random.default_rng(1)
    return [
        slice_shuffle(samples(n, dataset=d, columns={"tokens": rng.integers(1, 9, n)}), 3)
        for d, n in enumerate(sizes)
    ]


KINDS = {
    "weighted": lambda **kw: blend(views(), weights=[3, 1, 2], **kw),
    "schedule": lambda **kw: blend(
        views(),
        schedule=WeightSchedule(points=(0, 20, 45), weights=((1, 0, 1), (0, 1, 1), (2, 1, 1))),
        **kw,
    ),
    "linear": lambda **kw: blend(
        views(),
        schedule=WeightSchedule(points=(0, 30), weights=((1, 0, 3), (0, 2, 1)), linear=True),
        **kw,
    ),
    "epochized": lambda **kw: blend(views(), repetitions=[1, 2, 0.5], **kw),
    "tokens": lambda **kw: blend(views(), weights=[1, 1, 2], unit="tokens", **kw),
}


def stepped(p, state, k):
    """The state after ``k`` positions built one chunk at a time, and the refs passed."""
    out = []
    while k:
        state, refs = p.next(state, min(k, 7))
        if not len(refs):
            break
        out.append(refs)
        k -= len(refs)
    return state, out


def passed_of(chunks) -> Passed:
    n = sum(len(c) for c in chunks)
    epoch = max((int(c.epoch.max()) for c in chunks if len(c)), default=0)
    return Passed(n, n, epoch)


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("start, k", [(0, 0), (0, 1), (0, 37), (3, 64), (19, 150)])
def test_advance_reaches_the_state_next_reaches(kind, start, k):
    p = Pipeline(KINDS[kind](), seed=5)
    state, _ = stepped(p, p.init(), start)
    want, chunks = stepped(p, state, k)
    got, passed = p.advance(state, k)
    assert p.snapshot(got) == p.snapshot(want)
    assert got == want
    assert passed == passed_of(chunks)


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("start, k", [(0, 100), (20, 100), (46, 3), (47, 10), (48, 5)])
def test_advance_stops_at_the_end_of_the_last_blend_epoch(kind, start, k):
    p = Pipeline(KINDS[kind](num_epochs=2), seed=2)
    end = 2 * (sum(SIZES) if kind != "epochized" else 7 + 10 + 6)
    state, _ = stepped(p, p.init(), min(start, end))
    want, chunks = stepped(p, state, k)
    got, passed = p.advance(state, k)
    assert got == want and passed == passed_of(chunks)
    assert got.position == min(end, state.position + k)


@pytest.mark.parametrize("kind", ["weighted", "schedule", "tokens"])
def test_advance_follows_online_weight_changes(kind):
    p = Pipeline(KINDS[kind](), seed=3)
    state, _ = stepped(p, p.init(), 10)
    state = with_online_change(state, 3, position=10, step=1, weights=weights32([0, 1, 1]))
    state = with_online_change(state, 3, position=40, step=2, weights=weights32([5, 0, 1]))
    for k in (5, 30, 80):
        want, chunks = stepped(p, state, k)
        got, passed = p.advance(state, k)
        assert got == want and passed == passed_of(chunks)


def test_the_epoch_passed_is_the_highest_epoch_of_a_dataset_stream():
    p = Pipeline(blend(views((2, 50)), weights=[1, 1]), seed=0)
    got, passed = p.advance(p.init(), 40)
    taken = got.taken
    assert passed.epoch == (taken[0] - 1) // 2 > 0  # the small dataset is in its later epochs


def test_nothing_passed_is_epoch_zero():
    p = Pipeline(KINDS["weighted"](), seed=0)
    state, _ = stepped(p, p.init(), 30)
    assert p.advance(state, 0) == (state, Passed(0, 0, 0))


def test_an_epochized_blend_counts_whole_epochs_without_drawing_them():
    p = Pipeline(KINDS["epochized"](), seed=1)
    per_epoch = 7 + 10 + 6  # repetitions 1, 2, 0.5 of 7, 5, 11
    state, _ = stepped(p, p.init(), 5)
    epochs = 10**9
    got, passed = p.advance(state, epochs * per_epoch)  # far past what a draw per position takes
    assert passed.outputs == epochs * per_epoch
    whole, _ = p.advance(p.init(), epochs * per_epoch)
    assert whole.taken == (7 * epochs, 10 * epochs, 6 * epochs)
    want, _ = stepped(p, whole, 5)  # the first 5 positions of that epoch, built
    assert got == want


@pytest.mark.parametrize("block", [1, 3, 8])
@pytest.mark.parametrize("kind", ["weighted", "epochized"])
def test_counting_in_blocks_counts_every_position_once(kind, block):
    p = Pipeline(KINDS[kind](), seed=4)
    state, _ = stepped(p, p.init(), 2)
    want, _ = stepped(p, state, 50)
    with mock.patch.object(blend_advance_module, "_COUNT_BLOCK", block):
        got, _ = p.advance(state, 50)
    assert got == want


def test_drawing_more_positions_than_any_run_is_refused():
    p = Pipeline(KINDS["weighted"](), seed=0)
    with pytest.raises(ConfigError, match="one at a time is refused") as err:
        p.advance(p.init(), 2**40)
    assert "positions of blend 'blend' (each one's dataset is drawn on its own)" in str(err.value)


def test_an_epochized_blend_refuses_a_long_cut_within_an_epoch():
    big = blend([samples(2**37, dataset=0), samples(3, dataset=1)], repetitions=[1, 1])
    p = Pipeline(big, seed=0)
    with pytest.raises(ConfigError, match="positions of blend 'blend' within an epoch"):
        p.advance(p.init(), 2**36 + 5)


def test_an_epochized_blend_refuses_long_cut_epochs_at_either_end():
    big = blend([samples(2**36, dataset=0), samples(3, dataset=1)], repetitions=[1, 1])
    p = Pipeline(big, seed=0)
    state = msgspec.structs.replace(p.init(), position=5)
    with pytest.raises(ConfigError, match="in the epochs cut at either end"):
        p.advance(state, 2 * (2**36 + 3) + 2**35)


def test_a_position_past_a_state_int_is_refused():
    p = Pipeline(KINDS["epochized"](), seed=0)
    with pytest.raises(ConfigError, match="blend 'blend': the positions would reach"):
        p.advance(p.init(), STATE_INT_LIMIT)


@pytest.mark.parametrize("start, k", [(0, 60), (9, 150)])
@pytest.mark.parametrize("shuffled", [True, False])
def test_a_blend_by_tokens_counted_from_cumulative_units_reaches_the_state_next_reaches(
    start, k, shuffled
):
    if shuffled:
        src = KINDS["tokens"]()
    else:  # every epoch in the same order
        rng = np.random.default_rng(2)
        vs = [
            samples(n, dataset=d, columns={"tokens": rng.integers(1, 9, n)})
            for d, n in enumerate(SIZES)
        ]
        src = blend(vs, weights=[1, 1, 2], unit="tokens")
    p = Pipeline(src, seed=6)
    state, _ = stepped(p, p.init(), start)
    want, chunks = stepped(p, state, k)
    with mock.patch.object(_unit_count, "_COUNT_PAST", 0):  # count every segment
        got, passed = p.advance(state, k)
    assert got == want and passed == passed_of(chunks)


def test_a_bad_unit_met_while_counting_names_the_dataset():
    vs = [
        samples(4, dataset=0, columns={"tokens": np.array([1, 2, 3, 4])}),
        samples(3, dataset=1, columns={"tokens": np.array([1, -1, 2])}),
    ]
    p = Pipeline(blend(vs, weights=[1, 1], unit="tokens", names=["web", "code"]), seed=0)
    with mock.patch.object(_unit_count, "_COUNT_PAST", 0), pytest.raises(ConfigError) as err:
        p.advance(p.init(), 50)
    assert "dataset 'code', sample index 1" in str(err.value)


HUGE = 2**36  # refs of the first dataset: an epoch longer than positions drawn one at a time


def huge_epochized():
    return Pipeline(blend([samples(HUGE), samples(3, dataset=1)], repetitions=[1, 1]), seed=0)


def test_a_short_advance_far_into_a_long_epoch_is_counted():
    p = huge_epochized()
    state = msgspec.structs.replace(p.init(), position=HUGE + 10, taken=(HUGE + 9, 1))
    got, passed = p.advance(state, 5)
    assert got.position == HUGE + 15 and sum(got.taken) == HUGE + 15 and passed.outputs == 5


def test_whole_long_epochs_between_short_cuts_are_counted():
    p = huge_epochized()
    total = HUGE + 3
    state = msgspec.structs.replace(p.init(), position=total - 2, taken=(total - 4, 2))
    got, _ = p.advance(state, total + 5)  # 2 positions, one whole epoch, 3 positions
    assert got.position == 2 * total + 3
    gained = np.asarray(got.taken) - np.asarray(state.taken)
    assert gained.sum() == total + 5 and np.all(gained >= (HUGE, 3))


def test_a_short_advance_far_into_a_weighted_blend_is_counted():
    p = Pipeline(KINDS["weighted"](), seed=0)
    far = 2**36 + 5
    state = msgspec.structs.replace(p.init(), position=far, taken=(far - 9, 4, 5))
    got, passed = p.advance(state, 10)
    assert got.position == far + 10 and sum(got.taken) == far + 10 and passed.outputs == 10
