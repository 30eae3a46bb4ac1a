"""Energon's hook forms that are not "one value in, one value out": generator hooks (``yield``),
and grouping in the plan tier as an alternative to ``batch_group_criterion`` (which
tests/loader/test_group_batches.py runs). Each works with the documented meaning or is refused
when the dataset is built, before the first batch."""

from __future__ import annotations

import math
import random

import pytest
import torch

import fpipe
from fpipe import CaptioningSample, DefaultTaskEncoder, get_loader, get_train_dataset
from fpipe.core.errors import ConfigError
from fpipe.decode.image import ImageDecodeOptions
from tests.loader.helpers import digest

#: Grouping in the plan tier, for the first encoder of Energon's grouping guide (the encoder
#: itself runs in tests/loader/test_group_batches.py): three aspect-ratio bins of batch size 8,
#: assigned from the index's width and height (nearest ratio).
ASPECT_BUCKETS = {ratio: {4: {1: (1.0, 8)}} for ratio in ("3:4", "1:1", "4:3")}


def _nearest_bin(width: int, height: int) -> str:
    ratios = {"portrait": 3 / 4, "square": 1.0, "landscape": 4 / 3}
    return min(ratios, key=lambda k: abs(math.log(width / height) - math.log(ratios[k])))


def test_bucket_config_gives_the_guides_aspect_groups(image_dataset):
    ds = get_train_dataset(
        image_dataset, bucket_config=ASPECT_BUCKETS, max_samples_per_sequence=4, num_epochs=1
    )
    seen, groups = 0, set()
    for batch in get_loader(ds):
        assert len(batch.__key__) == 8  # every group's batch size (leftovers dropped, counted)
        bins = set()
        for key, image in zip(batch.__key__, batch.image):
            i = int(key.rsplit("/", 1)[-1])  # the helper's image i is w x h below
            w, h = 8 + (i * 7) % 40, 6 + (i * 5) % 30
            assert image.shape[0] == 3 and image[:, h:, :].count_nonzero() == 0  # padded
            bins.add(_nearest_bin(w, h))
        assert len(bins) == 1  # one group per batch, as batch_group_criterion gives
        seen, groups = seen + 1, groups | bins
    assert seen >= 3 and len(groups) >= 2  # (this split has too few squares for a batch)


# --- generator hooks ---


