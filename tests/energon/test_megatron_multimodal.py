# ruff: noqa: UP006, UP035 - typing.List / Dict / Tuple as in Megatron-LM's declarations
"""Megatron-LM's multimodal data code (``examples/multimodal``), ported by its import lines only.

This module has the shape of Megatron-LM's ``energon_util.py``, ``dataset_helpers.py`` and
``dataloader_provider.py``: the same imports (``fpipe.energon`` for ``megatron.energon``,
including ``fpipe.energon.task_encoder.base``), the same sample and batch dataclasses (which
re-declare ``__key__``, ``__restore_key__`` and ``__subflavors__`` without defaults), a task
encoder with the same hook set (a generator ``encode_sample`` under
``@stateless(restore_seeds=True)``, ``batch``, ``encode_batch``, ``select_samples_to_pack``
defined whether packing is on or not, ``@stateless pack_selected_samples`` leaving
``__restore_key__`` to the loader), the same providers (``LimitDataset(RepeatDataset(...))``
validation, a savable training loader restored from ``torch.load`` of a checkpoint file) and the
layout of its README's recipe: a version-1 blend of ``a/wds`` and ``b/wds``, LLaVA-pretrain
shards (``jpg`` + ``json`` conversations) prepared as ``VQASample`` with ``json[0][value]``
field maps. Megatron's tokenizer, image tiling and parallel state are small stand-ins.
"""

from __future__ import annotations

import bisect
import dataclasses
import io
import json
import sys
import traceback
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import pytest
import torch
import yaml
from fpipe.energon.task_encoder.base import stateless  # was: megatron.energon.task_encoder.base
from PIL import Image

from fpipe.energon import (  # was: from megatron.energon import (
    Batch,
    CaptioningSample,
    DefaultTaskEncoder,
    LimitDataset,
    MultiChoiceVQASample,
    OCRSample,
    RepeatDataset,
    Sample,
    SimilarityInterleavedSample,
    VQASample,
    WorkerConfig,
    get_loader,
    get_savable_loader,
    get_train_dataset,
    get_val_datasets,
)
from tests.storage.helpers import write_tar, write_tar_idx

IGNORE_INDEX, IMAGE_TOKEN = -100, "<image>"
ARGS = types.SimpleNamespace()  # megatron.training.get_args()


# --- energon_util.py ------------------------------------------------------------------------


@dataclass
class SampleListSample(Sample):
    """A list of samples of any type, packed offline."""

    samples: List[Any]


@dataclass
class OfflineTargetAspectRatioSample(Sample):
    """Image + text samples with the target aspect ratio computed offline."""

    images: List[torch.Tensor]
    texts: List[str]
    target_aspect_ratio: List[List]

    if not hasattr(Sample, "__subflavor__"):
        __subflavor__: str


# --- dataset_helpers.py ---------------------------------------------------------------------


@dataclass
class ImageTaskSample(Sample):
    __key__: str
    __restore_key__: Tuple[Union[str, int, tuple], ...]
    __subflavor__: Dict
    __subflavors__: Dict
    imgs: List[torch.Tensor]
    num_tiles: List[int]
    tokens: torch.Tensor
    total_len: int
    labels: torch.Tensor = None


@dataclass
class ImageTaskSamplePacked(Sample):
    __key__: str
    __restore_key__: Tuple[Union[str, int, tuple], ...]
    __subflavor__: Dict
    __subflavors__: Dict
    tokens: torch.Tensor
    labels: torch.Tensor
    imgs: List[torch.Tensor]
    num_tiles: List[int]
    max_length: int
    cu_lengths: List[int]


@dataclass
class ImageTaskBatchPacked(Batch):
    __key__: List[str]
    __restore_key__: Tuple[Union[str, int, tuple], ...]
    __subflavor__: Dict
    __subflavors__: List[Dict]
    tokens: torch.Tensor
    labels: torch.Tensor
    imgs: torch.Tensor
    num_tiles: List[List[int]]
    max_lengths: List[int]
    cu_lengths: List[List[int]]


