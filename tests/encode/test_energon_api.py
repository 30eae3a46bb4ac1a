"""Energon's task-encoder API as Energon users write it: names, hooks, decoder, helpers."""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from PIL import Image

import fpipe
from fpipe.cli.main import main
from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.decode.fields import decode_tenbin
from fpipe.decode.registry import decode_field
from fpipe.encode.hooks import using_sample_rng
from tests.storage.helpers import make_image_caption_dataset

ENERGON_NAMES = [
    "Batch", "CaptioningSample", "Cooker", "CrudeSample", "DefaultTaskEncoder", "IgnoreSample",
    "ImageSample", "SampleDecoder", "SkipSample", "TaskEncoder", "TextSample", "VQASample",
    "WorkerConfig", "basic_sample_keys", "batch_list", "batch_pad_stack", "batch_stack",
    "get_loader", "get_savable_loader", "get_train_dataset", "get_val_dataset", "stateless",
]  # fmt: skip


@pytest.mark.parametrize("name", ENERGON_NAMES)
def test_energon_names_import_from_fpipe(name):
    assert getattr(fpipe, name) is not None and name in fpipe.__all__


def test_generic_subscripting_and_type_arguments():
    @dataclass
    class RawBatch(fpipe.Batch):
        text: list

    enc = fpipe.DefaultTaskEncoder[fpipe.TextSample, fpipe.TextSample, RawBatch, dict](
        raw_batch_type=RawBatch, batch_type=dict
    )
    samples = [fpipe.TextSample(text=t, __key__=f"s/{t}") for t in "ab"]
    raw = enc.batch([enc.encode_sample(s) for s in samples])
    assert isinstance(raw, RawBatch) and raw.text == ["a", "b"]
    assert enc.encode_batch(raw)["text"] == ["a", "b"]


def test_one_and_two_argument_encode_sample_get_the_same_rng():
    class One(fpipe.DefaultTaskEncoder):
        def encode_sample(self, sample):
            return fpipe.sample_rng().random()

    class Two(fpipe.DefaultTaskEncoder):
        def encode_sample(self, sample, rng):
            return rng.random()

    def rng():
        return np.random.Generator(np.random.Philox(7))

    sample = fpipe.TextSample(text="x")
    with using_sample_rng(rng()):
        assert One().encode_sample(sample) == Two().encode_sample(sample, rng())
    assert One().encode_sample(sample, rng()) == Two().encode_sample(sample, rng())
    with pytest.raises(ConfigError, match="sample_rng"):
        fpipe.sample_rng()


def _png(mode: str) -> bytes:
    buf = io.BytesIO()
    Image.new(mode, (5, 3), (10, 200, 30, 128) if mode == "RGBA" else 200).save(buf, "PNG")
    return buf.getvalue()


@pytest.mark.parametrize(
    ("spec", "kind", "dtype", "shape"),  # WebDataset's imagespecs, which Energon uses
    [
        ("torchrgb", torch.Tensor, torch.float32, (3, 3, 5)),
        ("torch", torch.Tensor, torch.float32, (3, 3, 5)),
        ("torchrgb8", torch.Tensor, torch.uint8, (3, 3, 5)),
        ("torchrgba", torch.Tensor, torch.float32, (4, 3, 5)),
        ("torchl8", torch.Tensor, torch.uint8, (3, 5)),
        ("rgb", np.ndarray, np.float32, (3, 5, 3)),
        ("l8", np.ndarray, np.uint8, (3, 5)),
        ("rgba8", np.ndarray, np.uint8, (3, 5, 4)),
    ],
)
def test_sample_decoder_value_semantics(spec, kind, dtype, shape):
    opts = fpipe.SampleDecoder(image_decode=spec).image_options
    out = decode_field("png", _png("RGBA"), image_options=opts)
    assert isinstance(out, kind) and out.dtype == dtype and tuple(out.shape) == shape
    if out.dtype in (torch.float32, np.float32):
        assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0 and float(out.max()) > 0.5


