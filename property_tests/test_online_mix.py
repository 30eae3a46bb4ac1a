"""Online blend weights and seek, on the plan (metadata only).

For random plans (a blend by samples, by tokens, with a schedule or drawn by quota; a window
shuffle or none; fixed batches, a ramp-up or plan-tier packing; world sizes 1, 2, 4 in global
mode), random weight changes at random steps and random skip ranges:

- a snapshot at any step, restored into a fresh plan on any world size, continues exactly as
  the uninterrupted run (the ranks' parts of each step are its global batch);
- ``seek_state(N)`` (from the configuration and the changes alone) gives the very state, byte
  for byte, of the run after the step before N, and the loader counters of its recipes;
- a change's weights hold for every position the blend chooses after its frontier, and the
  steps before the change are those of the run without it;
- after a change, the shares of samples and of tokens in windows of positions follow the
  weights passed (by samples: binomial bounds; by tokens: the blend's deterministic bound),
  for changes at, just before and just after multiples of the shuffle window and of the
  blend's internal block sizes.

Buckets (which take one dataset) are checked for seek with skips. The loader-level properties
(set_weights in the loop, replay from the history, worker modes) are in
tests/loader/test_online_weights.py.
"""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, note, settings
from hypothesis import strategies as st

from fpipe.core import Pipeline, chain
from fpipe.loader.steering import MixChange, planned_recipes, seek_state
from fpipe.plan import (
    WeightSchedule,
    batch,
    blend,
    bucket_batches,
    distribute,
    samples,
    slice_shuffle,
    window_shuffle,
)
from fpipe.plan.online_mix import entry_weights, weights32
from fpipe.plan.skip import normalize_step_ranges
from property_tests.strategies import live_recipes, mix_changes, steering_tail

