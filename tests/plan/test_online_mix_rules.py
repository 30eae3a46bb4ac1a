"""Online blend weights in the blend's state, as documented (docs/steering.md "Online mixture
weights", docs/design/blend.md "Online changes", the fpipe.plan.online_mix docstrings):

* weights are one finite number >= 0 per dataset, not all 0, stored as float32 (refused with a
  ConfigError that says what is wrong, also when float32 makes them all 0);
* the state holds the number of changes, the step of the last one, an 8-byte hash chain over
  every ``(step, weights)`` so far, and the entries ``(position, weights)`` still needed: the
  one in force and those not reached yet, at most ``MAX_ENTRIES``; a change at the position of
  the last entry replaces it, one before it is refused; its bytes are fixed-width, about
  4 bytes per dataset per entry;
* a position before the first entry follows the configured weights (or schedule); from an
  entry's position on, its weights hold until the next entry, picked with the same uniform of
  ``(key, position)``; by units, each entry starts a segment of constant weights;
* the frontier is found through each plan step's ``drawn``; a step that cannot say is refused.
"""

import hashlib

import msgspec
import numpy as np
import pytest

from fpipe.core import ConfigError, Pipeline, chain
from fpipe.core.compose import Lifted
from fpipe.core.rng import uniform_array
from fpipe.plan import batch, blend, repeat, samples, slice_shuffle, window_shuffle
from fpipe.plan.blend_choice import WeightSchedule, choose_weighted
from fpipe.plan.online_mix import (
    EMPTY_DIGEST,
    MAX_ENTRIES,
    OnlineEntry,
    add_change,
    agree_until,
    chain_digest,
    choose_online,
    decode_mix,
    drawn_state,
    encode_mix,
    entry_weights,
    online_segment,
    prune,
    replace_step_state,
    weights32,
)
from tests.plan.test_blend_choice_rules import reference_pick

A, B, C = (weights32(w) for w in ([1, 0, 0], [0, 1, 0], [0, 0, 1]))


def changes(*positions, start=0):
    """A history with one change per position (steps 1, 2, ...), each a fresh weight row."""
    mix = None
    for s, p in enumerate(positions, start + 1):
        mix = add_change(mix, position=p, step=s, weights=weights32([s, 1]))
    return mix


def at(*positions):
    return [e.position for e in changes(*positions).entries]


# -- weights ------------------------------------------------------------------------------------


def test_weights_are_stored_as_float32():
    raw = weights32([1, 3, 0.1])
    assert raw == np.array([1, 3, 0.1], dtype="<f4").tobytes()
    assert entry_weights(raw) == (1.0, 3.0, float(np.float32(0.1)))


@pytest.mark.parametrize(
    "weights, message",
    [
        ([], r"^blend weights are one number per dataset, got \[\]$"),
        (3.0, r"^blend weights are one number per dataset, got 3.0$"),
        ([[1, 2]], r"^blend weights are one number per dataset, got \[\[1, 2\]\]$"),
        ([-1, 2], r"^blend weights must be finite, >= 0 and not all 0: \[-1, 2\]$"),
        ([float("inf"), 1], r"^blend weights must be finite, >= 0 and not all 0: \[inf, 1\]$"),
        ([1, float("nan")], r"^blend weights must be finite, >= 0 and not all 0: \[1, nan\]$"),
        ([0, 0], r"^blend weights must be finite, >= 0 and not all 0: \[0, 0\]$"),
        ([1e-50, 1e-60], r"^blend weights \[1e-50, 1e-60\] are all 0 in float32$"),
    ],
)
def test_bad_weights_are_refused_saying_what_is_wrong(weights, message):
    with pytest.raises(ConfigError, match=message):
        weights32(weights)


# -- the history: count, step, digest, entries --------------------------------------------------


def test_each_change_counts_and_records_its_step():
    mix = None
    for n, (pos, step) in enumerate([(0, 0), (5, 3), (5, 4), (40, 9)], 1):
        mix = add_change(mix, position=pos, step=step, weights=A)
        assert (mix.changes, mix.step) == (n, step)


