"""``blend`` as documented (docs/design/blend.md, docs/metadataset.md, docs/steering.md): what
it refuses, what its state holds, what a restore checks, and what ``blend_counters`` reports.

* exactly one of ``weights``, ``schedule`` or ``repetitions``; one unique name per dataset;
  ``repetitions`` > 0 take ``max(1, round(r * size))`` refs per blend epoch (``counts``
  overrides, each >= 1); ``num_epochs`` >= 0 (0: an empty stream); ``unit`` is for weighted
  blends only, ``"samples"`` or ``""`` meaning none;
* the state is the position, one counter per dataset and a 2-byte weight digest per dataset
  (plus a blend by units' 6-byte counters): fixed width whatever the step;
* a snapshot under other weights is refused naming the changed datasets, unless
  ``allow_changed_weights``; a snapshot whose fields cannot belong to the blend is refused as
  edited or corrupted.
"""

from __future__ import annotations

from unittest import mock

import msgspec
import numpy as np
import pytest

from fpipe.core import Pipeline
from fpipe.core.errors import ConfigError, SnapshotError, SnapshotMismatchError
from fpipe.core.rng import key
from fpipe.core.stage import View
from fpipe.plan import _unit_count, repeat, samples, slice_shuffle
from fpipe.plan.blend import (
    BlendState,
    UnitBlendState,
    blend,
    blend_counters,
    online_mix,
    with_online_change,
)
from fpipe.plan.blend_choice import WeightSchedule
from fpipe.plan.online_mix import weights32


def views(sizes=(4, 6, 3), tokens=True):
    rng = np.random.default_rng(0)
    cols = (lambda n: {"tokens": rng.integers(1, 5, n)}) if tokens else (lambda n: None)
    return [slice_shuffle(samples(n, dataset=d, columns=cols(n)), 2) for d, n in enumerate(sizes)]


def take(src, n, state=None):
    state = src.init(key(0)) if state is None else state
    return src.next(state, n)


# -- configuration --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, match",
    [
        ({}, "^blend: give exactly one of weights, schedule or repetitions$"),
        ({"weights": [1, 1, 1], "repetitions": [1, 1, 1]}, "exactly one of"),
        ({"weights": [1, 1, 1], "names": ["a", "b", "a"]}, "one unique name per view"),
        ({"weights": [1, 1, 1], "names": ["a", "b"]}, "one unique name per view"),
        ({"weights": [1, 1]}, "2 weights for 3 datasets"),
        ({"repetitions": [1, 0, 1]}, "repetitions must be > 0, one per dataset"),
        ({"repetitions": [1, 1]}, "repetitions must be > 0, one per dataset"),
        ({"repetitions": [1, 1, 1], "counts": [2, 0, 1]}, "counts must be >= 1, one per dataset"),
        ({"repetitions": [1, 1, 1], "counts": [2, 1]}, "counts must be >= 1, one per dataset"),
        (
            {"weights": [1, 1, 1], "counts": [1, 1, 1]},
            r"^blend: counts apply to an epochized blend \(repetitions\)$",
        ),
        ({"weights": [1, 1, 1], "num_epochs": -1}, "num_epochs must be >= 0 or None, got -1"),
        (
            {"repetitions": [1, 1, 1], "unit": "tokens"},
            "^blend: unit 'tokens' applies to a weighted blend; an epochized blend takes whole "
            "passes of samples$",
        ),
    ],
)
def test_bad_arguments_are_refused(kw, match):
    with pytest.raises(ConfigError, match=match):
        blend(views(), **kw)


def test_no_views_is_refused():
    with pytest.raises(ConfigError, match="one unique name per view"):
        blend([], weights=[])


def test_an_empty_dataset_is_refused_by_name():
    with pytest.raises(ConfigError, match="dataset 'b' has no samples"):
        blend([samples(3), samples(0, dataset=1)], weights=[1, 1], names=["a", "b"])


