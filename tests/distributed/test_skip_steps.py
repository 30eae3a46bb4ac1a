"""Skip ranges: the batches of skipped global steps are not delivered, nothing is read for
them, the skip stays in the state across a restore, and the output does not depend on workers."""

from __future__ import annotations

import pytest

import fpipe
from fpipe.core.errors import ConfigError, SnapshotError
from fpipe.encode import DefaultTaskEncoder
from fpipe.loader.state import LoaderState, encode_loader_state
from fpipe.plan.skip import MAX_SKIP_RANGES, next_recipe, normalize_step_ranges
from fpipe.storage.read.dataset import Dataset
from tests.distributed.helpers import batch_keys, build_dataset

ONE_EPOCH = dict(num_epochs=1)  # 8 global steps of 6, each sample once


class KeyRecorder(DefaultTaskEncoder):
    """Records the key of every sample it encodes (num_workers=0: in this process)."""

    seen: list[str] = []

    def encode_sample(self, sample, rng):
        KeyRecorder.seen.append(sample.__key__)
        return super().encode_sample(sample, rng)


def _keys(loader) -> list[list[str]]:
    return [batch_keys(b) for b in loader]


def _reference(text_dataset, **kw) -> list[list[str]]:
    return _keys(fpipe.get_loader(build_dataset(text_dataset, **ONE_EPOCH, **kw)))


def test_normalize_merges_sorts_and_refuses_bad_ranges():
    assert normalize_step_ranges([range(10, 20), (15, 30), "40:50", "60"]) == (
        (10, 30),
        (40, 50),
        (60, 61),
    )
    assert normalize_step_ranges([(3, 5), (5, 8)]) == ((3, 8),)
    for bad in [(5, 5), (-1, 3), "a:b", [(1, 2, 3)], range(0, 10, 2)]:
        with pytest.raises(ConfigError):
            normalize_step_ranges(bad)
    with pytest.raises(ConfigError, match="at most"):
        normalize_step_ranges([(2 * i, 2 * i + 1) for i in range(MAX_SKIP_RANGES + 1)])


def test_skipped_steps_not_delivered_and_nothing_read(text_dataset, monkeypatch):
    ref = _reference(text_dataset)
    read: list[int] = []
    original = Dataset.read_many

    def counting_read_many(self, indices, *args, **kwargs):
        read.extend(int(i) for i in indices)
        return original(self, indices, *args, **kwargs)

    monkeypatch.setattr(Dataset, "read_many", counting_read_many)
    KeyRecorder.seen = []
    loader = fpipe.get_loader(
        build_dataset(text_dataset, **ONE_EPOCH, task_encoder=KeyRecorder()), num_workers=0
    )
    loader.skip(range(2, 5))
    got = _keys(loader)
    assert got == ref[:2] + ref[5:]
    skipped = {k for batch in ref[2:5] for k in batch}
    assert not skipped & set(KeyRecorder.seen)  # nothing decoded or encoded for them
    assert sorted(KeyRecorder.seen) == sorted(k for b in got for k in b)
    assert read and not {int(k.split("/")[1]) for k in skipped} & set(read)  # nothing read
    stats = loader.stats()
    assert stats.skip_steps == ((2, 5),) and stats.batches == len(ref) - 3


