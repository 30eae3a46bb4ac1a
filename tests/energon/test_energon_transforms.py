"""Energon's ``transforms`` on fpipe (``megatron.energon.transforms`` and its
``tests/test_transforms.py``, which compares with torchvision: not installed here, so random
steps are plain callables drawing from torch's global generator, as torchvision's do):
``MergeTransform`` applies its steps in order, merges ``CustomTransform`` matrices into one
warp, and inside the loader draws from generators seeded by the sample's generator."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from PIL import Image

from fpipe.energon import (
    DefaultTaskEncoder,
    ImageSample,
    Sample,
    get_loader,
    get_train_dataset,
)
from fpipe.energon.transforms import CustomTransform, MergeTransform
from tests.energon.energon_folder import make_plain_energon_folder


class FixedTranslate(CustomTransform):
    """Energon's test transform: 5 pixels right and down."""

    def __init__(self):
        pass

    def apply_transform(self, matrix, dst_size):
        return self.translate(5, 5) @ matrix, dst_size, ("FixedTranslate", (5, 5))


class HalfSize(CustomTransform):
    def __init__(self):
        pass

    def apply_transform(self, matrix, dst_size):
        return self.scale(0.5, 0.5) @ matrix, dst_size // 2, None


def _image(w=40, h=30, seed=0):
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8))


def random_flip(img):  # draws as torchvision's RandomHorizontalFlip does
    return img.transpose(Image.FLIP_LEFT_RIGHT) if torch.rand(1) < 0.5 else img


def random_crop(img):
    top, left = (int(v) for v in torch.randint(0, 8, (2,)))
    return img.crop((left, top, left + 20, top + 16))


def test_a_custom_transform_is_one_warp():
    img = _image()
    out = MergeTransform([FixedTranslate()])(img)
    ref = Image.new(img.mode, img.size)
    ref.paste(img, (5, 5))
    assert np.array_equal(np.array(out), np.array(ref))
    tensor = torch.as_tensor(np.array(img)).permute(2, 0, 1)
    shifted = MergeTransform([FixedTranslate()])(tensor)
    assert torch.equal(shifted, torch.as_tensor(np.array(ref)).permute(2, 0, 1))
    twice = MergeTransform([FixedTranslate(), FixedTranslate()])(img)  # merged: one warp
    ref10 = Image.new(img.mode, img.size)
    ref10.paste(img, (10, 10))
    assert np.array_equal(np.array(twice), np.array(ref10))
    assert MergeTransform([FixedTranslate(), HalfSize()])(img).size == (20, 15)


def test_other_steps_give_exactly_their_own_result():
    img = _image()
    merge = MergeTransform([random_flip, FixedTranslate(), random_crop])
    for seed in range(4):
        torch.manual_seed(seed)
        got = merge(img)
        torch.manual_seed(seed)
        ref = random_crop(MergeTransform([FixedTranslate()])(random_flip(img)))
        assert np.array_equal(np.array(got), np.array(ref))


@dataclasses.dataclass
class Pixels(Sample):
    values: list


class Augment(DefaultTaskEncoder):
    merge = MergeTransform([random_flip, random_crop])

    def encode_sample(self, sample: ImageSample) -> Pixels:
        out = self.merge(_image())  # the draws are seeded from the sample's generator
        return Pixels.derive_from(sample, values=np.array(out)[::4, ::4, 0].tolist())


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("img") / "ds"
    yaml = {
        "sample_type": {"__module__": "megatron.energon", "__class__": "ImageSample"},
        "field_map": {"image": "jpg"},
    }
    make_plain_energon_folder(root, yaml, shards=3, per_shard=4)
    return str(root)


def _run(path, num_workers, n, state=None):
    ds = get_train_dataset(
        path,
        batch_size=2,
        shuffle_buffer_size=4,
        max_samples_per_sequence=2,
        task_encoder=Augment(),
    )
    with get_loader(ds, num_workers=num_workers) as loader:
        if state is not None:
            loader.restore_state_rank(state)
        out = [b.values for _, b in zip(range(n), loader)]
        return out, loader.save_state_rank()


def test_random_steps_are_exact_inside_the_loader(images):
    torch.manual_seed(0)
    serial, _ = _run(images, 0, 10)
    torch.manual_seed(1)  # the global generator's state does not matter inside the loader
    first, state = _run(images, 2, 4)
    assert first == serial[:4]
    rest, _ = _run(images, 2, 6, state)
    assert rest == serial[4:]
    flat = [v for batch in serial for v in batch]
    assert len({str(v) for v in flat}) > 1  # the crops differ between samples