def test_the_config_holds_names_sizes_and_mode():
    c = blend(views(), weights=[1, 2, 3]).config
    assert (c.datasets, c.sizes, c.mode, c.counts, c.num_epochs, c.unit) == (
        ("d0", "d1", "d2"),
        (4, 6, 3),
        "weighted",
        (),
        None,
        None,
    )
    assert c.schedule == WeightSchedule.constant([1, 2, 3])
    assert c.allow_changed_weights is False
    c = blend(views(), weights=[1, 2, 3], names=["x", "y", "z"], allow_changed_weights=True).config
    assert c.datasets == ("x", "y", "z") and c.allow_changed_weights is True
    assert blend(views(), repetitions=[1, 1, 1], num_epochs=3).config.num_epochs == 3


def test_num_epochs_is_part_of_the_fingerprint():
    def fp(epochs):
        return Pipeline(blend(views(), weights=[1, 2, 3], num_epochs=epochs), seed=0).fingerprint

    assert fp(2) != fp(3) and fp(2) != fp(None)


@pytest.mark.parametrize("n", [256, 257, 300])
def test_a_blend_of_hundreds_of_datasets_gives_each_position_its_datasets_ref(n):
    # weights on the first and the last dataset only: the same choices as a blend of two
    def two(d):
        return samples(2, dataset=d)

    many = blend([two(d) for d in range(n)], weights=[1] + [0] * (n - 2) + [1])
    pair = blend([two(0), two(n - 1)], weights=[1, 1])
    got = many.next(many.init(key(0)), 200)[1].triples()
    assert got == pair.next(pair.init(key(0)), 200)[1].triples()
    assert {d for d, _, _ in got} == {0, n - 1}


@pytest.mark.parametrize(
    "repetitions, counts",
    [([1, 1, 1], (4, 6, 3)), ([2, 0.5, 1], (8, 3, 3)), ([0.1, 0.01, 3], (1, 1, 9))],
)
def test_repetitions_take_round_r_times_size_and_at_least_one(repetitions, counts):
    src = blend(views(), repetitions=repetitions, num_epochs=1)
    assert src.config.mode == "epochized" and src.config.counts == counts
    assert src.config.schedule is None
    _, refs = take(src, 1000)
    assert np.bincount(refs.dataset, minlength=3).tolist() == list(counts)


def test_counts_override_the_rounded_repetitions():
    src = blend(views(), repetitions=[1, 1, 1], counts=[2, 1, 5], num_epochs=2)
    assert src.config.counts == (2, 1, 5)
    _, refs = take(src, 1000)
    assert np.bincount(refs.dataset, minlength=3).tolist() == [4, 2, 10]


@pytest.mark.parametrize("epochs, weighted, epochized", [(0, 0, 0), (1, 13, 13), (2, 26, 26)])
def test_num_epochs_ends_the_stream(epochs, weighted, epochized):
    # a weighted blend's epoch is sum(sizes) positions; an epochized one's sum(counts)
    _, refs = take(blend(views(), weights=[1, 1, 1], num_epochs=epochs), 1000)
    assert len(refs) == weighted
    _, refs = take(blend(views(), repetitions=[1, 1, 1], num_epochs=epochs), 1000)
    assert len(refs) == epochized


@pytest.mark.parametrize("unit", ["samples", "", None])
def test_unit_samples_is_a_blend_by_samples(unit):
    src = blend(views(), weights=[1, 2, 3], unit=unit)
    assert src.config.unit is None and src.state_type is BlendState
    state = src.init(key(0))
    assert type(state) is BlendState
    ref = blend(views(), weights=[1, 2, 3])
    assert take(src, 30)[1].triples() == take(ref, 30)[1].triples()


def test_a_blend_by_tokens_keeps_six_byte_counters():
    src = blend(views(), weights=[1, 2, 3], unit="tokens")
    assert src.config.unit == "tokens" and src.state_type is UnitBlendState
    state = src.init(key(0))
    assert state.tokens == bytes(18) and state.taken == (0, 0, 0) and state.position == 0
    state, refs = take(src, 20)
    assert len(state.tokens) == 18 and state.position == 20
    used = np.frombuffer(state.tokens, dtype=np.uint8).reshape(3, 6)
    counters = [int.from_bytes(row.tobytes(), "little") for row in used]
    per = np.bincount(refs.dataset, weights=refs.column("tokens"), minlength=3)
    assert counters == per.astype(int).tolist()  # one segment: the tokens each dataset gave


