"""RNG properties: the keyed permutation is a bijection with random access for any n; seed
material is combined by hashing (seed s at epoch 1 differs from seed s+1 at epoch 0)."""

import dataclasses

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from fpipe.core import rng
from fpipe.core.testing import run
from property_tests.strategies import plan_specs


@given(n=st.integers(1, 5000), seed=st.integers(0, 2**64 - 1))
def test_permutation_is_a_bijection(n, seed):
    k = rng.key(seed)
    p = rng.permutation(k, n)
    assert np.array_equal(np.sort(p), np.arange(n))
    probe = np.unique(np.linspace(0, n - 1, 7).astype(np.int64))
    assert np.array_equal(rng.permutation(k, n, probe), p[probe])
    assert np.array_equal(rng.inverse_permutation(k, n, p[probe]), probe)


@given(seed=st.integers(0, 2**62), n=st.integers(20, 500))
def test_seed_plus_one_is_not_next_epoch(seed, n):
    assert rng.fold_in(rng.key(seed), 1) != rng.fold_in(rng.key(seed + 1), 0)
    a = rng.permutation(rng.fold_in(rng.key(seed), 1), n)
    b = rng.permutation(rng.fold_in(rng.key(seed + 1), 0), n)
    assert not np.array_equal(a, b)


@st.composite
def free_specs(draw):
    """Plans whose order has enough freedom that a chance collision is negligible: at least 16
    samples, and 8 slices or a window of 8 (drawn so, not filtered: no example is thrown away)."""
    spec = draw(plan_specs(min_samples=16))
    many_slices = spec.slice_size is not None and spec.num_samples // spec.slice_size >= 8
    if not many_slices and (spec.window or 0) < 8:
        spec = dataclasses.replace(spec, window=draw(st.integers(8, 40)))
    return spec


@given(spec=free_specs())
def test_pipeline_epoch_1_differs_from_next_seed_epoch_0(spec):
    # Only compare when the order has enough freedom that a chance collision is negligible.
    many_slices = spec.slice_size is not None and spec.num_samples // spec.slice_size >= 8
    assert spec.num_samples >= 16 and (many_slices or (spec.window or 0) >= 8)
    s = dataclasses.replace(
        spec, num_epochs=2, token_limit=None, world_size=1, per_rank_batch=1, drop_last=False
    )
    t = dataclasses.replace(s, seed=s.seed + 1, num_epochs=1)
    _, a = run(s.build())
    _, b = run(t.build())
    epoch1 = [i for r in a for _, i, e in r.refs.triples() if e == 1]
    epoch0 = [i for r in b for _, i, e in r.refs.triples() if e == 0]
    assert epoch1 != epoch0
