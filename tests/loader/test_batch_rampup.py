"""Megatron's batch-size ramp-up through get_train_dataset and the loader: 4 ranks ramp up,
2 ranks restore mid-ramp from the loader state, and every sample of the epoch comes once."""

from __future__ import annotations

import json
from collections import Counter

import pytest

import fpipe
from fpipe.core.errors import ConfigError
from fpipe.loader import Topology
from fpipe.plan import BatchSchedule

N = 12_000  # the ramp takes 10,000 samples, then full batches of 256
RAMP = (32, 32, 10_000)


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    path = tmp_path_factory.mktemp("ramp") / "docs.jsonl"
    with open(path, "w") as f:
        for i in range(N):
            f.write(json.dumps({"text": f"doc {i}", "tokens": 5 + i % 7}) + "\n")
    return str(path)


def dataset(path, rank, world, **kw):
    args = dict(
        global_batch_size=256,
        rampup_batch_size=RAMP,
        shuffle_buffer_size=100,
        max_samples_per_sequence=10,
        num_epochs=1,
        drop_last=False,
        seed=7,
        sample_type="TextSample",
        field_map={"text": "text"},
        topology=Topology(rank=rank, world_size=world),
    )
    return fpipe.get_train_dataset(path, **{**args, **kw})


def test_rampup_on_4_ranks_restored_mid_ramp_on_2_ranks(table):
    schedule = BatchSchedule.rampup(*RAMP, final=256)
    cut = 60  # mid-ramp: steps 45-89 take 64 samples each
    assert schedule.size_at(cut) == 64 and schedule.steps[-1] > cut
    seen, states = Counter(), set()
    for rank in range(4):
        loader = fpipe.get_loader(dataset(table, rank, 4), num_workers=0)
        it = iter(loader)
        for step in range(cut):
            batch = next(it)
            assert len(batch.__key__) == schedule.size_at(step) // 4
            seen.update(batch.__key__)
        states.add(json.dumps(loader.state_dict(), sort_keys=True, default=str))
    assert len(states) == 1  # the same state on every rank
    state = loader.state_dict()
    for rank in range(2):
        loader = fpipe.get_loader(dataset(table, rank, 2), num_workers=0)
        loader.load_state_dict(state)
        sizes = []
        for batch in loader:
            sizes.append(len(batch.__key__))
            seen.update(batch.__key__)
        assert sizes[:3] == [32, 32, 32]  # step 60 on 2 ranks: 64 / 2
        assert max(sizes) == 128  # after the ramp: 256 / 2
    assert len(seen) == N and set(seen.values()) == {1}


def test_table_and_errors(table):
    ds = dataset(table, 0, 2, rampup_batch_size=None, global_batch_size={0: 16, 3: 64})
    plan = ds.plan
    state, sizes = plan.init(), []
    for _ in range(5):
        state, out = plan.next(state, 1)
        sizes.append(len(out[0].refs))
    assert sizes == [8, 8, 8, 32, 32]
    one = dataset(table, 0, 2, rampup_batch_size=None, global_batch_size={0: 16})
    fixed = dataset(table, 0, 2, rampup_batch_size=None, global_batch_size=16)
    assert one.plan.fingerprint == fixed.plan.fingerprint  # a table of one size is that size
    with pytest.raises(ConfigError, match="from step 0 of the schedule"):
        dataset(table, 0, 3, rampup_batch_size=None, global_batch_size={0: 8, 5: 24})
    with pytest.raises(ConfigError, match="give it as one integer"):
        dataset(table, 0, 2, global_batch_size={0: 16, 3: 64})
    with pytest.raises(ConfigError, match="packing_buffer_size"):
        dataset(table, 0, 2, packing_buffer_size=8, batch_size=None)