def test_the_state_is_fixed_width_whatever_the_step():
    p = Pipeline(blend(views(), weights=[1, 2, 3]), seed=1)
    state, sizes = p.init(), []
    for _ in range(4):
        state, _ = p.next(state, 97)
        sizes.append(len(p.snapshot(state)))
    assert len(set(sizes)) == 1
    assert state.position == sum(state.taken) > 97
    assert len(state.weights) == 2 * 3  # one 2-byte digest per dataset


def test_golden_weight_digests():
    """Pinned digests: a snapshot holds them, so changing them refuses every existing snapshot
    of a blend (a CHECKPOINT BREAKING CHANGE, docs/compatibility.md)."""

    def digests(**kw):
        return blend(views(), **kw).init(key(0)).weights.hex()

    assert digests(weights=[1, 2, 3]) == "a4be3e8cd6d2"
    assert digests(weights=[1, 2, 3], unit="tokens") == "f8782636fa25"
    linear = WeightSchedule(points=(0, 100), weights=((1, 0, 1), (0, 1, 1)), linear=True)
    assert digests(schedule=linear) == "62b002738e5a"


def test_an_epochized_blend_has_no_weight_digests():
    assert blend(views(), repetitions=[1, 1, 1]).init(key(0)).weights == b""


def test_digests_differ_per_dataset_weight_and_unit():
    def digests(**kw):
        return blend(views(), **kw).init(key(0)).weights

    base = digests(weights=[1, 2, 3])
    assert len(base) == 6
    other = digests(weights=[1, 2, 4])
    assert base[:4] == other[:4] and base[4:] != other[4:]  # only the changed dataset's
    assert digests(weights=[1, 2, 3], unit="tokens") != base
    linear = WeightSchedule(points=(0, 10), weights=((1, 2, 3), (1, 2, 3)), linear=True)
    assert digests(schedule=linear) != digests(
        schedule=msgspec.structs.replace(linear, linear=False)
    )


# -- restore checks -------------------------------------------------------------------------


def snapshot_of(src, n=5):
    p = Pipeline(src, seed=3)
    state, _ = p.next(p.init(), n)
    return p.snapshot(state), state


def test_changed_weights_are_refused_naming_the_datasets():
    data, _ = snapshot_of(blend(views(), weights=[1, 2, 3], names=["a", "b", "c"]))
    new = Pipeline(blend(views(), weights=[1, 5, 4], names=["a", "b", "c"]), seed=3)
    with pytest.raises(SnapshotMismatchError) as err:
        new.restore(data)
    msg = str(err.value)
    assert "blend 'blend': the weights of ['b', 'c'] differ from the snapshot's" in msg
    assert "allow_changed_weights=True" in msg


def test_a_changed_unit_is_refused_unless_allowed():
    data, state = snapshot_of(blend(views(), weights=[1, 2, 3]))
    tokens = blend(views(), weights=[1, 2, 3], unit="tokens")
    with pytest.raises(SnapshotMismatchError, match="blend_unit"):
        Pipeline(tokens, seed=3).restore(data)


@pytest.mark.parametrize("unit", [None, "tokens"])
def test_allowed_changed_weights_continue_each_dataset_with_the_new_weights(unit):
    _, state = snapshot_of(blend(views(), weights=[1, 2, 3], unit=unit), n=7)
    new = blend(views(), weights=[0, 0, 1], unit=unit, allow_changed_weights=True)
    p = Pipeline(new, seed=3)
    restored = p.restore(
        Pipeline(blend(views(), weights=[1, 2, 3], unit=unit), seed=3).snapshot(state)
    )
    after, refs = p.next(restored, 6)
    assert refs.dataset.tolist() == [2] * 6  # only the new weights from here on
    assert after.taken == (state.taken[0], state.taken[1], state.taken[2] + 6)
    assert after.weights == new.init(key(3)).weights  # the new digests
    if unit is not None:
        assert after.tokens[:12] == bytes(12)  # counters start again with the new weights
    # advancing on counts agrees with next
    fast, _ = p.advance(restored, 6)
    assert fast == after


