"""Energon's wrappers, members and sample types on fpipe, as Energon 7.4 documents them."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from fpipe.core.errors import ConfigError
from tests.storage.energon741 import make_energon741_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("e") / "ds"
    make_energon741_dataset(root, shards=4, per_shard=4, split_ratio=(2, 2, 0))  # val: 8
    return str(root)


def _keys(loader):
    return [list(b.__key__) for b in loader]


def test_limit_and_repeat_as_megatron_uses_them(dataset):
    from fpipe.energon import (
        LimitDataset,
        RepeatDataset,
        WorkerConfig,
        get_loader,
        get_val_dataset,
    )

    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    val = get_val_dataset(dataset, batch_size=3, worker_config=wc)  # 8 samples: 3 batches
    plain = _keys(get_loader(val))
    assert len(plain) == 3
    ds = LimitDataset(
        RepeatDataset(val, worker_config=wc), length=5, worker_config=wc, reset_after_epoch=True
    )
    assert len(ds) == 5
    loader = get_loader(ds)
    first = _keys(loader)
    assert first == plain + plain[:2]  # repeated past the end, cut at 5 batches
    assert _keys(loader) == first  # each evaluation starts over
    # a snapshot inside an iteration resumes exactly there
    loader = get_loader(ds)
    it = iter(loader)
    next(it), next(it), next(it)
    state = loader.state_dict()
    again = get_loader(ds)
    again.load_state_dict(state)
    assert _keys(again) == first[3:]


def test_limit_over_a_packing_dataset_counts_batches(dataset):
    from fpipe.energon import (
        DefaultTaskEncoder,
        LimitDataset,
        RepeatDataset,
        WorkerConfig,
        get_loader,
        get_val_dataset,
    )

    class PairPacker(DefaultTaskEncoder):
        def select_samples_to_pack(self, samples):
            return [samples[i : i + 2] for i in range(0, len(samples), 2)]

        def pack_selected_samples(self, samples):
            return samples[0].replace(__key__="+".join(s.__key__ for s in samples))

    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    val = get_val_dataset(
        dataset, batch_size=2, packing_buffer_size=3, task_encoder=PairPacker(), worker_config=wc
    )  # 8 samples, buffers of 3: packs of 2, 1, 2, 1, 2; batches of 2 packs
    ds = LimitDataset(RepeatDataset(val, worker_config=wc), length=4, worker_config=wc)
    assert len(ds) == 4
    loader = get_loader(ds)
    first = _keys(loader)
    assert len(first) == 4 and all(len(b) == 2 for b in first)
    assert _keys(loader) == first  # each iteration starts over
    it = iter(loader)
    next(it), next(it)
    again = get_loader(ds)
    again.load_state_dict(loader.state_dict())
    assert _keys(again) == first[2:]


def test_repeat_counts_and_fractions(dataset):
    from fpipe.energon import RepeatDataset, WorkerConfig, get_loader, get_val_dataset

    val = get_val_dataset(dataset, batch_size=4, worker_config=WorkerConfig(0, 1))  # 2 batches
    plain = _keys(get_loader(val))
    ds = RepeatDataset(val, repeats=2.5)
    assert len(ds) == 5
    assert _keys(get_loader(ds, num_workers=2)) == plain * 2 + plain[:1]
    with pytest.raises(ConfigError, match="worker_config"):
        RepeatDataset(val, worker_config=WorkerConfig(1, 2))


def test_get_val_datasets_one_per_dataset(dataset, tmp_path):
    from fpipe.energon import get_loader, get_val_dataset, get_val_datasets

    md = tmp_path / "md.yaml"
    md.write_text(
        yaml.dump(
            {
                "__module__": "megatron.energon",
                "__class__": "MetadatasetV2",
                "splits": {
                    "val": {
                        "blend": [
                            {"path": dataset, "weight": 1},
                            {
                                "path": dataset,
                                "weight": 2,
                                "subflavors": {"b": 1},
                                "name": "second",
                            },
                        ]
                    }
                },
            }
        )
    )
    single = get_val_datasets(dataset, batch_size=4, split="val")
    assert len(single) == 1 and single[0][1].path.endswith("ds")
    pairs = get_val_datasets(str(md), batch_size=4, split="val")
    assert len(pairs) == 2
    expect = _keys(get_loader(get_val_dataset(dataset, batch_size=4, split="val")))
    for ds, _source in pairs:
        assert _keys(get_loader(ds)) == expect
    assert next(iter(pairs[1][0])).__subflavors__ == [{"b": 1}] * 4


def test_task_encoder_positions_and_augment(dataset):
    from fpipe.energon import (
        AugmentTaskEncoder,
        DefaultTaskEncoder,
        WorkerConfig,
        get_loader,
        get_val_dataset,
    )

    class Seen(DefaultTaskEncoder):
        def encode_sample(self, sample):
            sample.caption = f"{self.current_batch_index}:{self.current_sample_index}"
            return sample

    class Wrapped(AugmentTaskEncoder):
        def encode_batch(self, batch):
            batch = super().encode_batch(batch)
            batch.caption.append(f"b{self.current_batch_index}")
            return batch

    ds = get_val_dataset(
        dataset, batch_size=3, worker_config=WorkerConfig(0, 1), task_encoder=Wrapped(Seen())
    )
    captions = [b.caption for b in get_loader(ds, num_workers=2)]
    assert captions == [
        ["0:0", "0:1", "0:2", "b0"],
        ["1:3", "1:4", "1:5", "b1"],
        ["2:6", "2:7", "b2"],
    ]
    with pytest.raises(ConfigError, match="only available inside"):
        Seen().current_batch_index  # noqa: B018


def test_sample_extend_and_edataclass():
    from fpipe.energon import CaptioningSample, Sample, edataclass

    @edataclass
    class Pair(Sample):
        a: int

    @edataclass
    class Triple(Pair):
        b: int

    t = Triple.extend(Pair(a=1, __key__="k", __restore_key__=("x", 1)), b=2)
    assert (t.a, t.b, t.__key__, t.__restore_key__) == (1, 2, "k", ("x", 1))
    with pytest.raises(TypeError):
        Pair(1)  # keyword-only, as Energon's edataclass
    with pytest.raises(TypeError, match="Pair"):
        Pair.extend(CaptioningSample(image=None, caption=""), a=1)


@pytest.mark.parametrize(
    ("cls", "field_map", "check"),
    [
        ("OCRSample", {"image": "jpg", "text": "txt"}, lambda s: s.lines_boxes is None),
        (
            "MultiChoiceVQASample",
            {"image": "jpg", "context": "txt"},
            lambda s: s.choices is None and s.correct_choice_idx == 0,
        ),
    ],
)
def test_energon_prepared_dataset_of_the_added_sample_types(tmp_path, cls, field_map, check):
    import fpipe.energon as energon

    root = tmp_path / "ds"
    make_energon741_dataset(root, shards=2, per_shard=2)
    spec = {
        "sample_type": {"__module__": "megatron.energon", "__class__": cls},
        "field_map": field_map,
    }
    (root / ".nv-meta" / "dataset.yaml").write_text(yaml.dump(spec))
    ds = energon.get_train_dataset(
        str(root), batch_size=None, shuffle_buffer_size=None, max_samples_per_sequence=None
    )
    sample = next(iter(ds))
    assert type(sample) is getattr(energon, cls) and sample.image.ndim == 3 and check(sample)


def test_similarity_interleaved_sample_is_registered():
    from fpipe.energon import SimilarityInterleavedSample
    from fpipe.samples import sample_type_from_name

    spec = {"__module__": "megatron.energon", "__class__": "SimilarityInterleavedSample"}
    assert sample_type_from_name(spec) is SimilarityInterleavedSample
    fields = [f.name for f in dataclasses.fields(SimilarityInterleavedSample)]
    assert fields[-6:] == [
        "images",
        "texts",
        "audio",
        "video",
        "similarity_matrix",
        "matched_text_indices",
    ]


def test_blend_dataset_blends_batches_by_weight_as_energon(dataset):
    # Energon's test_blending, scaled down: batches of two datasets with their own batch sizes
    import torch

    from fpipe.energon import BlendDataset, WorkerConfig, get_loader, get_train_dataset

    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    opts = dict(worker_config=wc, shuffle_buffer_size=None, max_samples_per_sequence=None)
    blend = BlendDataset(
        (get_train_dataset(dataset, batch_size=1, **opts), 2),
        (get_train_dataset(dataset, batch_size=2, **opts), 8),
        worker_config=wc,
    )
    assert not isinstance(blend, BlendDataset)  # a planned dataset, as the other wrappers
    loader = get_loader(blend)
    sizes = {1: 0, 2: 0}
    for _, batch in zip(range(300), loader):
        assert isinstance(batch.image, torch.Tensor)
        sizes[batch.image.shape[0]] += 1
    assert 40 <= sizes[1] <= 80 and 220 <= sizes[2] <= 260
    state = loader.save_state_rank()
    again = get_loader(blend)
    again.restore_state_rank(state)
    assert [b.__key__ for _, b in zip(range(5), again)] == [
        b.__key__ for _, b in zip(range(5), loader)
    ]
    batch = next(iter(again))
    assert loader.restore_sample(batch.__restore_key__).__key__ == batch.__key__
    other = WorkerConfig(rank=1, world_size=2, num_workers=0)
    with pytest.raises(ConfigError, match="worker_config"):
        BlendDataset((get_train_dataset(dataset, batch_size=1, **opts), 1), worker_config=other)


def test_concat_dataset_plays_each_dataset_in_turn(dataset):
    from fpipe.energon import ConcatDataset, WorkerConfig, get_loader, get_val_dataset

    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    a = get_val_dataset(dataset, batch_size=3, worker_config=wc)  # 8 samples: 3 batches
    b = get_val_dataset(dataset, batch_size=5, worker_config=wc)  # 2 batches
    both = ConcatDataset(a, b, worker_config=wc)
    assert len(both) == 5
    assert _keys(get_loader(both)) == _keys(get_loader(a)) + _keys(get_loader(b))
