"""What a seek costs: each plan the loader builds passes steps on counts, far steps are answered
at once (the state, or a refusal naming why), and nothing is read that the counts can say.

Each plan reads its samples through views that count the refs they gather and refuse to gather
more than a budget, so a step passed one at a time fails here at once instead of running for
minutes; a watchdog turns a seek that does not return in time into a failure (a second for
what is answered at once).
(Exactness, the counts giving the very state stepping gives, is
``property_tests/test_fast_seek.py``.)
"""

from __future__ import annotations

import contextlib
import signal
import time

import numpy as np
import pytest

from fpipe.core import Pipeline, chain
from fpipe.core.errors import ConfigError
from fpipe.core.stage import View
from fpipe.loader.steering import seek_state
from fpipe.plan import (
    batch,
    blend,
    bucket_batches,
    distribute,
    repeat,
    samples,
    slice_shuffle,
    window_shuffle,
)

BUDGET = 50_000  # refs a plan may gather in one test (a step at a time: 8 million and more)


class Watchdog(Exception):
    pass


@contextlib.contextmanager
def within(seconds: float):
    """Fail (Watchdog) when the block runs longer than ``seconds`` of wall time."""

    def fire(signum, frame):
        raise Watchdog(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def budgeted(view: View, seen: list) -> View:
    """``view``, counting the refs it gathers in ``seen[0]`` (at most BUDGET in all)."""

    def gather(root, epoch, positions, _inner=view.gather):
        seen[0] += len(positions)
        assert seen[0] <= BUDGET, f"gathered {seen[0]} refs: the seek went one step at a time"
        return _inner(root, epoch, positions)

    return View(name=view.name, config=view.config, size=view.size, gather=gather)


def views(seen: list, sizes=(300, 170, 110)) -> list[View]:
    rng = np.random.default_rng(0)
    cols = [{"tokens": rng.integers(1, 500, n)} for n in sizes]
    return [
        budgeted(slice_shuffle(samples(n, dataset=d, columns=c), 10), seen)
        for d, (n, c) in enumerate(zip(sizes, cols))
    ]


def tail():
    return (window_shuffle(100), distribute(8), batch(8))


def single(seen, num_epochs=None) -> Pipeline:
    return Pipeline(chain(repeat(views(seen)[0], num_epochs), *tail()), seed=4)


def blended(seen, unit=None, num_epochs=None) -> Pipeline:
    head = blend(views(seen), weights=[3, 1, 2], unit=unit, num_epochs=num_epochs)
    return Pipeline(chain(head, *tail()), seed=4)


def epochized(seen) -> Pipeline:
    return Pipeline(chain(blend(views(seen), repetitions=[1, 2, 0.5]), *tail()), seed=4)


def buckets(seen, probability=1.0) -> Pipeline:
    rng = np.random.default_rng(1)
    n = 400
    cols = {
        "width": rng.choice([64, 128], n),
        "height": rng.choice([64, 128], n),
        "num_frames": rng.choice([1, 9], n),
    }
    config = {"1:1": {64: {1: (1.0, 2), 8: (1.0, 1)}, 128: {1: (probability, 2), 8: (1.0, 1)}}}
    view = budgeted(slice_shuffle(samples(n, columns=cols), 4), seen)
    return Pipeline(bucket_batches(view, config, rank=1, world_size=2), seed=4)


@pytest.mark.parametrize(
    "make", [single, epochized, buckets], ids=["single", "epochized", "buckets"]
)
def test_a_million_steps_are_passed_on_counts(make):
    # one dataset of 300 samples: 26,667 epochs in 8 million refs, each a chunk of its own
    # when stepped (minutes); on counts only the planned last steps and the windows at the
    # ends are gathered. (A weighted blend, which draws each position, is
    # tests/plan/test_advance.py's; the budget, not the watchdog, fails a seek that steps.)
    seen = [0]
    with within(10.0):
        state, batches, refs, epoch = seek_state(make(seen), 1_000_000, (), ())
    assert batches == 1_000_000 and epoch > 1000
    if make is buckets:  # a step gives this rank one or two refs (the bucket's batch size)
        assert 1_000_000 <= refs <= 2_000_000
    else:
        assert refs == 8_000_000


def test_a_token_blend_counts_its_units_instead_of_building_its_choices():
    seen = [0]
    with within(10.0):
        _, batches, refs, epoch = seek_state(blended(seen, unit="tokens"), 1_000_000, (), ())
    assert (batches, refs) == (1_000_000, 8_000_000) and epoch > 1000


@pytest.mark.parametrize("make, epochs", [(single, 1000), (blended, 200)], ids=["single", "blend"])
def test_a_step_past_the_end_of_a_finite_plan_is_refused_at_once(make, epochs):
    # 300,000 refs of one dataset, 116,000 of the blend, passed to the end on counts
    seen = [0]
    with within(1.0), pytest.raises(ConfigError, match="past the end of the stream"):
        seek_state(make(seen, num_epochs=epochs), 1_000_000, (), ())


def test_step_1e15_of_a_weighted_blend_is_refused_at_once():
    # each position's dataset is its own draw: 8e15 of them cannot be passed in any time
    with within(1.0), pytest.raises(ConfigError, match="one at a time is refused"):
        seek_state(blended([0]), 10**15, (), ())


def test_step_1e15_of_a_blend_by_tokens_is_refused_by_its_unit_counters():
    with within(1.0), pytest.raises(ConfigError, match=r"past the 2\*\*48 a snapshot holds"):
        seek_state(blended([0], unit="tokens"), 10**15, (), ())


@pytest.mark.parametrize(
    "make", [single, epochized, buckets], ids=["single", "epochized", "buckets"]
)
def test_step_1e15_is_reached_where_the_counts_say_it(make):
    # whole epochs by arithmetic: the state at step 10**15, as exact as at step 10
    seen = [0]
    with within(1.0):
        _, batches, refs, _ = seek_state(make(seen), 10**15, (), ())
    assert batches == 10**15 and refs >= 10**15


def test_a_step_past_what_a_state_holds_is_refused_at_once():
    # 2**61 steps of 8 refs: 2**64 refs, past the 64-bit integers of the plan state
    with within(1.0), pytest.raises(ConfigError, match=r"past the 2\*\*63 a plan state holds"):
        seek_state(single([0]), 2**61, (), ())


def test_drawn_buckets_read_each_window_and_refuse_what_no_run_reaches():
    # a probability below 1 draws each sample again every epoch: each epoch's window is read
    # (its buckets' sizes), so 10**15 steps are refused
    t = time.perf_counter()
    with pytest.raises(ConfigError, match="one at a time is refused"):
        seek_state(buckets([0], probability=0.5), 10**15, (), ())
    assert time.perf_counter() - t < 1.0


def test_a_rank_of_many_plans_few_last_steps_of_a_large_global_batch():
    # rank 17 of 64 at 32 refs per rank: each step planned one by one gathers the whole
    # global batch (2,048 refs), so the steps a seek plans at its end are what it costs
    seen = [0]
    head = repeat(views(seen)[0])
    plan = Pipeline(
        chain(head, window_shuffle(100), distribute(2048, rank=17, world_size=64), batch(32)),
        seed=4,
    )
    with within(10.0):
        _, batches, refs, epoch = seek_state(plan, 100_000, (), ())
    assert (batches, refs) == (100_000, 3_200_000) and epoch > 1000
    assert seen[0] <= 10 * 2048, f"gathered {seen[0]} refs: the seek planned too many steps"