def test_a_snapshot_with_other_datasets_is_refused():
    data, _ = snapshot_of(blend(views((4, 6)), weights=[1, 1]))
    with pytest.raises(SnapshotMismatchError, match="the datasets of a blend changed"):
        Pipeline(blend(views(), weights=[1, 1, 1]), seed=3).restore(data)
    allowed = blend(views(), weights=[1, 1, 1], allow_changed_weights=True)
    with pytest.raises(SnapshotMismatchError):  # another number of counters: never accepted
        Pipeline(allowed, seed=3).restore(data)


def test_edited_unit_counters_are_refused():
    src = blend(views(), weights=[1, 2, 3], unit="tokens")
    _, state = snapshot_of(src)
    src.check(state)
    src.check(msgspec.structs.replace(state, tokens=b""))  # no counters: zeros
    with pytest.raises(SnapshotError, match="12 bytes of unit counters for 3 datasets"):
        src.check(msgspec.structs.replace(state, tokens=bytes(12)))


def test_online_weights_in_an_epochized_blend_are_refused():
    src = blend(views(), repetitions=[1, 1, 1])
    state = src.init(key(0))
    weighted = blend(views(), weights=[1, 1, 1])
    changed = with_online_change(
        weighted.init(key(0)), 3, position=0, step=0, weights=weights32([1, 0, 0])
    )
    bad = msgspec.structs.replace(state, weights=changed.weights[6:])
    with pytest.raises(SnapshotError) as err:
        src.check(bad)
    assert str(err.value) == (
        "snapshot state of blend 'blend': online weights in an epochized blend: the snapshot "
        "was edited or corrupted"
    )
    with pytest.raises(SnapshotError, match="online weights in an epochized blend"):
        src.next(bad, 1)


def test_a_weighted_blend_with_online_weights_restores():
    src = blend(views(), weights=[1, 1, 1])
    p = Pipeline(src, seed=0)
    state, _ = p.next(p.init(), 3)
    state = with_online_change(state, 3, position=5, step=1, weights=weights32([1, 0, 2]))
    src.check(state)
    assert p.restore(p.snapshot(state)) == state


def test_online_weights_for_another_number_of_datasets_are_refused():
    four = blend(views((4, 6, 3, 5)), weights=[1, 1, 1, 1])
    changed = with_online_change(
        four.init(key(0)), 4, position=0, step=0, weights=weights32([1, 0, 0, 1])
    )
    src = blend(views(), weights=[1, 1, 1])
    state = src.init(key(0))
    bad = msgspec.structs.replace(state, weights=state.weights + changed.weights[8:])
    with pytest.raises(SnapshotError, match="not one finite non-negative float32 per dataset"):
        src.check(bad)


def test_weight_digests_for_another_number_of_datasets_are_refused():
    src = blend(views(), weights=[1, 1, 1], allow_changed_weights=False)
    state = src.init(key(0))
    with pytest.raises(SnapshotMismatchError) as err:
        src.check(msgspec.structs.replace(state, weights=state.weights[:4]))
    assert str(err.value).startswith("blend 'blend': the datasets of a blend changed: a snapshot")


def test_only_the_datasets_whose_weights_changed_are_named():
    data, _ = snapshot_of(blend(views(), weights=[1, 2, 3], names=["a", "b", "c"]))
    new = Pipeline(blend(views(), weights=[7, 2, 3], names=["a", "b", "c"]), seed=3)
    with pytest.raises(SnapshotMismatchError) as err:
        new.restore(data)
    assert str(err.value) == (
        "blend 'blend': the weights of ['a'] differ from the snapshot's (or the blend_unit that "
        "weighs them changed); resuming would change the mix mid-run. Pass "
        "allow_changed_weights=True to continue each dataset from its own position with the new "
        "weights from here on."
    )
    data, _ = snapshot_of(blend(views(), weights=[1, 2, 3], names=["a", "b", "c"]))
    new = Pipeline(blend(views(), weights=[1, 2, 5], names=["a", "b", "c"]), seed=3)
    with pytest.raises(SnapshotMismatchError, match=r"the weights of \['c'\] differ"):
        new.restore(data)


