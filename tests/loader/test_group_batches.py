"""Grouped batching (Energon's ``batch_group_criterion``): the guide's encoders as written give
Energon's groups over fpipe's ordered stream, resume exactly inside a partly filled group, and
give the same batches for any number of workers and worker mode."""

from __future__ import annotations

from typing import Hashable, Optional, Tuple  # noqa: UP035 - as Energon's guide writes it

import pytest

import fpipe
from fpipe import (
    CaptioningSample,
    DefaultTaskEncoder,
    get_loader,
    get_train_dataset,
    get_val_dataset,
)
from fpipe.core.errors import ConfigError, MaterializeError, SnapshotError
from fpipe.encode.hooks import SkipSample
from fpipe.loader import Topology
from tests.loader.helpers import digest

# --- the two encoders of Energon's grouping guide, as written there ---


class AspectGroupingTaskEncoder(DefaultTaskEncoder):
    def batch_group_criterion(self, sample: CaptioningSample) -> Tuple[Hashable, Optional[int]]:  # noqa: UP006
        aspect_ratio = sample.image.shape[2] / sample.image.shape[1]

        # Bin aspect ratios into 3 groups
        if aspect_ratio < 0.8:
            return "portrait", 8
        elif aspect_ratio < 1.2:
            return "square", 8
        else:
            return "landscape", 8


class ShapeGroupingTaskEncoder(DefaultTaskEncoder):
    def batch_group_criterion(self, sample: CaptioningSample) -> Tuple[Hashable, Optional[int]]:  # noqa: UP006
        batch_size = 4 if sample.image.shape[1] < 512 else 2
        return sample.image.shape, batch_size


class FixedSizeGroupingTaskEncoder(DefaultTaskEncoder):
    """The guide's "fixed global batch size": the criterion gives no size."""

    def batch_group_criterion(self, sample: CaptioningSample) -> Tuple[Hashable, Optional[int]]:  # noqa: UP006
        return sample.image.shape[2] > sample.image.shape[1], None


def energon_groups(stream, criterion, fixed=None, drop_last=False):
    """The batches (lists of samples) of Energon's ``GroupBatchDataset`` over ``stream``, by its
    rules (megatron/energon/wrappers/group_batch_dataset.py): a sample joins its group (groups
    in the order first seen, never forgotten); a group reaching its batch size is a batch; at
    the end each non-empty group is a batch unless ``drop_last``."""
    buckets: dict = {}
    out = []
    for sample in stream:
        key, size = criterion(sample)
        assert (size is None) != (fixed is None)
        size = fixed if fixed is not None else size
        bucket = buckets.setdefault(key, [size, []])
        assert bucket[0] == size
        bucket[1].append(sample)
        if len(bucket[1]) >= bucket[0]:
            out.append(bucket[1])
            bucket[1] = []
    if not drop_last:
        out += [items for _, items in buckets.values() if items]
    return out


OPTIONS = dict(shuffle_buffer_size=8, max_samples_per_sequence=4, seed=5, num_epochs=1)


def _loader(path, encoder, *, batch_size=None, drop_last=False, num_workers=0, mode="process"):
    ds = get_train_dataset(
        path, batch_size=batch_size, drop_last=drop_last, task_encoder=encoder, **OPTIONS
    )
    return get_loader(ds, num_workers=num_workers, worker_mode=mode)


_STREAMS: dict = {}


def _stream(path):
    """The encoded samples of the same plan, ungrouped, one at a time (one worker)."""
    if path not in _STREAMS:
        _STREAMS[path] = list(_loader(path, DefaultTaskEncoder()))
    return _STREAMS[path]


