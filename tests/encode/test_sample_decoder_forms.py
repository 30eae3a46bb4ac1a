"""Energon's decoder forms on a task encoder: a SampleDecoder, any callable
``decoder(sample: dict) -> dict``, ``decoder = None`` for raw bytes; ``auto_decode`` refused
with the fix."""

from __future__ import annotations

import pytest
from PIL import Image

import fpipe
from fpipe.core.errors import ConfigError
from tests.storage.helpers import jpeg_bytes, make_image_caption_dataset


def shout(sample: dict) -> dict:
    """A user's decoder: PIL images and upper-case captions (module level: picklable)."""
    import io

    return {
        **sample,
        "jpg": Image.open(io.BytesIO(sample["jpg"])),
        "txt": sample["txt"].decode().upper(),
    }


class Shouting(fpipe.DefaultTaskEncoder):
    decoder = staticmethod(shout)


class Raw(fpipe.DefaultTaskEncoder):
    decoder = None  # Energon: no decoding


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    root = tmp_path_factory.mktemp("coco")
    make_image_caption_dataset(root, shards=1, per_shard=4)
    fpipe.prepare_dataset(root, fields={"image": "jpg", "caption": "txt"}, progress=False)
    return root


def _first_batch(root, enc, **kw):
    ds = fpipe.get_train_dataset(
        root, batch_size=2, max_samples_per_sequence=2, seed=3, task_encoder=enc, **kw
    )
    return next(iter(fpipe.get_loader(ds, num_workers=0)))


def test_callable_decoder_decodes_the_whole_sample(coco):
    batch = _first_batch(coco, Shouting())
    assert all(isinstance(im, Image.Image) for im in batch.image)
    assert all(c.startswith("CAPTION NUMBER") for c in batch.caption)


def test_decoder_none_keeps_raw_bytes(coco):
    batch = _first_batch(coco, Raw())
    assert all(isinstance(im, bytes) and im[:2] == b"\xff\xd8" for im in batch.image)
    assert all(isinstance(c, bytes) for c in batch.caption)
    default = _first_batch(coco, fpipe.DefaultTaskEncoder())  # fpipe's default still decodes
    assert not isinstance(default.image, list)


def test_sample_decoder_is_callable_as_in_energon():
    dec = fpipe.SampleDecoder(image_decode="pilrgb")
    out = dec({"__key__": "k", "jpg": jpeg_bytes(8, 6), "txt": b"a cat", "bin": b"\x00"})
    assert isinstance(out["jpg"], Image.Image) and out["jpg"].size == (8, 6)
    assert out["txt"] == "a cat" and out["bin"] == b"\x00" and out["__key__"] == "k"
    assert dec.decode("shard/k.txt", b"hi") == "hi"


def test_auto_decode_is_refused_with_the_replacement(coco):
    with pytest.raises(ConfigError, match=r"auto_decode.*decoder = None"):
        fpipe.SampleDecoder(auto_decode=False)
    with pytest.raises(ConfigError, match=r"get_train_dataset\(auto_decode=...\).*`decoder`"):
        fpipe.get_train_dataset(coco, batch_size=2, auto_decode=False)


def test_bad_decoder_forms_are_refused_at_construction(coco):
    class Spec(fpipe.DefaultTaskEncoder):
        decoder = "torchrgb"

    with pytest.raises(ConfigError, match=r"Spec.decoder = 'torchrgb'.*SampleDecoder"):
        fpipe.get_train_dataset(coco, batch_size=2, task_encoder=Spec())
    with pytest.raises(ConfigError, match=r"callable is not an image spec.*decoder\(sample"):
        fpipe.SampleDecoder(image_decode=lambda data: data)