def test_the_digest_is_a_hash_chain_over_every_change():
    """The digest saved histories are checked against: blake2b-64 of the previous digest, the
    step (8 bytes, little-endian) and the float32 weights, from 8 zero bytes."""

    def spec(previous, step, weights):
        return hashlib.blake2b(
            previous + step.to_bytes(8, "little") + weights, digest_size=8
        ).digest()

    assert bytes(8) == EMPTY_DIGEST
    assert chain_digest(EMPTY_DIGEST, 1000, weights32([0.5, 0.3, 0.2])).hex() == "c2b5a43da82ae6b2"
    history = [(0, A), (7, B), (7, C), (1 << 40, A)]
    mix, expected = None, EMPTY_DIGEST
    for i, (step, w) in enumerate(history):
        previous = expected
        expected = spec(previous, step, w)
        assert chain_digest(previous, step, w) == expected
        mix = add_change(mix, position=10 * i, step=step, weights=w)
        assert mix.digest == expected
    # an earlier change is part of every later digest
    first_a = add_change(None, position=0, step=0, weights=A)
    first_b = add_change(None, position=0, step=0, weights=B)
    then = {"position": 10, "step": 7, "weights": B}
    assert add_change(first_a, **then).digest != add_change(first_b, **then).digest


def test_a_change_keeps_the_entries_not_reached_yet():
    assert at(10, 20, 30) == [10, 20, 30]
    mix = changes(10, 20, 30)
    assert [entry_weights(e.weights) for e in mix.entries] == [(1, 1), (2, 1), (3, 1)]
    assert mix.current == weights32([3, 1])


def test_a_change_at_the_last_entrys_position_replaces_its_weights():
    mix = add_change(changes(10, 20), position=20, step=5, weights=C)
    assert [(e.position, e.weights) for e in mix.entries] == [(10, weights32([1, 1])), (20, C)]
    assert (mix.changes, mix.step) == (3, 5)


@pytest.mark.parametrize("earlier", [(), (10,), (10, 15)])
def test_a_change_at_the_last_entrys_position_keeps_every_earlier_entry(earlier):
    # with one entry or three, not only two: the replaced entry is the last, the rest stay
    mix = add_change(changes(*earlier, 20), position=20, step=9, weights=C)
    assert [e.position for e in mix.entries] == [*earlier, 20]
    assert mix.entries[-1].weights == C


@pytest.mark.parametrize("last", [1, 2, 3])
def test_a_change_before_the_last_entry_is_refused_naming_both_positions(last):
    mix = changes(*[10 * i for i in range(1, last + 1)])
    with pytest.raises(
        ConfigError,
        match=rf"^a blend weight change from position 5 comes before the last one \({10 * last}\): "
        "changes must follow the run's steps in order$",
    ):
        add_change(mix, position=5, step=9, weights=A)


def test_at_most_max_entries_wait_at_once():
    mix = changes(*range(MAX_ENTRIES))
    assert len(mix.entries) == MAX_ENTRIES
    with pytest.raises(
        ConfigError,
        match=rf"^{MAX_ENTRIES + 1} blend weight changes are waiting for the plan's lookahead to "
        rf"reach them \(at most {MAX_ENTRIES}\); change the weights less often than once per "
        "shuffle window or packing buffer$",
    ):
        add_change(mix, position=MAX_ENTRIES, step=99, weights=A)
    # pruned to the one in force, there is room again
    assert len(add_change(prune(mix, MAX_ENTRIES), position=99, step=99, weights=A).entries) == 2


@pytest.mark.parametrize(
    "position, kept",
    [
        (0, [10, 20, 30]),
        (10, [10, 20, 30]),
        (15, [10, 20, 30]),
        (19, [10, 20, 30]),
        (20, [20, 30]),
        (25, [20, 30]),
        (30, [30]),
        (1000, [30]),
    ],
)
def test_prune_keeps_the_entry_in_force_and_every_later_one(position, kept):
    mix = changes(10, 20, 30)
    pruned = prune(mix, position)
    assert [e.position for e in pruned.entries] == kept
    assert (pruned.changes, pruned.step, pruned.digest) == (mix.changes, mix.step, mix.digest)


def test_prune_of_two_entries():
    assert [e.position for e in prune(changes(10, 20), 25).entries] == [20]
    assert [e.position for e in prune(changes(10, 20), 20).entries] == [20]
    assert [e.position for e in prune(changes(10, 20), 19).entries] == [10, 20]