@pytest.mark.parametrize(
    ("encoder", "fixed"),
    [(AspectGroupingTaskEncoder, None), (ShapeGroupingTaskEncoder, None),
     (FixedSizeGroupingTaskEncoder, 5)],
)  # fmt: skip
@pytest.mark.parametrize("drop_last", [False, True])
def test_the_guides_encoders_give_energons_groups(image_dataset, encoder, fixed, drop_last):
    enc = encoder()
    expected = energon_groups(_stream(image_dataset), enc.batch_group_criterion, fixed, drop_last)
    loader = _loader(image_dataset, enc, batch_size=fixed, drop_last=drop_last)
    got = list(loader)
    assert [list(b.__key__) for b in got] == [[s.__key__ for s in g] for g in expected]
    for batch, group in zip(got, expected):  # collated by batch(): the group's own images
        assert batch.image.shape[0] == len(group)
    # (every image of this dataset has its own shape: the shape groups fill only at the end)
    assert len(got) >= 3 or (drop_last and encoder is ShapeGroupingTaskEncoder)
    left = sum(map(len, expected)) if drop_last else 0
    if drop_last:  # the partly filled groups at the end are dropped, and counted
        expected_all = energon_groups(_stream(image_dataset), enc.batch_group_criterion, fixed)
        left = sum(map(len, expected_all)) - sum(map(len, expected))
    assert loader.stats().dropped.get("group_remainder", 0) == left


def test_exact_resume_inside_a_partly_filled_group(image_dataset):
    whole = [digest(b) for b in _loader(image_dataset, AspectGroupingTaskEncoder())]
    for cut in (1, 4, len(whole) - 2):
        loader = _loader(image_dataset, AspectGroupingTaskEncoder())
        it = iter(loader)
        for _ in range(cut):
            next(it)
        groups = loader._state.groups.groups
        assert any(g.waiting for g in groups)  # samples wait in a partly filled group
        assert any(g.witness is not None for g in groups)  # the group just delivered: empty
        state = loader.state_dict()
        again = _loader(image_dataset, AspectGroupingTaskEncoder())  # a fresh loader
        again.load_state_dict(state)
        assert [digest(b) for b in again] == whole[cut:]


class ParityGroups(DefaultTaskEncoder):
    """Two groups of 3 (odd and even caption lengths): batches end inside recipes."""

    def batch_group_criterion(self, sample):
        return len(sample.caption) % 2, 3


def test_resume_inside_a_chunk_with_workers(image_dataset):
    """The state points inside a recipe (a chunk of samples) and restores under threads."""
    whole = [digest(b) for b in _loader(image_dataset, ParityGroups())]
    loader = _loader(image_dataset, ParityGroups())
    it = iter(loader)
    next(it)
    assert loader._state.packs_taken > 0  # inside the first chunk
    again = _loader(image_dataset, ParityGroups(), num_workers=2, mode="thread")
    again.load_state_dict(loader.state_dict())
    assert [digest(b) for b in again] == whole[1:]


def test_a_snapshot_restores_on_its_own_rank_only(image_dataset):
    def loader(rank, world_size):
        ds = get_train_dataset(
            image_dataset,
            batch_size=None,
            task_encoder=ParityGroups(),
            topology=Topology(rank, world_size),
            **OPTIONS,
        )
        return get_loader(ds)

    whole = [digest(b) for b in loader(1, 2)]
    src = loader(1, 2)
    it = iter(src)
    next(it)
    same = loader(1, 2)
    same.load_state_dict(src.state_dict())
    assert [digest(b) for b in same] == whole[1:]
    with pytest.raises(SnapshotError, match="grouped batching"):
        loader(0, 1).load_state_dict(src.state_dict())


def test_the_same_batches_for_0_2_and_4_workers(image_dataset):
    ref = [digest(b) for b in _loader(image_dataset, AspectGroupingTaskEncoder())]
    two = _loader(image_dataset, AspectGroupingTaskEncoder(), num_workers=2)  # processes
    assert [digest(b) for b in two] == ref
    four = _loader(image_dataset, AspectGroupingTaskEncoder(), num_workers=4, mode="thread")
    assert [digest(b) for b in four] == ref


def test_restore_sample_rebuilds_a_grouped_batch(image_dataset):
    loader = _loader(image_dataset, AspectGroupingTaskEncoder())
    batches = list(loader)
    for batch in (batches[0], batches[-1]):  # the last: a partly filled group at the end
        again = loader.restore_sample(batch.__restore_key__)
        assert digest(again) == digest(batch)