def test_skip_kept_across_restore_and_same_as_option(text_dataset):
    ref = _reference(text_dataset)
    expected = ref[:1] + ref[3:6] + ref[7:]  # steps 1-2 and 6 skipped
    loader = fpipe.get_loader(build_dataset(text_dataset, **ONE_EPOCH))
    loader.skip([(1, 3)])
    it = iter(loader)
    head = [batch_keys(next(it)) for _ in range(2)]  # steps 0 and 3
    loader.skip("6:7")  # during iteration: starts over from the last batch taken
    rest = _keys(loader)
    assert head + rest == expected
    # a snapshot after step 3 restores with both ranges into a loader that has none
    first = fpipe.get_loader(build_dataset(text_dataset, **ONE_EPOCH))
    first.skip([(1, 3), (6, 7)])
    it = iter(first)
    taken = [batch_keys(next(it)) for _ in range(2)]
    snap = first.state_dict()
    fresh = fpipe.get_loader(build_dataset(text_dataset, **ONE_EPOCH))
    fresh.load_state_dict(snap)
    assert fresh.stats().skip_steps == ((1, 3), (6, 7))
    assert taken + _keys(fresh) == expected
    # skip_steps as a dataset option: the same batches, the same snapshots
    opt = fpipe.get_loader(build_dataset(text_dataset, **ONE_EPOCH, skip_steps=[[1, 3], [6, 7]]))
    it = iter(opt)
    assert [batch_keys(next(it)) for _ in range(2)] == taken
    assert opt.state_dict() == snap


def test_skip_after_restore_on_another_world_size(text_dataset):
    """Global steps are the same on every rank: skip after restoring on 3 ranks."""
    ref2 = [_reference(text_dataset, rank=r, world_size=2) for r in range(2)]
    loaders = [fpipe.get_loader(build_dataset(text_dataset, rank=r, world_size=2, **ONE_EPOCH))
               for r in range(2)]  # fmt: skip
    its = [iter(lo) for lo in loaders]
    for it in its:
        next(it), next(it)
    snap = loaders[0].state_dict()
    got = []
    for r in range(3):
        lo = fpipe.get_loader(build_dataset(text_dataset, rank=r, world_size=3, **ONE_EPOCH))
        lo.load_state_dict(snap)
        lo.skip(range(2, 6))
        got.append(_keys(lo))
    whole = [k for step in zip(*got) for part in step for k in part]
    ref_whole = [k for step in zip(*ref2) for part in step for k in part]
    assert whole == ref_whole[6 * 6 :]  # steps 2-5 (6 refs each) left out, then the rest


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_skip_worker_independent(text_dataset, mode):
    ref = _reference(text_dataset)
    loader = fpipe.get_loader(
        build_dataset(text_dataset, **ONE_EPOCH), num_workers=2, worker_mode=mode
    )
    loader.skip([(0, 1), (4, 6)])
    assert _keys(loader) == ref[1:4] + ref[6:]


class OnePerPack(DefaultTaskEncoder):
    def select_samples_to_pack(self, samples):
        return [[s] for s in samples]

    def pack_selected_samples(self, samples):
        return samples[0]


def test_skip_refused_with_packing_buffer(text_dataset):
    packing = dict(batch_size=2, packing_buffer_size=4, task_encoder=OnePerPack())
    ds = build_dataset(text_dataset, **packing, **ONE_EPOCH)
    loader = fpipe.get_loader(ds)
    with pytest.raises(ConfigError, match="plan tier"):
        loader.skip(range(1, 3))
    with pytest.raises(ConfigError, match="packing_buffer_size"):
        fpipe.get_loader(build_dataset(text_dataset, **packing, skip_steps=[[1, 2]]))


def test_edited_skip_list_refused(text_dataset):
    ds = build_dataset(text_dataset, **ONE_EPOCH)
    loader = fpipe.get_loader(ds)
    for bad in [((5, 3),), ((4, 8), (1, 2)), ((1, 4), (3, 6))]:
        data = encode_loader_state(ds.plan, LoaderState(ds.plan.init(), skip=bad))
        with pytest.raises(SnapshotError, match="skip"):
            loader.load_state_dict(data)


def test_next_recipe_plans_over_skipped_steps(text_dataset):
    plan = build_dataset(text_dataset, **ONE_EPOCH).plan
    state, recipe, skipped = next_recipe(plan, plan.init(), ((0, 3),))
    assert (recipe.step, skipped) == (3, 3)
    state, recipe, skipped = next_recipe(plan, state, ((4, 100),))
    assert recipe is None and skipped == 4  # the stream ended inside the range