def test_the_bytes_are_fixed_width_about_four_bytes_per_dataset_per_entry():
    w = weights32(np.arange(1, 101))
    one = add_change(None, position=5, step=1, weights=w)
    two = add_change(one, position=1 << 40, step=1 << 30, weights=w)
    assert len(encode_mix(one)) <= 470  # "a 100-dataset blend adds about 460 bytes"
    assert 400 <= len(encode_mix(two)) - len(encode_mix(one)) <= 400 + 32
    for mix in (one, two):
        assert decode_mix(encode_mix(mix), 100) == mix


# -- which dataset a position takes -------------------------------------------------------------

SCHEDULE = WeightSchedule(points=(0, 30), weights=((1.0, 1.0, 0.0), (0.0, 1.0, 3.0)))
ENTRIES = (OnlineEntry(40, A), OnlineEntry(60, weights32([1, 2, 3])), OnlineEntry(61, C))


def expected_choice(key, schedule, entries, positions):
    out = []
    for i in positions:
        live = [e for e in entries if e.position <= i]
        if not live:
            out.append(int(choose_weighted(key, schedule, np.array([i]))[0]))
        else:
            u = float(uniform_array(key, np.array([i]))[0])
            out.append(reference_pick(entry_weights(live[-1].weights), u))
    return out


@pytest.mark.parametrize(
    "positions",
    [
        [],
        [5],
        [40],
        [35, 39, 40],  # the last position is the first entry's own
        list(range(0, 80)),
        list(range(38, 62)),
        [100, 5],  # two positions out of order, across entries
        [62, 41],
        [61, 60],
        [45, 20],
        [40, 39],
        [70, 10, 45, 45, 61, 0, 60, 39],  # any order, repeats
        [39, 70, 41],  # later ones above the first, but not sorted
        [45, 60, 41, 62],
        list(range(200, 100, -3)),
    ],
)
def test_positions_follow_the_entry_in_force_else_the_schedule(positions):
    got = choose_online(11, SCHEDULE, ENTRIES, np.array(positions, dtype=np.int64))
    assert got.dtype == np.int32
    assert got.tolist() == expected_choice(11, SCHEDULE, ENTRIES, positions)


def test_entries_not_yet_reached_change_nothing():
    positions = np.arange(0, 40)
    got = choose_online(3, SCHEDULE, ENTRIES, positions)
    assert got.tolist() == choose_weighted(3, SCHEDULE, positions).tolist()
    assert choose_online(3, SCHEDULE, (), positions).tolist() == got.tolist()


# -- where two histories may choose differently -------------------------------------------------

FAR = 1 << 50


@pytest.mark.parametrize(
    "a, b, position, expected",
    [
        ([(0, A), (10, B)], [(5, B)], 12, None),  # the same weights in force from 12 on
        ([(0, A), (10, B)], [(10, B)], 10, None),  # an entry at the position itself
        ([(0, A), (10, B)], [(0, A), (10, B)], 0, None),
        ([(0, A), (5, B), (8, C)], [(0, C)], 9, None),
        ([(0, A), (5, B), (8, C)], [(0, B)], 9, 9),
        ([(0, A)], [(0, B)], 3, 3),
        ([(0, A), (20, B)], [(0, A)], 5, 20),  # the first longer
        ([(0, A)], [(0, A), (20, B)], 5, 20),  # the second longer
        ([(0, A), (20, B)], [(0, A), (30, B)], 5, 20),
        ([(0, A), (30, C)], [(0, A), (20, B)], 5, 20),
        ([], [], 7, None),
    ],
)
def test_agree_until_the_first_position_whose_weights_differ(a, b, position, expected):
    ea = [OnlineEntry(p, w) for p, w in a]
    eb = [OnlineEntry(p, w) for p, w in b]
    for x, y in ((ea, eb), (eb, ea)):
        got = agree_until(x, y, position)
        if expected is None:
            assert got > FAR
        else:
            assert got == expected


@pytest.mark.parametrize(
    "a, b, position, expected",
    [
        ([(0, A), (10, B)], [(10, B)], 12, None),  # the same entry in force
        ([(0, A), (10, B)], [(5, B)], 12, 12),  # the same weights, begun elsewhere
        ([(0, A)], [(0, A), (10, A)], 10, 10),  # the weights in force sent again, here
        ([(0, A)], [(0, A), (20, A)], 5, 20),  # and ahead
        ([(0, A), (20, B)], [(0, A), (20, B)], 25, None),
    ],
)
def test_agree_until_with_segments_that_restart_at_each_entry(a, b, position, expected):
    # a quota blend's blocks begin again at each entry: an entry agrees only with itself
    ea = [OnlineEntry(p, w) for p, w in a]
    eb = [OnlineEntry(p, w) for p, w in b]
    for x, y in ((ea, eb), (eb, ea)):
        got = agree_until(x, y, position, restarts=True)
        if expected is None:
            assert got > FAR
        else:
            assert got == expected


