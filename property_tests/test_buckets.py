"""Bucketed batching (global mode): every rank has the same bucket and batch shape at every
step, for any world size and after an elastic restore to another one; every sample of an epoch
is used at most once and the rest are counted; exact resume at any cut; bucket frequencies
converge to OpenSora's expected weights."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st

from fpipe.core import Pipeline
from fpipe.core.testing import assert_exact_resume, run
from fpipe.plan import bucket_batches, parse_bucket_config, samples, slice_shuffle

CONFIG = {
    "1:1": {32: {1: (1.0, 4), 5: (0.7, 3), 9: (0.5, 2)}, 64: {1: (0.6, 2), 9: (0.5, 1)}},
    "16:9": {"36x64": {1: (1.0, 3), 5: (0.8, 2)}},
    "9:16": {"64x36": {5: (1.0, 2)}},
}
TABLE = parse_bucket_config(CONFIG)


def metadata(n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    frames = rng.integers(1, 16, n)
    frames[rng.random(n) < 0.4] = 1
    return {
        "width": rng.integers(20, 140, n),
        "height": rng.integers(20, 140, n),
        "num_frames": frames,
    }


@dataclasses.dataclass(frozen=True)
class Spec:
    n: int
    seed: int
    world: int
    window: int | None
    drop_last: bool
    num_epochs: int

    def build(self, rank: int = 0, world: int | None = None) -> Pipeline:
        view = slice_shuffle(samples(self.n, columns=metadata(self.n, self.seed)), 3)
        src = bucket_batches(
            view,
            TABLE,
            rank=rank,
            world_size=self.world if world is None else world,
            window=self.window,
            drop_last=self.drop_last,
            num_epochs=self.num_epochs,
        )
        return Pipeline(src, seed=self.seed)


specs = st.builds(
    Spec,
    n=st.integers(20, 400),
    seed=st.integers(0, 2**32),
    world=st.integers(1, 6),
    window=st.none() | st.integers(25, 300),
    drop_last=st.booleans(),
    num_epochs=st.integers(1, 2),
)


def ranks(spec: Spec, world: int, data: bytes | None = None, limit: int | None = None):
    """(final state, outputs) of every rank, optionally restored from snapshot bytes."""
    out = []
    for r in range(world):
        p = spec.build(r, world)
        out.append(run(p, p.restore(data) if data is not None else None, limit=limit))
    return out


def check_agreement(outs: list[list]) -> None:
    assert len({len(o) for o in outs}) == 1, [len(o) for o in outs]
    for step in zip(*outs):
        assert len({r.bucket for r in step}) == 1
        assert len({r.step for r in step}) == 1
        sizes = [len(r) for r in step]
        b = TABLE.buckets[step[0].bucket]
        # full steps: batch_size(bucket) on every rank; a kept remainder: split evenly
        assert set(sizes) == {b.batch_size} or max(sizes) - min(sizes) <= 1


def used_refs(outs) -> list:
    return [t for o in outs for r in o for t in r.refs.triples()]


FEW = settings(max_examples=25)  # each example runs several ranks over whole epochs


@FEW
@given(spec=specs)
def test_same_bucket_on_every_rank_and_coverage(spec):
    runs = ranks(spec, spec.world)
    outs = [o for _, o in runs]
    check_agreement(outs)
    used = used_refs(outs)
    assert len(used) == len(set(used))  # no sample twice in the run (epochs are in the ids)
    states = {s for s, _ in runs}
    assert len(states) == 1
    (state,) = states
    assert len(used) + state.dropped + state.unfit + state.rejected == spec.n * spec.num_epochs
    if spec.drop_last:
        for r in outs[0]:  # full batches only
            assert len(r) == TABLE.buckets[r.bucket].batch_size


@FEW
@given(spec=specs, k=st.integers(0, 60), w2=st.integers(1, 7))
def test_elastic_restore_keeps_agreement_and_coverage(spec, k, w2):
    head_runs = ranks(spec, spec.world, limit=k)
    snaps = {spec.build(r).snapshot(s) for r, (s, _) in enumerate(head_runs)}
    assert len(snaps) == 1
    (data,) = snaps
    tail_runs = ranks(spec, w2, data)
    check_agreement([o for _, o in tail_runs])
    head = used_refs([o for _, o in head_runs])
    tail = used_refs([o for _, o in tail_runs])
    note(f"head {len(head)} tail {len(tail)}")
    assert len(set(head + tail)) == len(head) + len(tail)
    final = tail_runs[0][0]
    counted = final.dropped + final.unfit + final.rejected
    assert len(head) + len(tail) + counted == spec.n * spec.num_epochs


@FEW
@given(spec=specs, cuts=st.lists(st.integers(0, 80), min_size=1, max_size=3))
def test_exact_resume_at_any_cut(spec, cuts):
    assume(spec.world <= 4)
    rank = spec.seed % spec.world
    assert_exact_resume(lambda: spec.build(rank), cuts)


def expected_weights(n: int, seed: int) -> np.ndarray:
    """OpenSora's expected share of steps per bucket: E[samples kept in b] / batch_size(b),
    normalized, with E[kept] from the assignment rule and the probabilities (the cascade to
    smaller resolutions computed exactly, without any draw)."""
    from fpipe.plan.buckets._assign import _lookup

    cols = metadata(n, seed)
    lk = _lookup(TABLE)
    w, h, t = (cols[c].astype(float) for c in ("width", "height", "num_frames"))
    a = np.searchsorted(lk.mid, np.log(w / h))
    kept = np.zeros(len(TABLE))
    for i in range(n):
        reach = 1.0  # probability that the sample is still unassigned at this level
        for level in range(lk.frames.shape[1]):
            if not lk.area[a[i], level] <= w[i] * h[i]:
                continue
            fits = [
                j
                for j in range(lk.frames.shape[2])
                if (lk.frames[a[i], level, j] == 1)
                == (t[i] <= 1)  # images to 1-frame buckets, videos to the others
                and lk.frames[a[i], level, j] <= t[i]
            ]
            if not fits:
                continue
            b = int(lk.bid[a[i], level, max(fits)])
            kept[b] += reach * TABLE.buckets[b].probability
            reach *= 1 - TABLE.buckets[b].probability
    bs = np.array([b.batch_size for b in TABLE.buckets], dtype=float)
    weights = kept / bs
    return weights / weights.sum()


def test_bucket_frequencies_converge_to_opensora_weights():
    n, seed = 20_000, 7
    expected = expected_weights(n, seed)
    spec = Spec(n=n, seed=seed, world=2, window=None, drop_last=True, num_epochs=2)
    _, out = run(spec.build(0))
    counts = np.bincount([r.bucket for r in out], minlength=len(TABLE))
    observed = counts / counts.sum()
    assert np.abs(observed - expected).max() < 0.01, (expected.round(4), observed.round(4))
    # the order is shuffled: the first fifth of the steps already has the same mix
    first = np.bincount([r.bucket for r in out[: len(out) // 5]], minlength=len(TABLE))
    assert np.abs(first / first.sum() - expected).max() < 0.03
