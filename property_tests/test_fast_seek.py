"""Seek on counts (``Pipeline.advance``) is the step-by-step seek, byte for byte.

For random plans (a blend by samples, by tokens, with a schedule or epochized, forever or for a
number of epochs; a window shuffle or none; fixed batches, a ramp-up or plan-tier packing; one
rank or two), random online weight changes and random skip ranges, over runs long enough that
the seek passes many whole windows and batches on counts:

- ``seek_state(N)`` (the fast path, where the steps can count) gives the very state bytes and
  loader counters of ``seek_state(N, fast=False)`` (every step planned) and of the live run
  after the step before N;
- a seek past the end of a finite stream is refused by both alike.

Where a step cannot count (a packer, a distribution over two ranks, a blend by tokens) the
fast path falls back to building outputs; these plans are drawn too, so a fallback is checked
to be right, not only the counting path.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from fpipe.core import Pipeline, chain
from fpipe.core.errors import ConfigError
from fpipe.loader.steering import seek_state
from fpipe.plan import (
    WeightSchedule,
    blend,
    samples,
    slice_shuffle,
)
from fpipe.plan.skip import normalize_step_ranges
from property_tests.strategies import live_recipes, mix_changes, steering_tail

SIZES = (30, 17, 11)
# An example takes ~0.5-0.9 s: 2-4 fresh plans and their seeks over datasets of 30, 17 and 11
# samples (many epochs of slice permutations). ci 100 -> 8 examples, long 1000 -> 83.
# (before seek_state took ``planned``, every target here was under its default 64-step planned
# tail, so no example ever passed a step on counts)
SCALED = settings(max_examples=max(6, settings.default.max_examples // 12), deadline=None)


def build(p: dict, rank: int = 0) -> Pipeline:
    rng = np.random.default_rng(0)
    views = [
        slice_shuffle(samples(n, dataset=d, columns={"tokens": rng.integers(1, 30, n)}), 4)
        for d, n in enumerate(SIZES)
    ]
    epochs = p["epochs"]
    if p["head"] == "schedule":
        sched = WeightSchedule(
            points=(0, 70, 200), weights=((1, 2, 1), (3, 1, 0), (1, 1, 1)), linear=p["linear"]
        )
        head = blend(views, schedule=sched, num_epochs=epochs)
    elif p["head"] == "epochized":
        head = blend(views, repetitions=[1, 0.5, 2], num_epochs=epochs)
    else:
        unit = "tokens" if p["head"] == "tokens" else None
        head = blend(views, weights=[2, 1, 1], unit=unit, num_epochs=epochs)
    stages = steering_tail(p, 2 * p["global"], rank, p["world"], first=2, buffer=20)
    return Pipeline(chain(head, *stages), seed=p["seed"])


@st.composite
def params(draw):
    return {
        "head": draw(st.sampled_from(["samples", "samples", "tokens", "schedule", "epochized"])),
        "linear": draw(st.booleans()),
        "epochs": draw(st.sampled_from([None, None, 3])),
        "window": draw(st.sampled_from([0, 5, 16])),
        "tail": draw(st.sampled_from(["batch", "batch", "ramp", "pack"])),
        "global": draw(st.integers(1, 3)),
        "world": draw(st.sampled_from([1, 1, 2])),
        "seed": draw(st.integers(0, 3)),
    }


@SCALED
@given(p=params(), data=st.data())
def test_seek_on_counts_is_the_step_by_step_seek_and_the_live_state(p, data):
    steps = 60
    chg = [] if p["head"] == "epochized" else data.draw(mix_changes(steps, 3))
    spans = st.tuples(st.integers(0, 50), st.integers(1, 12)).map(lambda t: (t[0], t[0] + t[1]))
    ranges = normalize_step_ranges(data.draw(st.lists(spans, max_size=2)))
    rank = data.draw(st.integers(0, p["world"] - 1))
    # the steps planned one by one at the end: by default at least 64, more than these runs
    # have, so small tails are drawn too and most of a seek goes on counts
    planned = data.draw(st.sampled_from([1, 3, 10, None]))
    note(f"{p} rank={rank} changes={chg} skip={ranges} planned={planned}")
    plan = build(p, rank)
    run = live_recipes(plan, steps, ranges, chg)
    picks = data.draw(st.lists(st.integers(0, max(0, len(run) - 1)), min_size=1, max_size=3))
    # Each fast seek starts from a fresh plan, as a resumed loader's does; the reference seeks
    # (every step planned) run on the live run's plan (a fresh plan's first blend block is most
    # of an example's time). A pick drawn twice is one seek.
    for k in sorted(set(picks)) if run else []:
        state, recipe = run[k]
        target = recipe.step + 1
        fast = build(p, rank)
        got = seek_state(fast, target, ranges, chg, planned=planned)
        ref = seek_state(plan, target, ranges, chg, fast=False)
        assert fast.snapshot(got[0]) == plan.snapshot(ref[0]) == plan.snapshot(state)
        assert got[1:] == ref[1:]
        delivered = [r for _, r in run[: k + 1]]
        assert got[1:] == (
            k + 1,
            sum(len(r.refs) for r in delivered),
            max((int(r.refs.epoch.max()) for r in delivered if len(r.refs)), default=0),
        )
    if len(run) < steps:  # a finite stream ended: a seek past its end is refused by both
        past = (run[-1][1].step + 2) if run else 1
        past = max(past, max((b for _, b in ranges), default=0) + 1)
        for fast_path in (True, False):
            with pytest.raises(ConfigError, match="past the end"):
                seek_state(build(p, rank), past + 5, ranges, chg, fast=fast_path, planned=planned)