def greedy_knapsack(item_sizes: List[int], samples: List, max_capacity: int) -> List:
    """Megatron-LM's greedy packing: largest fitting sample first, by binary search."""
    knapsacks = []
    if not item_sizes:
        return knapsacks
    sizes, ordered = map(list, zip(*sorted(zip(item_sizes, samples), key=lambda x: x[0])))
    if sizes[-1] > max_capacity:
        raise ValueError(f"knapsack: a sample is larger {sizes[-1]} than {max_capacity}")
    while sizes:
        current, remaining = [], max_capacity
        while True:
            idx = bisect.bisect(sizes, remaining) - 1
            if idx < 0:
                break
            remaining -= sizes.pop(idx)
            current.append(ordered.pop(idx))
        knapsacks.append(current)
    return knapsacks


class Tokenizer:
    pad = 0

    def convert_tokens_to_ids(self, token):
        return 1

    def tokenize_conversation(self, conv, return_target, add_generation_prompt):
        ids, target = [], []
        for turn in conv:
            toks = [
                1 if c == "\x01" else 2 + ord(c) % 500
                for c in turn["content"].replace(IMAGE_TOKEN, "\x01")
            ]
            ids += toks
            target += toks if turn["role"] == "assistant" else [IGNORE_INDEX] * len(toks)
        return np.array(ids), np.array(target)