class SplitCaptionEncoder(DefaultTaskEncoder):
    """Energon's one-argument generator form: one sample per half of the caption (a long
    document split in two), each with a draw from the sample's generator; samples whose key
    ends in 0 yield nothing (left out, as Energon's generators may)."""

    def encode_sample(self, sample):
        if sample.__key__.endswith("0"):
            return
        words = sample.caption.split()
        half = max(1, len(words) // 2)
        for part in (words[:half], words[half:]):
            yield sample.replace(caption=" ".join(part), image=fpipe.sample_rng().random())


class SeededSplitEncoder(DefaultTaskEncoder):
    """A generator hook that draws from Python's global generator, seeded per sample."""

    @fpipe.stateless(restore_seeds=True)
    def encode_sample(self, sample):
        yield sample.replace(image=random.random())
        yield sample.replace(image=random.random())


def _loader(path, encoder, *, batch_size=4, num_workers=0, **kw):
    ds = get_train_dataset(
        path,
        batch_size=batch_size,
        shuffle_buffer_size=8,
        max_samples_per_sequence=4,
        seed=5,
        task_encoder=encoder,
        image_decode=ImageDecodeOptions(target_size=16),
        **kw,
    )
    mode = {"worker_mode": "thread"} if num_workers else {}
    return get_loader(ds, num_workers=num_workers, **mode)


def _take(loader, n):
    it = iter(loader)
    return [next(it) for _ in range(n)]


def test_generator_encode_sample_yields_into_its_recipes_batch(image_dataset):
    plain = _take(_loader(image_dataset, None), 6)
    split = _take(_loader(image_dataset, SplitCaptionEncoder()), 6)
    for src, out in zip(plain, split):
        expected = []
        for key, caption in zip(src.__key__, src.caption):
            if key.endswith("0"):
                continue
            words = caption.split()
            half = max(1, len(words) // 2)
            expected += [(key, " ".join(words[:half])), (key, " ".join(words[half:]))]
        assert list(zip(out.__key__, out.caption)) == expected  # all of a recipe's yields
        draws = list(out.image)  # floats collate to a list (Energon's default batch)
        assert len(draws) == len(expected) and len(set(draws)) == len(draws)
    assert any(len(b.__key__) > 4 for b in split)  # more than batch_size: documented


def test_generator_encode_sample_resumes_exactly_for_any_worker_count(image_dataset):
    ref = [digest(b) for b in _take(_loader(image_dataset, SplitCaptionEncoder()), 7)]
    threads = _loader(image_dataset, SplitCaptionEncoder(), num_workers=2)
    assert [digest(b) for b in _take(threads, 7)] == ref
    loader = _loader(image_dataset, SplitCaptionEncoder(), num_workers=2)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    again = _loader(image_dataset, SplitCaptionEncoder())
    again.load_state_dict(state)
    assert [digest(b) for b in _take(again, 4)] == ref[3:]


def test_generator_under_restore_seeds_runs_seeded(image_dataset):
    first = _take(_loader(image_dataset, SeededSplitEncoder()), 3)
    random.random()  # the global generator moves on between the two runs
    second = _take(_loader(image_dataset, SeededSplitEncoder()), 3)
    assert [list(b.image) for b in first] == [list(b.image) for b in second]
    assert all(len(b.image) == 8 for b in first)


class PrePostGenerators(DefaultTaskEncoder):
    """preencode_sample yields two samples, postencode_sample runs on each (no packing)."""

    def preencode_sample(self, sample):
        yield sample.replace(caption="a")
        yield sample.replace(caption="b")

    def postencode_sample(self, sample):
        return sample.replace(caption=sample.caption.upper())


def test_generator_preencode_sample_then_postencode(image_dataset):
    (batch,) = _take(_loader(image_dataset, PrePostGenerators()), 1)
    assert batch.caption == ["A", "B"] * 4


class PackingGenerator(DefaultTaskEncoder):
    """With a packing buffer: each sample yields two, all enter the buffer."""

    def encode_sample(self, sample):
        yield sample.replace(caption="x")
        yield sample.replace(caption="y")

    def select_samples_to_pack(self, samples):
        return [samples[i : i + 3] for i in range(0, len(samples), 3)]

    def pack_selected_samples(self, samples):
        return samples[0].replace(caption="".join(s.caption for s in samples))


def test_generator_encode_sample_fills_the_packing_buffer(image_dataset):
    (batch,) = _take(_loader(image_dataset, PackingGenerator(), packing_buffer_size=4), 1)
    # a buffer of 4 samples yields 8: packs of 3, 3 and 2; the batch takes one more buffer's
    assert batch.caption == ["xyx", "yxy", "xy", "xyx"]


class GeneratorBatch(DefaultTaskEncoder):
    def encode_batch(self, batch):
        yield batch


class GeneratorCollate(DefaultTaskEncoder):
    def batch(self, samples):
        yield super().batch(samples)


def test_generator_collate_is_refused_when_the_dataset_is_built(image_dataset):
    with pytest.raises(ConfigError) as err:
        get_train_dataset(image_dataset, batch_size=4, task_encoder=GeneratorCollate())
    msg = str(err.value)
    assert "GeneratorCollate.batch is a generator" in msg
    assert "write encode_batch as the generator" in msg  # the fpipe way


def test_generator_encode_batch_with_a_packing_buffer_is_refused(image_dataset):
    with pytest.raises(ConfigError, match=r"GeneratorBatch.encode_batch is a generator"):
        get_train_dataset(
            image_dataset, batch_size=4, packing_buffer_size=4, task_encoder=GeneratorBatch()
        )


def test_generator_encode_sample_without_batching_is_refused(image_dataset):
    with pytest.raises(ConfigError, match=r"SplitCaptionEncoder.encode_sample is a generator"):
        get_train_dataset(image_dataset, batch_size=None, task_encoder=SplitCaptionEncoder())


def test_direct_calls_keep_energons_generator():
    enc = SplitCaptionEncoder()
    sample = CaptioningSample(__key__="k1", image=torch.zeros(1), caption="one two three four")
    with fpipe.encode.hooks.using_sample_rng(__import__("numpy").random.default_rng(0)):
        out = enc.encode_sample(sample)
        assert not isinstance(out, CaptioningSample)
        assert [s.caption for s in out] == ["one two", "three four"]
