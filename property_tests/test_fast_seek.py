"""Seek on counts (``Pipeline.advance``) is the step-by-step seek, byte for byte.

For random plans (one dataset, or a blend by samples, by tokens, with a schedule or epochized,
forever or for a number of epochs, over datasets read once or twice per epoch (a tile, whose
refs carry their pass as epoch); a window shuffle or none; fixed batches, a ramp-up or plan-tier
packing; one rank or two), random online weight changes and random skip ranges, over runs long
enough that the seek passes many whole epochs, windows and batches on counts:

- ``seek_state(N)`` (the fast path, where the steps can count) gives the very state bytes and
  loader counters of ``seek_state(N, fast=False)`` (every step planned) and of the live run
  after the step before N;
- a seek past the end of a finite stream is refused by both alike.

Where a step cannot count (a packer, a distribution over two ranks) the fast path falls back
to building outputs; these plans are drawn too, so a fallback is checked to be right, not only
the counting path. A blend by tokens counts its segments from the datasets' cumulative units
(here on every segment, however short, which a seek does only past a few epochs of refs), and
that count is also checked against building the choices directly. Bucketed batching passes
whole windows from their buckets' sizes, drawing the steps of the window it stops in: checked
for random bucket configs, windows, remainders and ranks.
"""

from __future__ import annotations

import contextlib
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from fpipe.core import Pipeline, chain
from fpipe.core.errors import ConfigError
from fpipe.core.records import Refs
from fpipe.loader.steering import seek_state
from fpipe.plan import (
    WeightSchedule,
    _unit_count,
    blend,
    blend_count,
    bucket_batches,
    repeat,
    samples,
    slice_shuffle,
)
from fpipe.plan._blend_units import take_by_units
from fpipe.plan.skip import normalize_step_ranges
from fpipe.plan.slice_order import tile
from property_tests.strategies import live_recipes, mix_changes, steering_tail

