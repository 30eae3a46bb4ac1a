"""Bucketed and grouped batching in global mode: one bucket per step on every rank."""

import numpy as np
import pytest

from fpipe.core import ConfigError, Pipeline, SnapshotMismatchError
from fpipe.core.testing import check_pipeline, run
from fpipe.plan import bucket_batches, group_batches, samples, slice_shuffle
from tests.plan.test_bucket_config import OPENSORA

N = 3000


def columns(n=N, seed=0):
    rng = np.random.default_rng(seed)
    frames = rng.integers(1, 150, n)
    frames[::3] = 1  # a third are images
    return {
        "width": rng.integers(200, 1000, n),
        "height": rng.integers(200, 700, n),
        "num_frames": frames,
    }


COLS = columns()


def make(rank=0, world_size=1, *, num_epochs=1, window=None, drop_last=True, n=N, seed=5):
    cols = COLS if n == N else columns(n)
    view = slice_shuffle(samples(n, columns=cols), 4)
    src = bucket_batches(
        view,
        OPENSORA,
        rank=rank,
        world_size=world_size,
        num_epochs=num_epochs,
        window=window,
        drop_last=drop_last,
    )
    return Pipeline(src, seed=seed)


def run_ranks(world_size, **kw):
    return [run(make(r, world_size, **kw)) for r in range(world_size)]


def test_contract():
    check_pipeline(lambda: make(1, 3, num_epochs=2), cut_points=[0, 1, 17, 40])
    check_pipeline(lambda: make(0, 2, window=500, drop_last=False), cut_points=[0, 9, 30])


@pytest.mark.parametrize("world_size", [1, 3, 8])
def test_ranks_agree_on_bucket_and_shape_and_share_nothing(world_size):
    runs = run_ranks(world_size, num_epochs=2)
    outs = [o for _, o in runs]
    assert len({len(o) for o in outs}) == 1
    table = make().source.config.buckets
    for step in zip(*outs):
        assert len({r.bucket for r in step}) == 1
        assert len({len(r) for r in step}) == 1
        assert len(step[0]) == table.buckets[step[0].bucket].batch_size
        assert {r.step for r in step} == {step[0].step}
    used = [t for o in outs for r in o for t in r.refs.triples()]
    assert len(used) == len(set(used))
    state = runs[0][0]
    assert {s for s, _ in runs} == {state}  # the same state on every rank
    # every sample of each epoch is used once or counted
    assert len(used) + state.dropped + state.unfit + state.rejected == 2 * N


def test_batches_fit_their_bucket():
    table = make().source.config.buckets
    _, out = run(make())
    for r in out:
        b = table.buckets[r.bucket]
        assert r.shape == b.shape  # the recipe carries its bucket's (frames, height, width)
        w, h, t = (r.refs.column(c) for c in ("width", "height", "num_frames"))
        assert (w * h >= b.width * b.height).all()
        assert ((t >= b.frames) & ((t > 1) == (b.frames > 1))).all()


def test_keep_remainder_emits_short_batches_per_bucket():
    (state0, out0), (state1, out1) = run_ranks(2, drop_last=False)
    # only a single leftover of a bucket (fewer than the ranks) is dropped
    assert state0.dropped <= len(make().source.config.buckets)
    used = sum(len(r) for r in out0 + out1)
    assert used + state0.dropped + state0.unfit + state0.rejected == N
    for a, b in zip(out0, out1):
        assert a.bucket == b.bucket and abs(len(a) - len(b)) <= 1 and min(len(a), len(b)) >= 1


def test_elastic_restore_continues_with_new_batch_sizes():
    k = 25
    states = {make(r, 4).snapshot(run(make(r, 4), limit=k)[0]) for r in range(4)}
    assert len(states) == 1
    (data,) = states
    head = [t for r in range(4) for rec in run(make(r, 4), limit=k)[1] for t in rec.refs.triples()]
    tails = []
    for r in range(3):
        p = make(r, 3)
        tails.append(run(p, p.restore(data))[1])
    assert len({len(o) for o in tails}) == 1
    for step in zip(*tails):
        assert len({(x.bucket, len(x)) for x in step}) == 1
    tail = [t for o in tails for rec in o for t in rec.refs.triples()]
    assert not set(head) & set(tail) and len(set(tail)) == len(tail)
    final = make(0, 3).restore(data)
    p = make(0, 3)
    final, _ = run(p, final)
    assert len(head) + len(tail) + final.dropped + final.unfit + final.rejected == N