class TaskEncoder(DefaultTaskEncoder[OCRSample, OCRSample, ImageTaskBatchPacked, dict]):
    """Megatron-LM's encoder: VQA samples to tokens and image tiles; packs when asked."""

    def __init__(self):
        super().__init__()
        self.args = ARGS
        self.tokenizer = Tokenizer()
        self.packing_seq_length = self.args.packing_seq_length
        self.is_packing_enabled = bool(self.args.packing_buffer_size)
        self.num_image_embeddings_per_tile = 4

    def _get_total_seq_length(self, input_ids, num_tiles):
        return len(input_ids) + sum(num_tiles) * self.num_image_embeddings_per_tile - len(num_tiles)

    def transform_img(self, img):
        arr = np.asarray(img.convert("RGB").resize((16, 16)), dtype=np.float32) / 255.0
        return [torch.from_numpy(arr).permute(2, 0, 1).contiguous()]

    @stateless(restore_seeds=True)
    def encode_sample(
        self, sample: Union[CaptioningSample, OCRSample, VQASample, SimilarityInterleavedSample]
    ):
        if isinstance(sample, (VQASample, MultiChoiceVQASample)):
            yield self.encode_any_single_turn_vqa(sample)
        elif type(sample).__name__ == "SampleListSample":
            raise NotImplementedError("offline packing")
        else:
            raise NotImplementedError("Sample format not supported", sample)

    def encode_any_single_turn_vqa(self, sample):
        augment = sample.__subflavors__.get("augmentation", False)
        assert augment is False
        imgs = self.transform_img(sample.image)
        num_tiles = [len(imgs)]
        prompt_list = ["{}"]
        cur_prompt = prompt_list[np.random.randint(len(prompt_list))].format(sample.context)
        if IMAGE_TOKEN not in cur_prompt:
            cur_prompt = IMAGE_TOKEN + "\n" + cur_prompt
        conversation = [
            {"role": "system", "content": "Answer the questions."},
            {"role": "user", "content": cur_prompt},
            {"role": "assistant", "content": str(sample.answers)},
        ]
        input_ids, target = self.tokenizer.tokenize_conversation(conversation, True, False)
        return ImageTaskSample(
            __key__=sample.__key__,
            __restore_key__=sample.__restore_key__,
            __subflavor__=None,
            __subflavors__=sample.__subflavors__,
            imgs=imgs,
            num_tiles=num_tiles,
            tokens=torch.tensor(input_ids),
            labels=torch.tensor(target),
            total_len=self._get_total_seq_length(input_ids, num_tiles),
        )

    def batch(self, samples: List[Union[ImageTaskSample, ImageTaskSamplePacked]]):
        imgs = torch.stack([img for s in samples for img in s.imgs])
        max_seq_len = max(len(s.tokens) for s in samples)
        tokens = torch.full((len(samples), max_seq_len), self.tokenizer.pad, dtype=torch.int64)
        labels = torch.full((len(samples), max_seq_len + 1), self.tokenizer.pad, dtype=torch.int64)
        for i, s in enumerate(samples):
            tokens[i, : len(s.tokens)] = s.tokens
            labels[i, : len(s.labels)] = s.labels
        num_tiles = torch.tensor([n for s in samples for n in s.num_tiles], dtype=torch.int32)
        cu_lengths = torch.tensor([[0]], dtype=torch.int32)
        max_lengths = torch.tensor([[0]], dtype=torch.int32)
        if isinstance(samples[0], ImageTaskSamplePacked):
            cu_lengths = torch.stack([s.cu_lengths for s in samples])
            max_lengths = torch.tensor([s.max_length for s in samples], dtype=torch.int32)
        return ImageTaskBatchPacked(
            __key__=[s.__key__ for s in samples],
            __restore_key__=[s.__restore_key__ for s in samples],
            __subflavor__=None,
            __subflavors__=samples[0].__subflavors__,
            tokens=tokens,
            labels=labels,
            imgs=imgs,
            num_tiles=num_tiles,
            cu_lengths=cu_lengths,
            max_lengths=max_lengths,
        )

    def encode_batch(self, batch: ImageTaskBatchPacked) -> dict:
        raw = dataclasses.asdict(batch)
        del raw["__subflavors__"]
        return raw

    def select_samples_to_pack(self, samples: List[ImageTaskSample]) -> List[List[ImageTaskSample]]:
        lengths = [sample.total_len for sample in samples]
        return greedy_knapsack(lengths, samples, self.packing_seq_length)

    @stateless
    def pack_selected_samples(self, samples: List[ImageTaskSample]) -> ImageTaskSamplePacked:
        cu_lengths, current, max_length = [0], 0, 0
        for sample in samples:
            max_length = max(max_length, sample.total_len)
            current += sample.total_len
            cu_lengths.append(current)
        return ImageTaskSamplePacked(
            __key__=",".join([s.__key__ for s in samples]),
            __restore_key__=(),  # Will be set by energon based on `samples`
            __subflavor__=None,
            __subflavors__=samples[0].__subflavors__,
            tokens=torch.cat([s.tokens for s in samples]),
            labels=torch.cat([s.labels for s in samples]),
            imgs=[img for s in samples for img in s.imgs],
            cu_lengths=torch.tensor(cu_lengths, dtype=torch.int32),
            max_length=max_length,
            num_tiles=[n for s in samples for n in s.num_tiles],
        )


def print_error_handler(exc: Exception, key: Optional[str]):
    print(f"exception in the dataloader for sample {key}, skipped", file=sys.stderr)
    traceback.print_exc()


# --- dataloader_provider.py -----------------------------------------------------------------


def datasets_provider(task_encoder, worker_config=None):
    args = ARGS
    dname = args.data_path[0] if type(args.data_path) is list else args.data_path
    train_dataset = get_train_dataset(
        dname,
        batch_size=args.micro_batch_size,
        task_encoder=task_encoder,
        virtual_epoch_length=1000,
        max_samples_per_sequence=100,
        shuffle_buffer_size=100,
        worker_config=worker_config,
        packing_buffer_size=args.packing_buffer_size,
        handler=print_error_handler,
        image_decode="pil",
    )
    val_datasets = get_val_datasets(
        dname,
        batch_size=args.micro_batch_size,
        task_encoder=task_encoder,
        worker_config=worker_config,
        packing_buffer_size=args.packing_buffer_size,
        handler=print_error_handler,
        image_decode="pil",
    )
    val_datasets_without_source_datasets = [
        LimitDataset(
            RepeatDataset(val_ds, worker_config=worker_config),
            length=args.eval_iters * NUM_MICROBATCHES,
            worker_config=worker_config,
            reset_after_epoch=True,
        )
        for val_ds, _src_ds in val_datasets
    ]
    return train_dataset, val_datasets_without_source_datasets, None