# -- segments of constant weights (blends by units) ---------------------------------------------


def norm(w):
    w = np.asarray(w, dtype=np.float64)
    return (w / w.sum()).tolist()


@pytest.mark.parametrize(
    "position, start, stop, weights",
    [
        (0, 0, 30, [0.5, 0.5, 0.0]),
        (29, 0, 30, [0.5, 0.5, 0.0]),
        (30, 30, 40, [0.0, 0.25, 0.75]),  # the schedule's point, then the first entry
        (39, 30, 40, [0.0, 0.25, 0.75]),
        (40, 40, 60, [1.0, 0.0, 0.0]),
        (59, 40, 60, [1.0, 0.0, 0.0]),
        (60, 60, 61, norm([1, 2, 3])),
        (61, 61, None, [0.0, 0.0, 1.0]),
        (500, 61, None, [0.0, 0.0, 1.0]),
    ],
)
def test_each_entry_starts_a_segment_that_lasts_to_the_next(position, start, stop, weights):
    got = online_segment(SCHEDULE, ENTRIES, position)
    assert got[:2] == (start, stop)
    assert np.allclose(got[2], weights, rtol=1e-12, atol=0) and abs(got[2].sum() - 1) < 1e-12


def test_a_segment_before_an_entry_ends_at_the_entry_or_the_schedule_point():
    one = WeightSchedule.constant([2.0, 2.0])
    entries = (OnlineEntry(50, weights32([3, 1])),)
    assert online_segment(one, entries, 10)[:2] == (0, 50)
    assert online_segment(one, (), 10)[:2] == (0, None)
    early = WeightSchedule(points=(0, 30), weights=((1.0, 0.0), (0.0, 1.0)))
    late = WeightSchedule(points=(0, 80), weights=((1.0, 0.0), (0.0, 1.0)))
    assert online_segment(early, entries, 10)[:2] == (0, 30)
    assert online_segment(early, entries, 35)[:2] == (30, 50)
    assert online_segment(late, entries, 10)[:2] == (0, 50)
    assert online_segment(one, entries, 50)[2].tolist() == [0.75, 0.25]


# -- finding the blend in a plan ----------------------------------------------------------------


def plan():
    views = [slice_shuffle(samples(n, dataset=d), 4) for d, n in enumerate((10, 20))]
    return Pipeline(chain(blend(views, weights=[1, 1]), window_shuffle(8), batch(2)), seed=0)


def test_drawn_state_asks_each_step_and_refuses_one_that_cannot_say():
    p = plan()
    state = p.init()
    assert drawn_state(p.source, state) == p.source.drawn(state)
    head = p.source.inputs[0].inputs[0]  # the blend: it reads views, its state is its position
    assert drawn_state(head, "state") == "state"
    blind = msgspec.structs.replace(p.source, drawn=None)  # reads a step, cannot say how far
    with pytest.raises(
        ConfigError,
        match=r"^plan step 'batch' cannot say how far it has read its input, so online blend "
        "weights cannot find the step boundary in it$",
    ):
        drawn_state(blind, state)


def test_replace_step_state_replaces_the_blends_state_only():
    p = plan()
    state = p.init()
    new = replace_step_state(p.source, state, "blend", "new")
    assert isinstance(new, Lifted) and new.up.up == "new"
    assert (new.st, new.cur, new.up.st, new.up.cur) == (
        state.st,
        state.cur,
        state.up.st,
        state.up.cur,
    )


@pytest.mark.parametrize("make", [plan, lambda: Pipeline(repeat(samples(5)), seed=0)])
def test_replace_step_state_refuses_a_blend_not_in_the_main_chain(make):
    p = make()
    with pytest.raises(
        ConfigError, match=r"^the blend 'mix' is not in the main chain of this plan$"
    ):
        replace_step_state(p.source, p.init(), "mix", "new")