def test_window_and_bucket_config_reach_the_fingerprint():
    a = make(0, 2)
    with pytest.raises(SnapshotMismatchError, match="window"):
        make(0, 2, window=100).restore(a.snapshot(a.init()))
    other = dict(OPENSORA, **{"4:3": {"480x640": {1: (1.0, 4)}}})
    p = Pipeline(bucket_batches(slice_shuffle(samples(N, columns=COLS), 4), other), seed=5)
    with pytest.raises(SnapshotMismatchError, match="buckets"):
        p.restore(a.snapshot(a.init()))


def test_golden_bucket_order():
    # Pins the iteration order: changing it is an ITERATION ORDER BREAKING CHANGE.
    _, out = run(make(0, 2, seed=1234), limit=8)
    got = [(r.bucket, r.refs.index[:2].tolist()) for r in out]
    assert got == [
        (3, [1562, 956]),
        (8, [2813, 317]),
        (9, [2539, 1084]),
        (0, [1018, 350]),
        (3, [2618, 2660]),
        (10, [2620]),
        (8, [94, 1142]),
        (7, [133, 2155]),
    ]


def test_no_batch_in_a_whole_epoch_is_an_error_not_a_hang():
    view = samples(4, columns={"width": np.full(4, 10), "height": np.full(4, 10)})
    p = Pipeline(bucket_batches(view, OPENSORA, frames=None), seed=0)
    with pytest.raises(ConfigError, match="whole epoch gave no batch"):
        p.next(p.init())


def by_length(row):
    return ("short" if row["tokens"] < 50 else "long"), (4 if row["tokens"] < 50 else 2)


def make_groups(rank=0, world_size=2, num_epochs=1):
    view = samples(200, columns={"tokens": (np.arange(200) * 37) % 100})
    src = group_batches(
        slice_shuffle(view, 1),
        by_length,
        columns=["tokens"],
        rank=rank,
        world_size=world_size,
        num_epochs=num_epochs,
    )
    return Pipeline(src, seed=3)


def test_group_criterion():
    check_pipeline(lambda: make_groups(1, 2, 2), cut_points=[0, 3, 30])
    outs = [run(make_groups(r))[1] for r in range(2)]
    for a, b in zip(*outs):
        assert a.bucket == b.bucket and len(a) == len(b)
        t = np.concatenate([a.refs.column("tokens"), b.refs.column("tokens")])
        assert (t < 50).all() or (t >= 50).all()
        assert len(a) == (4 if t[0] < 50 else 2)


def test_group_criterion_errors():
    view = samples(10, columns={"t": np.arange(10)})
    with pytest.raises(ConfigError, match="name="):
        group_batches(view, lambda row: (0, 1), columns=["t"])
    src = group_batches(view, lambda row: (0, row["t"] + 1), columns=["t"], name="bad")
    with pytest.raises(ConfigError, match="one batch size"):
        Pipeline(src, seed=0).next(Pipeline(src, seed=0).init())


@pytest.mark.parametrize("world", [3, 7])
def test_kept_remainder_gives_every_rank_a_sample(world):
    """With drop_last=False a window's leftovers of a bucket are split over the ranks; a bucket
    with fewer leftovers than ranks would give some rank an empty batch, which the loader
    cannot deliver, so that rank would fall a step behind the others. Such leftovers are dropped
    and counted instead; every rank has a sample at every step."""
    outs, states = [], set()
    for r in range(world):
        p = make(r, world, window=40, drop_last=False)
        state, out = run(p)
        outs.append(out)
        states.add(p.snapshot(state))
    assert len(states) == 1 and len({len(o) for o in outs}) == 1
    assert min(len(rec) for o in outs for rec in o) >= 1
    used = sum(len(rec) for o in outs for rec in o)
    assert used + state.dropped + state.unfit + state.rejected == N