SIZES = (30, 17, 11)
# An example takes ~0.5-0.9 s: 2-4 fresh plans and their seeks over datasets of 30, 17 and 11
# samples (many epochs of slice permutations). ci 100 -> 8 examples, long 1000 -> 83.
# (before seek_state took ``planned``, every target here was under its default 64-step planned
# tail, so no example ever passed a step on counts)
SCALED = settings(max_examples=max(6, settings.default.max_examples // 12), deadline=None)


@contextlib.contextmanager
def count_every_segment():
    """A blend by tokens counts every segment it passes (a seek otherwise builds a segment
    shorter than a few epochs of its datasets, as these short runs' are), and a weighted blend
    counts every run of constant weights in bulk, over few buckets (a seek otherwise draws
    runs shorter than two million positions one by one)."""
    with (
        mock.patch.object(_unit_count, "_COUNT_PAST", 0),
        mock.patch.object(blend_count, "_DIRECT_BELOW", 0),
        mock.patch.object(blend_count, "BITS", 5),
    ):
        yield


def build(p: dict, rank: int = 0) -> Pipeline:
    rng = np.random.default_rng(0)
    views = []
    for d, n in enumerate(SIZES):
        view = samples(n, dataset=d, columns={"tokens": rng.integers(1, 30, n)})
        views.append(slice_shuffle(tile(view, p["passes"]) if p["passes"] > 1 else view, 4))
    epochs = p["epochs"]
    if p["head"] == "single":
        head = repeat(views[0], epochs)
    elif p["head"] == "schedule":
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
        "head": draw(
            st.sampled_from(["samples", "samples", "tokens", "schedule", "epochized", "single"])
        ),
        "passes": draw(st.sampled_from([1, 1, 2])),
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
    chg = [] if p["head"] in ("epochized", "single") else data.draw(mix_changes(steps, 3))
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
        with count_every_segment():
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
            with pytest.raises(ConfigError, match="past the end"), count_every_segment():
                seek_state(build(p, rank), past + 5, ranges, chg, fast=fast_path, planned=planned)


@SCALED
@given(data=st.data())
def test_counting_a_segment_by_units_is_building_its_choices(data):
    # datasets of a few refs, each epoch a new order of the same units, small weights and unit
    # values (many equal tags: ties go to the lower dataset), any counters to start from
    n = data.draw(st.integers(1, 4))
    sizes = data.draw(st.lists(st.integers(1, 9), min_size=n, max_size=n))
    high = data.draw(st.sampled_from([2, 3, 40]))
    units = [np.array(data.draw(st.lists(st.integers(1, high), min_size=s, max_size=s)))
             for s in sizes]  # fmt: skip
    w = np.array(data.draw(st.lists(st.sampled_from([0.0, 1.0, 2.0, 3.0]), min_size=n,
                                    max_size=n)))  # fmt: skip
    w[0] = w[0] or 1.0
    w = w / w.sum()
    taken = data.draw(st.lists(st.integers(0, 30), min_size=n, max_size=n))
    used = data.draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    note(f"sizes={sizes} units={units} w={w} taken={taken} used={used}")

    def epoch_units(d, e):
        return units[d][np.random.default_rng(1000 * d + e).permutation(sizes[d])]

    def fetch(d, a, b):
        u = [epoch_units(d, s // sizes[d])[s % sizes[d]] for s in range(a, b)]
        return Refs.of(index=np.arange(a, b), tokens=np.array(u, dtype=np.int64))

    for m in sorted(set(data.draw(st.lists(st.integers(1, 600), min_size=1, max_size=4)))):
        _, ids, got_units = take_by_units(fetch, "tokens", ["d"] * n, w, taken, used, m)
        want = np.bincount(ids, minlength=n).tolist()
        after = (used + np.bincount(ids, weights=got_units, minlength=n)).astype(np.int64)
        counts = _unit_count.count_segment(epoch_units, sizes, w, taken, used, m)
        assert counts == (want, after.tolist()), m


@st.composite
def bucket_params(draw):
    return {
        "probabilities": draw(st.sampled_from([(1.0, 1.0), (0.5, 1.0), (0.3, 0.7), (0.0, 1.0)])),
        "batch": draw(st.sampled_from([(2, 1, 3), (1, 1, 1), (4, 2, 1)])),
        "window": draw(st.sampled_from([None, None, 25, 7])),
        "epochs": draw(st.sampled_from([None, None, 3])),
        "world": draw(st.sampled_from([1, 2, 3])),
        "drop_last": draw(st.booleans()),
        "passes": draw(st.sampled_from([1, 1, 2])),
        "seed": draw(st.integers(0, 3)),
    }


def buckets(p: dict, rank: int) -> Pipeline:
    rng = np.random.default_rng(p["seed"])
    n = 40
    cols = {
        "width": rng.choice([64, 128, 300], n),
        "height": rng.choice([64, 128, 300], n),
        "num_frames": rng.choice([1, 1, 9, 20], n),
    }
    (p64, p128), (b1, b2, b3) = p["probabilities"], p["batch"]
    config = {"1:1": {64: {1: (1.0, b1), 8: (1.0, b2)}, 128: {1: (p64, b3), 8: (p128, 1)}}}
    view = samples(n, columns=cols)
    view = slice_shuffle(tile(view, p["passes"]) if p["passes"] > 1 else view, 3)
    return Pipeline(
        bucket_batches(view, config, rank=rank, world_size=p["world"], drop_last=p["drop_last"],
                       window=p["window"], num_epochs=p["epochs"]),
        seed=p["seed"],
    )  # fmt: skip


@SCALED
@given(p=bucket_params(), data=st.data())
def test_buckets_pass_whole_windows_on_counts_as_stepping_does(p, data):
    rank = data.draw(st.integers(0, p["world"] - 1))
    targets = data.draw(st.lists(st.integers(1, 300), min_size=1, max_size=3))
    note(f"{p} rank={rank} targets={targets}")
    for target in sorted(set(targets)):
        plan = buckets(p, rank)
        try:
            ref = seek_state(plan, target, (), (), fast=False)
        except ConfigError as e:  # the stream ends, or windows lack a batch: the count says so
            with pytest.raises(ConfigError) as got_error:
                seek_state(buckets(p, rank), target, (), (), planned=1)
            assert str(got_error.value) == str(e)
            continue
        got = seek_state(buckets(p, rank), target, (), (), planned=1)
        assert plan.snapshot(got[0]) == plan.snapshot(ref[0]) and got[1:] == ref[1:]