def test_a_malformed_online_record_is_refused():
    src = blend(views(), weights=[1, 1, 1])
    state = src.init(key(0))
    with pytest.raises(SnapshotError):
        src.check(msgspec.structs.replace(state, weights=state.weights + b"\x01\x02\x03"))


# -- online changes and counters ------------------------------------------------------------


def test_an_online_change_applies_from_its_position():
    src = blend(views(), weights=[1, 1, 1])
    state, _ = take(src, 4)
    assert online_mix(state, 3) is None
    changed = with_online_change(state, 3, position=9, step=2, weights=weights32([0, 0, 1]))
    mix = online_mix(changed, 3)
    assert mix is not None and [e.position for e in mix.entries] == [9]
    before, refs = src.next(changed, 5)  # positions 4..8: the old weights
    ref_state, ref = take(src, 9)
    assert refs.triples() == ref.triples()[4:]
    _, later = src.next(before, 20)
    assert set(later.dataset.tolist()) == {2}


def test_each_online_change_is_kept_until_it_is_passed():
    src = blend(views(), weights=[1, 1, 1])
    state, _ = take(src, 4)
    state = with_online_change(state, 3, position=10, step=1, weights=weights32([0, 1, 1]))
    state = with_online_change(state, 3, position=40, step=2, weights=weights32([1, 0, 0]))
    mix = online_mix(state, 3)
    assert mix is not None and [e.position for e in mix.entries] == [10, 40]
    chunks = []
    while state.position < 70:
        state, refs = src.next(state, 70 - state.position)
        chunks.append(refs)
    ds = np.concatenate([c.dataset for c in chunks])  # positions 4..69
    assert 0 not in ds[10 - 4 : 40 - 4] and set(ds[10 - 4 : 40 - 4]) == {1, 2}
    assert set(ds[40 - 4 :]) == {0}
    # the state keeps only the changes a later position uses: the one in force from 40
    assert [e.position for e in online_mix(state, 3).entries] == [40]


def test_an_online_change_before_the_position_is_refused():
    src = blend(views(), weights=[1, 1, 1])
    state, _ = take(src, 4)
    with pytest.raises(
        ConfigError, match="online weights from blend position 3, before the blend's 4"
    ):
        with_online_change(state, 3, position=3, step=0, weights=weights32([1, 1, 1]))


def test_a_change_at_the_state_position_restarts_the_unit_counters():
    src = blend(views(), weights=[1, 1, 1], unit="tokens")
    state, _ = take(src, 6)
    assert state.tokens != bytes(18)
    now = with_online_change(state, 3, position=6, step=1, weights=weights32([1, 2, 1]))
    assert now.tokens == bytes(18)
    later = with_online_change(state, 3, position=8, step=1, weights=weights32([1, 2, 1]))
    assert later.tokens == state.tokens  # the blend starts them again itself at position 8
    after, _ = src.next(later, 2)
    assert after.tokens == bytes(18)