NUM_MICROBATCHES = 2


def train_valid_test_dataloaders_provider(task_encoder=None):
    args = ARGS
    if task_encoder is None:
        task_encoder = TaskEncoder()
    worker_config = WorkerConfig(
        rank=0,
        world_size=1,
        num_workers=args.num_workers,
        data_parallel_group=None,
        worker_debug_path=None,
        worker_log_level=0,
    )
    train_ds, valid_ds1, _test_ds = datasets_provider(task_encoder, worker_config)
    train_dataloader = get_savable_loader(train_ds, worker_config=worker_config)
    if args.load is not None:
        dataset_state_dict = torch.load(args.load, map_location="cpu")
        train_dataloader.restore_state_rank(dataset_state_dict["dataloader_state_dict"])
    valid_dataloader = [
        EnergonDataloader(get_loader(valid_ds, worker_config=worker_config))
        for valid_ds in valid_ds1
    ]
    return EnergonDataloader(train_dataloader), valid_dataloader, None


class EnergonDataloader:
    def __init__(self, dataloader):
        self._dataloader = dataloader
        self._iter = iter(cyclic_iter(dataloader))

    def __next__(self):
        return self._iter.__next__()

    def __iter__(self):
        return self._iter.__iter__()

    def save_state(self):
        return self._dataloader.save_state_rank()


def cyclic_iter(iter):
    while True:
        yield from iter


# --- the data: the README's recipe, two datasets named wds ----------------------------------


def _llava_wds(root: Path, first: int, shards: int = 10, per_shard: int = 4) -> None:
    """LLaVA-pretrain shards (convert_llava_pretrain_to_wds.py) as ``energon prepare ./``
    leaves them for VQASample with ``json[0][value]`` / ``json[1][value]``, split 9,1,0."""
    n = first
    names = []
    for s in range(shards):
        samples = []
        for _ in range(per_shard):
            img = Image.new("RGB", (20 + n % 7, 18 + n % 5), (n % 255, (3 * n) % 255, 90))
            buf = io.BytesIO()
            img.save(buf, "JPEG")
            conv = [
                {"from": "human", "value": f"<image>\nDescribe {n}."},
                {"from": "gpt", "value": f"picture number {n} " + "x" * (n % 13)},
            ]
            samples.append((f"{n:09d}", {"jpg": buf.getvalue(), "json": json.dumps(conv).encode()}))
            n += 1
        name = f"pretrain-{s}.tar"
        write_tar(root / name, samples)
        write_tar_idx(root / name)
        names.append(name)
    meta = root / ".nv-meta"
    meta.mkdir()
    info = {"energon_version": "7.4.0", "shard_counts": dict.fromkeys(names, per_shard)}
    (meta / ".info.json").write_text(json.dumps(info, indent=2))
    dataset = {
        "sample_type": {"__module__": "megatron.energon", "__class__": "VQASample"},
        "field_map": {"image": "jpg", "context": "json[0][value]", "answers": "json[1][value]"},
    }
    (meta / "dataset.yaml").write_text(yaml.dump(dataset, sort_keys=False))
    split = {
        "split_parts": {
            "train": [f"pretrain-{{0..{shards - 2}}}.tar"],
            "val": [f"pretrain-{shards - 1}.tar"],
            "test": [],
        },
        "exclude": [],
    }
    (meta / "split.yaml").write_text(yaml.dump(split, sort_keys=False))


