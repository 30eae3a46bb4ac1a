"""Topology (WorkerConfig), global / per-rank distribution through the loader, the global batch
size, and the consistency check in a single process."""

import pickle

import pytest

import fpipe
from fpipe.core.errors import ConfigError, SnapshotMismatchError
from fpipe.loader import Topology, WorkerConfig
from fpipe.loader.consistency import (
    ConsistencyError,
    check_state_consistency,
    consistency_enabled,
)
from tests.distributed.helpers import batch_keys, build_dataset, make_text_dataset


@pytest.fixture(scope="module")
def text_ds(tmp_path_factory):
    return make_text_dataset(tmp_path_factory.mktemp("topo"), shards=4, per_shard=12)


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


# --- Topology ---------------------------------------------------------------------------------


def test_positional_and_alias(clean_env):
    t = Topology(1, 4, 2)
    assert (t.rank, t.world_size, t.num_workers, t.data_parallel_group) == (1, 4, 2, None)
    assert WorkerConfig is Topology
    assert WorkerConfig(rank=0, world_size=2, num_workers=1).world_size == 2
    assert Topology() == Topology(0, 1)
    assert Topology.default_worker_config(3).num_workers == 3


def test_from_env(clean_env):
    clean_env.setenv("RANK", "2")
    clean_env.setenv("WORLD_SIZE", "3")
    assert (Topology.from_env().rank, Topology.from_env().world_size) == (2, 3)
    assert Topology().rank == 2  # fields left out are detected
    assert Topology(rank=0).world_size == 3
    clean_env.delenv("RANK")
    clean_env.setenv("LOCAL_RANK", "1")
    assert Topology.from_env().rank == 1
    clean_env.setenv("WORLD_SIZE", "x")
    with pytest.raises(ConfigError, match="WORLD_SIZE"):
        Topology.from_env()


@pytest.mark.parametrize("rank,world", [(2, 2), (-1, 2), (0, 0)])
def test_bad_rank(clean_env, rank, world):
    with pytest.raises(ConfigError, match="rank"):
        Topology(rank, world)


def test_group_without_dist_is_an_error(clean_env):
    with pytest.raises(ConfigError, match="not initialized"):
        Topology(data_parallel_group=object())


def test_pickle_drops_group(clean_env):
    t = Topology(1, 2, 0, data_parallel_group=object())
    assert pickle.loads(pickle.dumps(t)) == Topology(1, 2, 0)


def test_from_torch_distributed_group(clean_env, tmp_path):
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        group = dist.new_group([0])
        t = Topology(num_workers=2, data_parallel_group=group)
        assert (t.rank, t.world_size, t.num_workers) == (0, 1, 2)
        assert t.data_parallel_group is group
        assert Topology.from_env().world_size == 1
        assert not consistency_enabled(None)  # one rank: nothing to compare
        check_state_consistency(b"abc", batches=3)  # a one-rank collective passes
    finally:
        dist.destroy_process_group()


# --- global mode through the loader -----------------------------------------------------------


def test_global_batch_size_divides(text_ds):
    assert build_dataset(text_ds, rank=1, world_size=3, global_batch_size=6).batch_size == 2
    with pytest.raises(ConfigError, match="not a positive multiple of the world size 4"):
        build_dataset(text_ds, rank=0, world_size=4, global_batch_size=6)
    with pytest.raises(ConfigError, match="only one"):
        fpipe.get_train_dataset(text_ds, batch_size=2, global_batch_size=6, topology=Topology(0, 1))
    # neither: Energon's batch_size=None, unbatched samples
    unbatched = fpipe.get_train_dataset(text_ds, topology=Topology(0, 1))
    assert isinstance(next(iter(unbatched)), fpipe.Sample)
    # a finite unbatched stream knows its length: one sample per step (it raised a TypeError)
    one_pass = fpipe.get_train_dataset(text_ds, num_epochs=1, topology=Topology(1, 3))
    assert len(one_pass) == len(list(one_pass)) == 16
    val = fpipe.get_val_dataset(text_ds, batch_size=None, topology=Topology(2, 3))
    assert len(val) == len(list(val)) == 16
    with pytest.raises(ConfigError, match="distribution"):
        build_dataset(text_ds, distribution="random")


def _keys(loader, n=None):
    out = []
    for b in loader:
        out.extend(batch_keys(b))
        if n is not None and len(out) >= n:
            break
    return out