def test_blend_counters_report_taken_and_epoch_per_dataset():
    p = Pipeline(blend(views(), weights=[1, 1, 1], names=["a", "b", "c"]), seed=0)
    state, _ = p.next(p.init(), 30)
    got = blend_counters(p, state)
    assert list(got) == ["a", "b", "c"]
    assert [got[n]["taken"] for n in "abc"] == list(state.taken)
    assert [got[n]["epoch"] for n in "abc"] == [t // s for t, s in zip(state.taken, (4, 6, 3))]


def test_blend_counters_of_a_plan_without_a_blend_are_empty():
    q = Pipeline(repeat(samples(3), 1), seed=0)
    assert blend_counters(q, q.init()) == {}


def test_the_memo_never_serves_a_state_of_another_history():
    # states at the same position with other keys, counters or online histories: one source
    # (one memo) gives each the refs a fresh source gives it
    def make():
        return blend(views(), weights=[1, 0, 0])

    def change(state, position, w):
        return with_online_change(state, 3, position=position, step=0, weights=weights32(w))

    shared = make()
    histories = {
        "seed 1": (1, []),
        "seed 2": (2, []),
        "seed 1, a detour": (1, [(0, [0, 1, 0]), (3, [1, 0, 0])]),
        "seed 1, to dataset 2": (1, [(0, [0, 0, 1])]),
        "seed 1, to dataset 2 by way of 1": (1, [(0, [0, 1, 0]), (3, [0, 0, 1])]),
    }
    starts = {}
    for name, (seed, changes) in histories.items():
        state = shared.init(key(seed))
        for position, w in changes:
            state = change(state, position, w)
        state, _ = shared.next(state, 5)
        starts[name] = state
    assert starts["seed 1"].taken == starts["seed 2"].taken != starts["seed 1, a detour"].taken
    for name, state in starts.items():
        later = change(state, 20, [0, 1, 1])  # not in the memo: the blend looks for a block
        got = shared.next(later, 12)[1].triples()
        fresh = make()
        assert got == fresh.next(later, 12)[1].triples(), name


def test_a_blend_by_tokens_over_epochs_of_other_units_advances_as_next_does():
    # a view whose epochs hold other tokens cannot be counted from its cumulative units: the
    # advance builds those positions instead, and reaches the same state
    def growing(d, n):
        inner = samples(n, dataset=d, columns={"tokens": np.arange(1, n + 1)})

        def gather(root, epoch, positions):
            refs = inner.gather(root, epoch, positions)
            return refs.with_columns(tokens=refs.column("tokens") + epoch)

        return View(name=inner.name, config=inner.config, size=n, gather=gather)

    src = blend([growing(0, 3), growing(1, 4)], weights=[1, 2], unit="tokens")
    p = Pipeline(src, seed=0)
    with mock.patch.object(_unit_count, "_COUNT_PAST", 0):  # count every segment
        got, passed = p.advance(p.init(), 40)
    want, chunks = p.init(), []
    while want.position < 40:
        want, refs = p.next(want, 40 - want.position)
        chunks.append(refs)
    assert got == want and passed.outputs == 40
    assert passed.epoch == max(int(c.epoch.max()) for c in chunks)


def test_the_datasets_views_are_part_of_the_fingerprint():
    def fp(slice_size):
        vs = [slice_shuffle(samples(n, dataset=d), slice_size) for d, n in enumerate((4, 6))]
        return Pipeline(blend(vs, weights=[1, 1]), seed=0).fingerprint

    assert fp(2) != fp(3)


def test_an_epochized_blend_with_online_weights_is_refused_by_advance_too():
    src = blend(views(), repetitions=[1, 1, 1])
    weighted = blend(views(), weights=[1, 1, 1])
    changed = with_online_change(
        weighted.init(key(0)), 3, position=0, step=0, weights=weights32([1, 0, 0])
    )
    bad = msgspec.structs.replace(src.init(key(0)), weights=changed.weights[6:])
    with pytest.raises(SnapshotError, match="online weights in an epochized blend"):
        Pipeline(src, seed=0).advance(bad, 5)


@pytest.mark.parametrize("unit", [None, "tokens"])
def test_accepted_new_weights_keep_the_online_changes(unit):
    old = blend(views(), weights=[1, 2, 3], unit=unit)
    state = old.init(key(3))
    state, _ = old.next(state, 4)
    state = with_online_change(state, 3, position=10, step=1, weights=weights32([0, 1, 0]))
    data = Pipeline(old, seed=3).snapshot(state)
    new = blend(views(), weights=[1, 0, 0], unit=unit, allow_changed_weights=True)
    p = Pipeline(new, seed=3)
    restored = p.restore(data)
    after, refs = p.next(restored, 6)  # positions 4..9: the new configured weights
    assert refs.dataset.tolist() == [0] * 6
    mix = online_mix(after, 3)
    assert mix is not None and [e.position for e in mix.entries] == [10]
    _, later = p.next(after, 8)  # from 10: the online change
    assert later.dataset.tolist() == [1] * 8