def test_len_is_unknown_rather_than_wrong(image_dataset):
    for ds in (
        get_train_dataset(image_dataset, batch_size=None, task_encoder=ParityGroups(), **OPTIONS),
        get_val_dataset(image_dataset, batch_size=None, task_encoder=ParityGroups()),
    ):
        with pytest.raises(TypeError, match="grouped batching"):
            len(ds)


class SkippingGroups(DefaultTaskEncoder):
    """Leaves out samples whose key ends in 3 (SkipSample from the criterion) and gives a
    batch size per group from the caption's length."""

    def batch_group_criterion(self, sample):
        if sample.__key__.endswith("3"):
            raise SkipSample()
        return len(sample.caption) % 2, 3


def test_skip_sample_from_the_criterion_is_counted(image_dataset):
    loader = _loader(image_dataset, SkippingGroups())
    keys = [k for b in loader for k in b.__key__]
    stream = [s.__key__ for s in _stream(image_dataset)]
    assert keys and not any(k.endswith("3") for k in keys)
    assert len(keys) + loader.stats().skipped == len(stream)


class BothSizes(DefaultTaskEncoder):
    def batch_group_criterion(self, sample):
        return "all", 4


class BadSize(DefaultTaskEncoder):
    def batch_group_criterion(self, sample):
        return "all", 2 if sample.__key__.endswith("1") else 4


class Unhashable(DefaultTaskEncoder):
    def batch_group_criterion(self, sample):
        return list(sample.image.shape), 2


class Broken(DefaultTaskEncoder):
    def batch_group_criterion(self, sample):
        raise ValueError("boom")


def test_the_criterion_is_checked_as_energon_does(image_dataset):
    with pytest.raises(ConfigError, match=r"batch size 4 .* batch_size=3 is set"):
        next(iter(_loader(image_dataset, BothSizes(), batch_size=3)))
    with pytest.raises(ConfigError, match=r"returned batch size None"):
        next(iter(_loader(image_dataset, FixedSizeGroupingTaskEncoder())))
    with pytest.raises(ConfigError, match=r"a group's batch size must not change"):
        list(_loader(image_dataset, BadSize()))
    with pytest.raises(ConfigError, match=r"returned the group \[.*not hashable"):
        next(iter(_loader(image_dataset, Unhashable())))
    with pytest.raises(MaterializeError, match=r"batch_group_criterion"):
        next(iter(_loader(image_dataset, Broken())))


class GroupingGeneratorBatch(AspectGroupingTaskEncoder):
    def encode_batch(self, batch):
        yield batch


class GroupingPacking(AspectGroupingTaskEncoder):
    def select_samples_to_pack(self, samples):
        return [samples]

    def pack_selected_samples(self, samples):
        return samples[0]


def test_grouping_with_what_it_cannot_run_is_refused(image_dataset):
    with pytest.raises(ConfigError, match=r"encode_batch is a generator"):
        get_train_dataset(image_dataset, batch_size=None, task_encoder=GroupingGeneratorBatch())
    with pytest.raises(ConfigError, match=r"packing_buffer_size is set"):
        get_train_dataset(
            image_dataset, batch_size=4, packing_buffer_size=8, task_encoder=GroupingPacking()
        )
    with pytest.raises(ConfigError, match=r"fpipe.plan.pack step"):
        get_train_dataset(
            image_dataset,
            batch_size=2,
            plan_stages=[fpipe.plan.pack({"caption.chars": 60}, packing_buffer_size=10)],
            task_encoder=GroupingPacking(),
        )
    ds = get_train_dataset(image_dataset, batch_size=None, task_encoder=ShapeGroupingTaskEncoder())
    with pytest.raises(ConfigError, match=r"worker_mode='ray' is not supported"):
        get_loader(ds, num_workers=2, worker_mode="ray")
    with pytest.raises(ConfigError, match="batch_group_criterion"):  # buckets plan the batches
        get_train_dataset(
            image_dataset,
            bucket_config={"1:1": {16: {1: (1.0, 4)}}},
            task_encoder=AspectGroupingTaskEncoder(),
        )