def test_restore_with_another_batch_size_continues(text_ds):
    """Global batch 6 on 2 ranks for 3 steps, then one rank with global batch 4."""
    ref = _keys(fpipe.get_loader(build_dataset(text_ds, num_epochs=1, global_batch_size=1)))
    assert sorted(ref) == sorted(set(ref)) and len(ref) == 48
    loaders = [
        fpipe.get_loader(build_dataset(text_ds, rank=r, world_size=2, num_epochs=1))
        for r in range(2)
    ]
    its = [iter(x) for x in loaders]
    got = []
    for _ in range(3):
        for it in its:
            got.extend(batch_keys(next(it)))
    states = {x.state_dict()["fpipe_snapshot"] for x in loaders}
    assert len(states) == 1  # the same bytes on both ranks
    resumed = fpipe.get_loader(build_dataset(text_ds, global_batch_size=4, num_epochs=1))
    resumed.load_state_dict({"fpipe_snapshot": states.pop()})
    got.extend(_keys(resumed))
    # 18 samples at batch 6, then 7 batches of 4; the last 2 are a dropped short batch
    assert got == ref[:46]


def test_drop_last_false_splits_the_last_global_batch(text_ds):
    # 48 samples, global batch 10: 4 full steps, then 8 samples spread over 2 ranks (4 + 4).
    outs = [
        _keys(
            fpipe.get_loader(
                build_dataset(
                    text_ds,
                    rank=r,
                    world_size=2,
                    num_epochs=1,
                    global_batch_size=10,
                    drop_last=False,
                )
            )
        )
        for r in range(2)
    ]
    assert sorted(outs[0] + outs[1]) == sorted(set(outs[0] + outs[1]))
    assert len(outs[0] + outs[1]) == 48
    assert (len(outs[0]), len(outs[1])) == (24, 24)


# --- per-rank mode ----------------------------------------------------------------------------


def test_per_rank_parts_are_disjoint_and_cover(text_ds):
    outs = [
        _keys(
            fpipe.get_loader(
                build_dataset(
                    text_ds,
                    rank=r,
                    world_size=3,
                    num_epochs=1,
                    distribution="per_rank",
                    batch_size=4,
                    drop_last=False,
                )
            )
        )
        for r in range(3)
    ]
    seen = [k for o in outs for k in o]
    assert len(seen) == len(set(seen)) == 48
    # each rank reads its own contiguous part of the index order (its own shards)
    assert {k.split("/")[0] for k in outs[0]} == {"shard-00", "shard-01"}
    assert all(int(k.split("/")[1]) < 16 for k in outs[0])


def test_per_rank_restore_on_another_world_size_is_refused(text_ds):
    def loader(rank, world):
        pd = build_dataset(
            text_ds, rank=rank, world_size=world, distribution="per_rank", batch_size=2
        )
        return fpipe.get_loader(pd)

    a = loader(1, 2)
    it = iter(a)
    first = [batch_keys(next(it)) for _ in range(3)]
    data = a.state_dict()
    b = loader(1, 2)
    b.load_state_dict(data)  # same world size and rank: accepted, continues exactly
    assert batch_keys(next(iter(b))) == batch_keys(next(it))
    assert first  # (used)
    with pytest.raises(SnapshotMismatchError, match="per_rank.*world_size"):
        loader(1, 3).load_state_dict(data)
    with pytest.raises(SnapshotMismatchError, match="per_rank.*rank"):
        loader(0, 2).load_state_dict(data)
    # and a global-mode snapshot is not a per-rank one
    g = fpipe.get_loader(build_dataset(text_ds, rank=1, world_size=2))
    with pytest.raises(SnapshotMismatchError):
        loader(1, 2).load_state_dict(g.state_dict())


# --- consistency check, single process --------------------------------------------------------


def test_consistency_off_without_dist(text_ds):
    assert not consistency_enabled(None)
    assert consistency_enabled(True) and not consistency_enabled(False)
    loader = fpipe.get_loader(build_dataset(text_ds))
    assert loader.check_consistency is None
    loader.check_consistency = True  # forced on, without torch.distributed: compares one rank
    assert loader.state_dict()["fpipe_snapshot"] == loader.snapshot()


def test_consistency_error_message(monkeypatch):
    import numpy as np

    import fpipe.loader.consistency as c

    # rows: [replica key, batches, hash words]
    rows = np.array([[0, 3, 1, 2], [0, 4, 1, 2], [0, 4, 5, 6]], dtype=np.int64)
    monkeypatch.setattr(c, "_gather_rows", lambda row, group: rows)
    with pytest.raises(ConsistencyError, match=r"different numbers of batches.*\[0\] took 3"):
        check_state_consistency(b"x")
    with pytest.raises(ConsistencyError, match=r"plan states differ.*\[2\]"):
        check_state_consistency(b"x")
    # per-rank mode: different keys may hold different states, batches must still agree
    rows = np.array([[0, 4, 1, 2], [1, 4, 5, 6]], dtype=np.int64)
    check_state_consistency(b"x")
