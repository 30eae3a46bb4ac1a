"""The consumer's global position (epoch, refs of the global order taken) is the same on every
rank at every step, never goes back, and survives a restore on another world size."""

import pytest

import fpipe
from fpipe.loader import Topology
from tests.distributed.helpers import batch_epoch, make_text_dataset

# 10 samples, batch 1 per rank, 2 ranks, a shuffle window spanning epoch boundaries.
SETTINGS = dict(batch_size=1, shuffle_buffer_size=4, max_samples_per_sequence=2, seed=3)


@pytest.fixture(scope="module")
def ten(tmp_path_factory):
    return make_text_dataset(tmp_path_factory.mktemp("ten"), shards=2, per_shard=5)


def _loader(path, rank, world, **kw):
    ds = fpipe.get_train_dataset(path, topology=Topology(rank, world), **(SETTINGS | kw))
    return fpipe.get_loader(ds, num_workers=0)


def _positions(loader, steps=None):
    out = []
    for i, batch in enumerate(loader):
        st = loader.stats()
        out.append((st.epoch, st.position, batch_epoch(batch)))
        if steps is not None and i + 1 == steps:
            break
    return out


def test_epoch_is_the_same_on_every_rank_and_never_goes_back(ten):
    runs = [_positions(_loader(ten, r, 2, num_epochs=3)) for r in range(2)]
    assert len(runs[0]) == len(runs[1]) == 15
    global_pos = [[(e, p) for e, p, _ in run] for run in runs]
    assert global_pos[0] == global_pos[1]  # identical on both ranks
    epochs = [e for e, _ in global_pos[0]]
    assert epochs == sorted(epochs) and epochs[-1] == 2
    assert [p for _, p in global_pos[0]] == [2 * (i + 1) for i in range(15)]
    # each rank's batch epoch is at most the global one (a window spans the boundary)
    assert all(b <= e for run in runs for e, _, b in run)
    # the per-sample epochs alone disagree between ranks somewhere: why a global epoch is needed
    assert [b for *_, b in runs[0]] != [b for *_, b in runs[1]]


def test_position_continues_after_restore_on_another_world_size(ten):
    first = _loader(ten, 0, 2, num_epochs=2)
    before = _positions(first, steps=3)
    data = first.state_dict()
    solo = _loader(ten, 0, 1, batch_size=2, num_epochs=2)
    solo.load_state_dict(data)
    assert (solo.stats().epoch, solo.stats().position) == before[-1][:2]
    reference = _positions(_loader(ten, 0, 1, batch_size=2, num_epochs=2))
    assert _positions(solo) == reference[3:]


def test_per_rank_mode_reports_this_ranks_epoch(ten):
    loader = _loader(ten, 1, 2, num_epochs=2, distribution="per_rank")
    got = _positions(loader)
    assert all(pos is None for _, pos, _ in got)
    epochs = [e for e, _, _ in got]
    assert epochs == sorted(epochs) and epochs[-1] == 1


def test_state_bytes_are_the_same_on_every_rank(ten):
    """One checkpoint serves every rank in global mode: the state bytes (its epoch included)
    are equal on both ranks at every step, across the epoch boundaries where the ranks' own
    samples are of different epochs, and a seek to that step gives the same bytes."""
    loaders = [_loader(ten, r, 2, num_epochs=3) for r in range(2)]
    seekers = [_loader(ten, r, 2, num_epochs=3) for r in range(2)]
    steps = zip(range(15), *loaders)
    for step, *_ in steps:
        states = [lo.state_dict()["fpipe_snapshot"] for lo in loaders]
        assert states[0] == states[1], f"the ranks' states differ after step {step}"
        for lo in seekers:
            lo.seek(step + 1)
        assert [lo.state_dict()["fpipe_snapshot"] for lo in seekers] == states, f"seek({step + 1})"
