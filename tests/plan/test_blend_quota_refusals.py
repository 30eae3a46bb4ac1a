"""What a blend with ``draw="quota"`` refuses, and that each refusal tells the user what to do
instead: the configs it cannot draw, a snapshot of the other draw (named, in both directions)
and other weights on restore (change them with ``loader.set_weights``); and that a blend
given no ``draw`` draws with ``"hash"``."""

from __future__ import annotations

import re

import pytest

from fpipe.core import Pipeline
from fpipe.core.errors import ConfigError, SnapshotMismatchError
from fpipe.core.testing import run
from fpipe.plan import samples, slice_shuffle
from fpipe.plan.blend import QuotaBlendState, blend
from fpipe.plan.blend_choice import WeightSchedule
from fpipe.plan.blend_state import blend_config, restore_check, weight_digests


def views(sizes):
    return [slice_shuffle(samples(n, dataset=d), 3) for d, n in enumerate(sizes)]


def refusal(**kw) -> str:
    with pytest.raises(ConfigError) as err:
        blend(views([3, 4]), draw="quota", **kw)
    return str(err.value)


def test_configs_a_quota_draw_cannot_draw_are_refused_saying_what_it_takes():
    assert refusal(repetitions=[1, 1]).endswith("applies to a weighted blend (weights or schedule)")
    linear = WeightSchedule.of([(0, {"a": 1}), (9, {"b": 1})], "ab", linear=True)
    assert refusal(schedule=linear).endswith(
        "needs constant weights or a schedule of steps, not a linear one"
    )
    text = refusal(weights=[1, 1], allow_changed_weights=True)
    for phrase in (
        "from the weights in force since the start",
        "cannot resume under other configured weights (allow_changed_weights)",
        "resume with the same weights and change them with loader.set_weights",
    ):
        assert phrase in text
    assert text.endswith("loader.set_weights")


def snapshot(draw: str, weights=(1, 2)) -> bytes:
    p = Pipeline(blend(views([5, 6]), weights=list(weights), draw=draw), 0)
    state, _ = run(p, limit=10)
    return p.snapshot(state)


@pytest.mark.parametrize("saved, loaded", [("quota", "hash"), ("hash", "quota")])
def test_a_snapshot_of_the_other_draw_is_refused_naming_the_draws(saved, loaded):
    p = Pipeline(blend(views([5, 6]), weights=[1, 2], draw=loaded), 0)
    with pytest.raises(SnapshotMismatchError) as err:
        p.restore(snapshot(saved))
    text = str(err.value)
    named = f"the snapshot was taken with draw={saved!r}, this blend draws with draw={loaded!r}"
    assert named in text
    assert text.endswith(
        "keep different counters, so a run resumes only with the draw it started with"
    )


def test_other_weights_are_refused_pointing_to_set_weights():
    p = Pipeline(blend(views([5, 6]), weights=[2, 1], draw="quota"), 0)
    with pytest.raises(SnapshotMismatchError) as err:
        p.restore(snapshot("quota"))
    assert re.search(
        r"a blend with draw='quota' derives each dataset's count from them, so it resumes only "
        r"with the same weights \(change them with loader\.set_weights instead\)$",
        str(err.value),
    )


def test_the_default_draw_is_hash():
    args = dict(
        weights=[1, 2],
        schedule=None,
        repetitions=None,
        counts=None,
        names=None,
        num_epochs=None,
        allow_changed_weights=False,
        unit=None,
    )
    config, _ = blend_config(views([5, 6]), **args)
    assert config.draw == "hash" == blend(views([5, 6]), weights=[1, 2]).config.draw
    # a check made without a draw is the hash draw's: it refuses a quota blend's state
    check = restore_check(
        name="mix",
        names=("d0", "d1"),
        n=2,
        mode="weighted",
        unit=None,
        digests=weight_digests(WeightSchedule.constant([1, 2]), 2),
        allow_changed_weights=False,
    )
    with pytest.raises(SnapshotMismatchError, match="this blend draws with draw='hash'"):
        check(QuotaBlendState(0, 10, (), b"\0\0"))