def test_sample_decoder_pil_and_unknown():
    img = decode_field("png", _png("RGB"), image_options=fpipe.SampleDecoder(
        image_decode="pilrgba").image_options)  # fmt: skip
    assert isinstance(img, Image.Image) and img.mode == "RGBA"
    with pytest.raises(ConfigError, match="torchrgb"):
        fpipe.SampleDecoder(image_decode="rgb16")


def _tenbin(arrays):  # the byte layout of webdataset.tenbin.encode_buffer
    def chunk(b):
        return b"~TenBin~" + struct.pack("<q", len(b)) + b + bytes(-len(b) % 64)

    out = b""
    for a in arrays:
        code = int.from_bytes(a.dtype.str[1:].encode().ljust(8, b"\0"), "little")
        head = np.array([code, 0, a.ndim, *a.shape], "<i8")
        out += chunk(head.tobytes()) + chunk(a.tobytes())
    return out


def test_tenbin_members_decode_as_webdataset_does():
    arrays = [np.arange(6, dtype="<f4").reshape(2, 3), np.array([1, -2], "<i8")]
    out = decode_field("ten", _tenbin(arrays))
    assert [a.dtype for a in out] == [a.dtype for a in arrays]
    assert all(np.array_equal(a, b) for a, b in zip(out, arrays))
    with pytest.raises(ValueError, match="magic"):
        decode_tenbin(b"nottenbin" * 4)


def test_batch_helpers():
    a, b = torch.ones(2), torch.ones(3)
    assert fpipe.batch_list([a, b]) == [a, b]
    assert fpipe.batch_pad_stack([a, b]).tolist() == [[1, 1, 0], [1, 1, 1]]
    assert fpipe.batch_stack([a, a]).shape == (2, 2)
    assert fpipe.IgnoreSample is fpipe.SkipSample


def test_default_worker_config_has_energon_defaults():
    cfg = fpipe.WorkerConfig.default_worker_config()
    assert (cfg.rank, cfg.world_size, cfg.num_workers) == (0, 1, 4)


def test_state_show_reads_torch_saved_state(tmp_path, capsys):
    make_image_caption_dataset(tmp_path / "d", shards=1, per_shard=4)
    fpipe.prepare_dataset(tmp_path / "d", fields={"image": "jpg", "caption": "txt"})
    loader = fpipe.get_loader(fpipe.get_train_dataset(tmp_path / "d", batch_size=2))
    next(iter(loader))
    raw = loader.save_state_rank()
    for i, obj in enumerate([raw, {"model": {}, "loader": raw}, loader.state_dict(), [raw]]):
        torch.save(obj, tmp_path / f"s{i}.pt")
        assert main(["state", "show", str(tmp_path / f"s{i}.pt")]) == 0, capsys.readouterr().err
        assert "format version" in capsys.readouterr().out
    (tmp_path / "raw.bin").write_bytes(raw)
    assert main(["state", "show", str(tmp_path / "raw.bin")]) == 0


def test_decode_limits_come_from_the_loader_the_encoder_or_its_sample_decoder():
    from fpipe.decode import DecodeLimits
    from fpipe.encode.task_encoder import decode_limits_of

    mine = DecodeLimits(max_image_pixels=10)

    class WithDecoder(fpipe.DefaultTaskEncoder):
        decoder = fpipe.SampleDecoder(image_decode="pilrgb", decode_limits=mine)

    class WithLimits(fpipe.DefaultTaskEncoder):
        decode_limits = DecodeLimits(max_image_pixels=20)
        decoder = fpipe.SampleDecoder(decode_limits=mine)

    assert decode_limits_of(WithDecoder()) is mine
    assert decode_limits_of(WithLimits()).max_image_pixels == 20  # the encoder's own first
    assert decode_limits_of(fpipe.DefaultTaskEncoder()) == DecodeLimits()
    with pytest.raises(BadSampleError, match="max_image_pixels=10"):
        decode_field("png", _png("RGB"), limits=decode_limits_of(WithDecoder()))