SIZES = (60, 40, 25)
# An example of the restore-and-seek property takes ~1 s: 3-8 fresh plans (the live run, the
# seeks, the restored ranks), each ~0.1-0.2 s for its first blend block (8192 positions read 3x
# ahead over datasets of 60, 40 and 25 samples). ci 100 -> 6 examples, long 1000 -> 62.
SCALED = settings(max_examples=max(4, settings.default.max_examples // 16), deadline=None)


def _views():
    rng = np.random.default_rng(0)
    return [
        slice_shuffle(samples(n, dataset=d, columns={"tokens": rng.integers(1, 30, n)}), 4)
        for d, n in enumerate(SIZES)
    ]


def build(p: dict, rank: int = 0, world: int = 1) -> Pipeline:
    views = _views()
    if p["head"] == "schedule":
        sched = WeightSchedule(points=(0, 50), weights=((1, 2, 1), (3, 1, 1)), linear=p["linear"])
        head = blend(views, schedule=sched)
    elif p["head"] == "quota":  # counters derived from every change (its blocks restart at each)
        head = blend(views, weights=[2, 1, 1], draw="quota")
    else:
        head = blend(views, weights=[2, 1, 1], unit="tokens" if p["head"] == "tokens" else None)
    # the same global batch on 1, 2 or 4 ranks
    stages = steering_tail(p, 4 * p["global"], rank, world, first=4, buffer=30)
    return Pipeline(chain(head, *stages), seed=p["seed"])


@st.composite
def params(draw):
    return {
        "head": draw(st.sampled_from(["samples", "tokens", "schedule", "quota"])),
        "linear": draw(st.booleans()),
        "window": draw(st.sampled_from([0, 7, 16])),
        "tail": draw(st.sampled_from(["batch", "ramp", "pack"])),
        "global": draw(st.integers(1, 3)),
        "seed": draw(st.integers(0, 3)),
    }


def refs_of(recipe) -> list:
    r = recipe.refs
    return list(zip(r.dataset.tolist(), r.index.tolist(), r.epoch.tolist()))


@SCALED
@given(p=params(), data=st.data())
def test_restore_and_seek_follow_online_changes(p, data):
    check_restore_and_seek(p, data)


def check_restore_and_seek(p: dict, data) -> None:
    steps = 20
    chg = data.draw(mix_changes(steps))
    spans = st.tuples(st.integers(0, 20), st.integers(1, 4)).map(lambda t: (t[0], t[0] + t[1]))
    ranges = normalize_step_ranges(data.draw(st.lists(spans, max_size=2)))
    note(f"{p} changes={chg} skip={ranges}")
    plan = build(p)
    run = live_recipes(plan, steps, ranges, chg)
    assert len(run) == steps
    # seek: the state after each delivered recipe, from the configuration and the changes
    for k in data.draw(st.lists(st.integers(0, steps - 1), min_size=1, max_size=3)):
        state, recipe = run[k]
        target = recipe.step + 1
        fresh = build(p)
        got, batches, samples_, epoch = seek_state(fresh, target, ranges, chg)
        assert fresh.snapshot(got) == plan.snapshot(state)
        delivered = [r for _, r in run[: k + 1]]
        assert batches == k + 1
        assert samples_ == sum(len(r.refs) for r in delivered)
        assert epoch == max(int(r.refs.epoch.max()) for r in delivered if len(r.refs))
    # restore at a cut on another world size: the ranks' parts are the global batches
    cut = data.draw(st.integers(0, steps - 2))
    snap = plan.snapshot(run[cut][0])
    world = data.draw(st.sampled_from([1, 2, 4]))
    later = [c for c in chg if c.step > run[cut][1].step + 1]
    parts = []
    for rank in range(world):
        rp = build(p, rank, world)
        got = live_from(rp, rp.restore(snap), ranges, later, steps - cut - 1)
        parts.append(got)
    for i, (_, recipe) in enumerate(run[cut + 1 :]):
        assert [r.step for r in (x[i] for x in parts)] == [recipe.step] * world
        assert sum((refs_of(x[i]) for x in parts), []) == refs_of(recipe)


@SCALED
@given(data=st.data(), seed=st.integers(0, 3), g=st.integers(1, 3))
def test_quota_changes_without_lookahead_restore_and_seek(data, seed, g):
    """The property above on a quota blend with nothing drawn ahead of the steps: each change
    lands at the blend's own position, where a warm plan holds the block it drew before (a
    change that sends the weights in force again starts a segment all the same)."""
    p = {"head": "quota", "linear": False, "window": 0, "tail": "batch", "global": g, "seed": seed}
    check_restore_and_seek(p, data)


def live_from(plan, state, ranges, chg, steps):
    out = []
    for _, recipe in planned_recipes(plan, state, ranges, chg):
        if recipe is None or len(out) == steps:
            break
        out.append(recipe)
    return out


@SCALED
@given(p=params(), step=st.integers(0, 15), data=st.data())
def test_a_change_holds_from_the_frontier_and_leaves_earlier_steps_alone(p, step, data):
    w = data.draw(st.sampled_from([(0.0, 0.0, 1.0), (1.0, 0.0, 0.0), (0.0, 2.0, 1.0)]))
    chg = [MixChange(step, entry_weights(weights32(w)))]
    base = [r for _, r in live_recipes(build(p), 80, (), ())]
    run = [r for _, r in live_recipes(build(p), 80, (), chg)]
    assert [refs_of(r) for r in run[:step]] == [refs_of(r) for r in base[:step]]
    # after the lookahead drawn before the change (a window block, a packing buffer and a
    # global batch at most), every ref comes from a dataset the new weights weigh
    lookahead = 16 + 30 + 3 * 12
    flat = [d for r in run[step:] for d, _, _ in refs_of(r)]
    allowed = {d for d, x in enumerate(w) if x > 0}
    assert set(flat[lookahead:]) <= allowed
    assert len(flat) > lookahead + 20  # the check saw refs under the new weights


def bucket_plan(rank=0, world=1):
    rng = np.random.default_rng(1)
    n = 400
    cols = {
        "width": rng.integers(200, 1000, n),
        "height": rng.integers(200, 700, n),
        "num_frames": np.where(np.arange(n) % 3 == 0, 1, rng.integers(1, 150, n)),
    }
    from tests.plan.test_bucket_config import OPENSORA

    view = slice_shuffle(samples(n, columns=cols), 4)
    src = bucket_batches(view, OPENSORA, rank=rank, world_size=world, window=100)
    return Pipeline(src, seed=3)


@SCALED
@given(k=st.integers(0, 19), skip=st.tuples(st.integers(0, 15), st.integers(1, 5)))
def test_seek_matches_the_snapshot_with_buckets_and_skips(k, skip):
    ranges = normalize_step_ranges([(skip[0], skip[0] + skip[1])])
    plan = bucket_plan()
    run = live_recipes(plan, 20, ranges, ())
    state, recipe = run[k]
    fresh = bucket_plan()
    got, batches, _, _ = seek_state(fresh, recipe.step + 1, ranges, ())
    assert fresh.snapshot(got) == plan.snapshot(state)
    assert batches == k + 1


# Shares after a change, checked against the weights passed. Three datasets whose samples hold
# 20-40, 60-100 and 150-250 tokens (uniform), blended 1 : 1 : 1, then changed at a step near
# a place where the plan has a boundary: a multiple of the shuffle window, or the start of one
# of the blend's internal blocks (256 positions, doubling up to 8192).
LENGTHS = ((20, 40), (60, 100), (150, 250))
BOUNDARIES = ("window", 256, 512, 768, 1024, 1792, 2048, 3840, 4096, 7936, 8192)
NEW_WEIGHTS = ((0.4971, 0.2146, 0.2883), (0.2, 0.3, 0.5), (1.0, 0.0, 3.0))
Z = 5.0  # standard deviations allowed to a random share


def length_plan(unit, window: int, g: int) -> Pipeline:
    rng = np.random.default_rng(1)
    views = [
        slice_shuffle(
            samples(3000, dataset=d, columns={"tokens": rng.integers(lo, hi + 1, 3000)}), 16
        )
        for d, (lo, hi) in enumerate(LENGTHS)
    ]
    head = blend(views, weights=[1, 1, 1], unit=unit)
    stages = [window_shuffle(window)] if window else []
    return Pipeline(chain(head, *stages, distribute(g), batch(g)), seed=5)


def expected_shares(unit, w: np.ndarray, k: int, tokens: int):
    """(sample shares, their bound, token shares, their bound) that ``k`` positions holding
    ``tokens`` tokens should show under weights ``w``, from the weights and the length
    distributions alone."""
    lo, hi = np.asarray(LENGTHS, dtype=np.float64).T
    mean = (lo + hi) / 2
    second = ((hi - lo + 1) ** 2 - 1) / 12 + mean**2
    if unit is None:  # every position draws dataset d with probability w_d: multinomial
        p = w
        p_bound = Z * np.sqrt(p * (1 - p) / k) + 1 / k
        r = p * mean / (p * mean).sum()
        # the ratio estimator's variance (delta method) for i.i.d. positions
        var = ((1 - r) ** 2 * p * second + r**2 * ((p * second).sum() - p * second)) / (
            k * (p * mean).sum() ** 2
        )
        return p, p_bound, r, Z * np.sqrt(var) + 1e-9
    # by tokens: each dataset's tokens since the change stay within w_d * B of its share at
    # every position, B = max over datasets of (longest sample / weight); a window has two ends
    active = w > 0
    big = (hi[active] / w[active]).max()
    r_bound = 2 * w * big / tokens + 1e-9
    p = np.where(active, w / mean, 0.0)
    p = p / p.sum()
    return p, Z * np.sqrt(p * (1 - p) / k) + 2 / k, w, r_bound


@SCALED
@given(
    unit=st.sampled_from([None, "tokens"]),
    window=st.sampled_from([0, 64, 100]),
    g=st.sampled_from([1, 4]),
    boundary=st.sampled_from(BOUNDARIES),
    multiple=st.integers(1, 12),
    offset=st.sampled_from([-1, 0, 1]),
    new=st.sampled_from(NEW_WEIGHTS),
)
@example(
    unit="tokens", window=100, g=1, boundary="window", multiple=5, offset=0, new=NEW_WEIGHTS[0]
)
@example(unit="tokens", window=64, g=4, boundary=512, multiple=1, offset=0, new=NEW_WEIGHTS[0])
@example(unit="tokens", window=0, g=4, boundary=256, multiple=1, offset=1, new=NEW_WEIGHTS[1])
@example(unit=None, window=100, g=1, boundary="window", multiple=5, offset=0, new=NEW_WEIGHTS[0])
def test_shares_after_a_change_follow_the_weights_at_block_boundaries(
    unit, window, g, boundary, multiple, offset, new
):
    position = multiple * (window or 64) if boundary == "window" else boundary
    step = max(1, position // g + offset)
    # The change holds from the blend's frontier: the first position that no step before it
    # drew, the end of the shuffle window block in use (step * g itself without a window).
    frontier = -(-step * g // window) * window if window else step * g
    k = -(-600 // window) * window if window else 600  # whole window blocks: a set of positions
    chg = [MixChange(step, entry_weights(weights32(new)))]
    plan = length_plan(unit, window, g)
    recipes = [r for _, r in live_recipes(plan, -(-(frontier + 2 * k) // g), (), chg)]
    ids = np.concatenate([r.refs.dataset for r in recipes])
    tokens = np.concatenate([r.refs.column("tokens") for r in recipes]).astype(np.int64)
    w = np.asarray(new) / sum(new)
    for lo in (frontier, frontier + k):
        d, t = ids[lo : lo + k], tokens[lo : lo + k]
        assert len(d) == k
        got_p = np.bincount(d, minlength=3) / k
        got_r = np.bincount(d, weights=t, minlength=3) / t.sum()
        p, p_bound, r, r_bound = expected_shares(unit, w, k, int(t.sum()))
        note(
            f"unit={unit} change at step {step} (frontier {frontier}), window [{lo}, {lo + k}): "
            f"samples {np.round(got_p, 3)} want {np.round(p, 3)} +- {np.round(p_bound, 3)}; "
            f"tokens {np.round(got_r, 3)} want {np.round(r, 3)} +- {np.round(r_bound, 3)}"
        )
        assert np.all(np.abs(got_r - r) <= r_bound), ("token shares", got_r, r, r_bound)
        assert np.all(np.abs(got_p - p) <= p_bound), ("sample shares", got_p, p, p_bound)
