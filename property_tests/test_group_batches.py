"""Grouped batching (``batch_group_criterion``) through the Loader: for any plan, criterion
(groups and their batch sizes, or a fixed batch size), ``drop_last``, number of thread
workers and cut point, the batches are Energon's groups over the ungrouped stream (reference
equality), two runs give the same batches (determinism, worker independence), and a snapshot
after k batches restored into a fresh loader continues with the same batches (exact resume,
the waiting samples materialized again from their references)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fpipe
from tests.distributed.helpers import batch_keys, make_text_dataset
from tests.loader.test_group_batches import energon_groups


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return make_text_dataset(tmp_path_factory.mktemp("groups"), shards=4, per_shard=9)


class ModuloGroups(fpipe.DefaultTaskEncoder):
    """Group ``n % len(sizes)`` of sample "sample n", batch size ``sizes[group]`` (None: the
    fixed batch_size)."""

    def __init__(self, sizes: tuple):
        super().__init__()
        self.sizes = sizes

    def batch_group_criterion(self, sample):
        group = int(sample.text.split()[-1]) % len(self.sizes)
        return group, self.sizes[group]


def _loader(path, s, encoder=None, num_workers=0):
    ds = fpipe.get_train_dataset(
        path,
        batch_size=s["fixed"],
        drop_last=s["drop_last"],
        seed=s["seed"],
        shuffle_buffer_size=s["shuffle_buffer_size"],
        max_samples_per_sequence=3,
        num_epochs=1,
        task_encoder=encoder if encoder is not None else ModuloGroups(s["sizes"]),
    )
    return fpipe.get_loader(ds, num_workers=num_workers, worker_mode="thread")


@st.composite
def grouping(draw):
    fixed = draw(st.sampled_from([None, None, 4]))
    groups = draw(st.integers(1, 4))
    sizes = (None,) * groups if fixed else tuple(draw(st.integers(1, 6)) for _ in range(groups))
    return dict(
        seed=draw(st.integers(0, 2**31)),
        shuffle_buffer_size=draw(st.sampled_from([None, 5, 16])),
        drop_last=draw(st.booleans()),
        fixed=fixed,
        sizes=sizes,
    )


@settings(max_examples=6, deadline=None)
@given(s=grouping(), workers=st.sampled_from([0, 2]))
def test_grouping_is_energons_deterministic_and_resumes_exactly(dataset, s, workers):
    whole = [batch_keys(b) for b in _loader(dataset, s)]
    stream = list(_loader(dataset, {**s, "fixed": None}, fpipe.DefaultTaskEncoder()))
    criterion = ModuloGroups(s["sizes"]).batch_group_criterion
    expected = energon_groups(stream, criterion, s["fixed"], s["drop_last"])
    assert whole == [[x.__key__ for x in g] for g in expected]  # reference equality
    loader = _loader(dataset, s, num_workers=workers)
    states = [loader.state_dict()]
    got = []
    for b in loader:  # snapshot after every batch (as a loop that checkpoints each step)
        got.append(batch_keys(b))
        states.append(loader.state_dict())
    assert got == whole  # determinism, for any number of workers
    for cut, state in enumerate(states):
        again = _loader(dataset, s)  # a fresh loader from the snapshot bytes
        again.load_state_dict(state)
        assert [batch_keys(b) for b in again] == whole[cut:], f"resume after {cut} batches"
