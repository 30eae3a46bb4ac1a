"""Invariant 2 at the loader level: snapshot after k batches, restore the bytes in a fresh
process; the following batches (tensors bit-equal, per-sample randomness included) equal the
uninterrupted run."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.loader.helpers import build, prepared_images, take

AFTER = 4  # batches compared after each cut


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return prepared_images(tmp_path_factory.mktemp("lr"), shards=3, per_shard=10)


# Every cut of an example is restored in the shared fresh process; examples are few because each
# builds a loader with worker processes (one per example: it snapshots at every cut on its way,
# as a training loop that checkpoints does).
@settings(max_examples=4, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    cuts=st.lists(st.integers(0, 20), min_size=1, max_size=3, unique=True),
    workers=st.tuples(st.sampled_from([0, 2]), st.sampled_from([0, 1])),
)
def test_resume_in_fresh_process(dataset, tmp_path_factory, fresh_process, seed, cuts, workers):
    tmp = tmp_path_factory.mktemp("states")
    reference = take(build(dataset, seed=seed), max(cuts) + AFTER)
    paths = []
    loader = build(dataset, seed=seed, num_workers=workers[0])
    it = iter(loader)
    cuts = sorted(cuts)
    for done, k in zip([0, *cuts], cuts):
        for _ in range(k - done):
            next(it)
        path = tmp / f"state_{k}.bin"
        path.write_bytes(loader.snapshot())
        paths.append(str(path))
    restored = fresh_process.restore(dataset, paths, after=AFTER, seed=seed, num_workers=workers[1])
    for k, got in zip(cuts, restored):
        assert got == reference[k : k + AFTER], f"resume after {k} batches diverges"