@pytest.fixture(scope="module")
def blend(tmp_path_factory):
    root = tmp_path_factory.mktemp("llava")
    _llava_wds(root / "a" / "wds", 0)
    _llava_wds(root / "b" / "wds", 1000)
    entries = "".join(
        f"      - weight: 1.\n        path: ./{d}/wds\n        subflavors:\n"
        "          augmentation: false\n"
        for d in ("a", "b")
    )
    text = "__module__: megatron.energon\n__class__: Metadataset\nsplits:\n"
    text += f"  train:\n    datasets:\n{entries}  val:\n    datasets:\n{entries}"
    (root / "blend.yaml").write_text(text)
    return root / "blend.yaml"


def _setup(blend, packing, workers, load=None):
    ARGS.__dict__.update(
        data_path=[str(blend)],
        micro_batch_size=1 if packing else 2,  # packs of varying sizes: one per batch
        num_workers=workers,
        eval_iters=3,
        packing_buffer_size=packing,
        packing_seq_length=200 if packing else 0,
        load=load,
    )
    return train_valid_test_dataloaders_provider()


def _summary(batch):
    return batch["__key__"], batch["tokens"].tolist(), batch["imgs"].sum().item()


@pytest.mark.parametrize(("packing", "workers"), [(None, 2), (4, 0)])
def test_train_validation_and_resume_through_megatrons_code(blend, tmp_path, packing, workers):
    train, valid, _ = _setup(blend, packing, workers)
    head = [next(train) for _ in range(5)]
    assert all(set(b) >= {"__key__", "__restore_key__", "tokens", "cu_lengths"} for b in head)
    if packing:  # packs of several samples, each with Energon's restore key
        assert any("," in k for b in head for k in b["__key__"])
        rk = head[0]["__restore_key__"][0]
        assert rk[0] == "PackingDataset" and len(rk) == 3 + head[0]["__key__"][0].count(",") + 1
    # the example's checkpoint: torch.save of the state, restored after torch.load
    torch.save({"dataloader_state_dict": train.save_state()}, tmp_path / "dl.pt")
    tail = [_summary(next(train)) for _ in range(4)]
    resumed, _, _ = _setup(blend, packing, workers, load=tmp_path / "dl.pt")
    assert [_summary(next(resumed)) for _ in range(4)] == tail

    assert len(valid) == 2  # a/wds and b/wds: one validation loader each
    for loader in valid:
        one = [_summary(next(loader)) for _ in range(ARGS.eval_iters * NUM_MICROBATCHES)]
        again = [_summary(next(loader)) for _ in range(ARGS.eval_iters * NUM_MICROBATCHES)]
        assert one == again  # LimitDataset(RepeatDataset(...)) starts over on each pass
    names = sorted({k.split("/")[0] for b in head for k in b["__key__"]})
    assert names  # samples of the blend


def test_restore_sample_of_a_packed_batch(blend):
    train, _, _ = _setup(blend, 4, 0)
    batches = [next(train) for _ in range(3)]
    loader = train._dataloader
    for b in batches:
        again = loader.restore_sample(b["__restore_key__"])
        assert _summary(again) == _summary(b)


def test_dataclasses_are_declared_as_in_energon():
    # re-declared base fields are required (no default), as with Energon's slots dataclasses
    with pytest.raises(TypeError, match="__subflavors__"):
        ImageTaskSample(
            __key__="k",
            __restore_key__=(),
            __subflavor__=None,
            imgs=[],
            num_tiles=[],
            tokens=None,
            total_len=0,
        )
    s = ImageTaskSample(
        __key__="k",
        __restore_key__=(),
        __subflavor__=None,
        __subflavors__={},
        imgs=[],
        num_tiles=[],
        tokens=None,
        total_len=0,
    )
    assert s.labels is None and s.__sources__ is None
    assert (
        OfflineTargetAspectRatioSample(
            __key__="k",
            __restore_key__=(),
            images=[],
            texts=[],
            target_aspect_ratio=[],
            __subflavor__="x",
        ).__subflavor__
        == "x"
    )
