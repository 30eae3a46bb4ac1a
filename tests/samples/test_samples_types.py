"""Sample types, the sample-type allow-list and the Batch base."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass
from typing import Any, NamedTuple

import pytest
import torch

import fpipe.samples as fs
from fpipe.core.errors import ConfigError
from fpipe.samples import (
    Batch,
    CaptionedVideoSample,
    CaptioningSample,
    ImageClassificationSample,
    ImageSample,
    InterleavedSample,
    Sample,
    TextSample,
    VideoTextSample,
    VQASample,
    basic_sample_keys,
    map_tensors,
    register_sample_type,
    sample_type_from_name,
    sample_type_name,
)


def test_all_sorted_and_documented():
    assert fs.__all__ == sorted(fs.__all__)
    for name in fs.__all__:
        obj = getattr(fs, name)
        if callable(obj):
            assert obj.__doc__, name


def test_base_fields_and_builtin_types():
    s = CaptioningSample(
        image=torch.zeros(3, 2, 2),
        caption="a cat",
        __key__="shard-0/000001",
        __restore_key__=("ds", 0, 1),
        __subflavors__={"src": "coco"},
    )
    assert (s.__key__, s.__restore_key__, s.__subflavors__) == (
        "shard-0/000001",
        ("ds", 0, 1),
        {"src": "coco"},
    )
    positional = CaptioningSample("img", "cap")
    assert positional.__key__ == "" and positional.__subflavors__ == {}
    assert ImageSample(image=1).image == 1
    assert TextSample(text="t").text == "t"
    v = VQASample(image=1, context="q?", answers=["a"], answer_weights=[1.0])
    assert v.answers == ["a"] and VQASample(image=1, context="q").answers is None
    assert InterleavedSample(sequence=["a", 1, "b"]).sequence == ["a", 1, "b"]
    c = ImageClassificationSample(image=1, label=3, label_name="dog")
    assert (c.label, c.label_name) == (3, "dog")
    vid = CaptionedVideoSample(video="handle", caption="c")
    assert vid.audio is None and vid.metadata is None
    assert VideoTextSample is CaptionedVideoSample


def test_replace_derive_from_basic_keys_and_pickle():
    s = TextSample(text="a", __key__="k", __restore_key__=(1,), __subflavors__={"x": 1})
    s2 = s.replace(text="b")
    assert s2.text == "b" and s.text == "a" and s2.__key__ == "k"
    d = ImageSample.derive_from(s, image=5)
    assert basic_sample_keys(d) == basic_sample_keys(s)
    assert pickle.loads(pickle.dumps(s)) == s


def test_user_subclass_like_energon():
    @dataclass
    class MySample(Sample):
        tokens: list
        weight: float = 1.0

    m = MySample(tokens=[1, 2], __key__="s/1")
    assert m.weight == 1.0 and m.__key__ == "s/1"


def test_sample_type_from_name():
    assert sample_type_from_name("CaptioningSample") is CaptioningSample
    assert sample_type_from_name("megatron.energon.VQASample") is VQASample
    assert sample_type_from_name("fpipe.samples.TextSample") is TextSample
    energon_yaml = {"__module__": "megatron.energon", "__class__": "CaptioningSample"}
    assert sample_type_from_name(energon_yaml) is CaptioningSample
    assert sample_type_from_name("VideoTextSample") is CaptionedVideoSample
    assert sample_type_from_name(TextSample) is TextSample
    assert sample_type_name(CaptionedVideoSample) == "CaptionedVideoSample"


@pytest.mark.parametrize(
    "name",
    [
        "os.system",
        "NoSuchSample",
        "subprocess.Popen",
        "evil.module.CaptioningSample",  # a built-in name under a foreign module
        {"__module__": "os", "__class__": "system"},
        {"__class__": "CaptioningSample"},
    ],
)
def test_unknown_names_are_refused_without_import(name):
    with pytest.raises(ConfigError) as ei:
        sample_type_from_name(name)
    if isinstance(name, str) and "." not in name:
        assert "CaptioningSample" in str(ei.value)  # lists the known names


def test_register_sample_type():
    @dataclass
    class PairSample(Sample):
        a: str

    with pytest.raises(ConfigError, match="not registered"):
        sample_type_from_name(PairSample)
    assert register_sample_type(PairSample, name="TestPairSample") is PairSample
    assert sample_type_from_name("TestPairSample") is PairSample
    assert sample_type_from_name(f"{__name__}.{PairSample.__qualname__}") is PairSample
    register_sample_type(PairSample, name="TestPairSample")  # idempotent

    @register_sample_type(name="TestPairSample2")
    @dataclass
    class Other(Sample):
        b: int

    assert sample_type_from_name("TestPairSample2") is Other
    with pytest.raises(ConfigError, match="already registered"):
        register_sample_type(Other, name="TestPairSample")
    with pytest.raises(TypeError):
        register_sample_type(dict)


@dataclass
class ImgBatch(Batch):
    image: Any
    caption: list


def make_samples(n: int = 3):
    return [
        CaptioningSample(
            image=torch.full((3, 2, 2), i),
            caption=f"c{i}",
            __key__=f"s/{i}",
            __restore_key__=("d", i),
            __subflavors__={"i": i},
        )
        for i in range(n)
    ]


def test_batch_from_samples_and_derive_from():
    samples = make_samples()
    b = ImgBatch.from_samples(samples, image=torch.stack([s.image for s in samples]))
    assert b.__key__ == ["s/0", "s/1", "s/2"]
    assert b.__restore_key__ == (("d", 0), ("d", 1), ("d", 2))
    assert b.__subflavors__ == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert b.caption == ["c0", "c1", "c2"]  # not given: collected as a list
    assert tuple(b.image.shape) == (3, 3, 2, 2)

    @dataclass
    class Encoded(Batch):
        x: Any

    e = Encoded.derive_from(b, x=1)
    assert e.__key__ == b.__key__ and e.__restore_key__ == b.__restore_key__ and e.x == 1
    with pytest.raises(TypeError):
        ImgBatch.from_samples([TextSample(text="t")])  # image/caption cannot be collected


def test_batch_to_recurses_and_returns_new():
    class NT(NamedTuple):
        a: Any
        b: Any

    @dataclass
    class Nested(Batch):
        t: Any
        items: list
        d: dict
        nt: NT
        s: Any
        other: str

    sample = TextSample(text="x")
    b = Nested(
        t=torch.ones(2),
        items=[torch.zeros(1), "s", (torch.ones(1),)],
        d={"k": torch.ones(1), "n": 3},
        nt=NT(torch.ones(1), 2),
        s=ImageSample(image=torch.ones(1)),
        other="o",
        __key__=["a"],
    )
    m = b.to("meta")
    assert m is not b and b.t.device.type == "cpu"
    assert m.t.device.type == "meta"
    assert m.items[0].device.type == "meta" and m.items[1] == "s"
    assert m.items[2][0].device.type == "meta" and isinstance(m.items[2], tuple)
    assert m.d["k"].device.type == "meta" and m.d["n"] == 3
    assert isinstance(m.nt, NT) and m.nt.a.device.type == "meta"
    assert isinstance(m.s, ImageSample) and m.s.image.device.type == "meta"
    assert m.other == "o" and m.__key__ == ["a"]
    assert map_tensors(sample, lambda t: t) == sample


def test_pin_memory(monkeypatch):
    b = ImgBatch(image=torch.ones(2), caption=["a"])
    if not torch.cuda.is_available():
        assert b.pin_memory() is b  # nothing to pin into without an accelerator
    pinned = []

    def fake_pin(self):
        pinned.append(self)
        return self.clone()

    acc = getattr(torch, "accelerator", None)
    if acc is not None:
        monkeypatch.setattr(acc, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.Tensor, "pin_memory", fake_pin)
    p = b.pin_memory()
    assert p is not b and len(pinned) == 1 and torch.equal(p.image, b.image)
    assert dataclasses.asdict(p)["caption"] == ["a"]


def _fake_accelerator(monkeypatch) -> list:
    """Pretend an accelerator is present; ``Tensor.pin_memory`` records and clones."""
    pinned: list = []

    def fake_pin(self, *device):
        pinned.append((self, device))
        return self.clone()

    acc = getattr(torch, "accelerator", None)
    if acc is not None:
        monkeypatch.setattr(acc, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.Tensor, "pin_memory", fake_pin)
    return pinned


def test_default_batch_of_samples_has_to_and_pin_memory(monkeypatch):
    # the default task encoder collates samples into their own type: that batch moves too
    from fpipe.encode._collate import collate_samples

    samples = [
        ImageClassificationSample(image=torch.ones(3, 2), label=i, __key__=f"s/{i}")
        for i in range(2)
    ]
    batch = collate_samples(samples)
    assert type(batch) is ImageClassificationSample
    moved = batch.to("meta")
    assert moved is not batch and moved.image.device.type == "meta"
    assert batch.image.device.type == "cpu" and moved.__key__ == ["s/0", "s/1"]
    # a dtype casts floating-point tensors only, as torch.nn.Module.to does
    cast = batch.to("cpu", torch.float64)
    assert cast.image.dtype == torch.float64 and cast.label == [0, 1]  # ints: a list, as Energon
    assert batch.to(torch.float16).image.dtype == torch.float16
    assert torch.equal(batch.to("cpu").image, batch.image)
    with pytest.raises(TypeError, match="floating-point tensors only"):
        batch.to(torch.int32)
    with pytest.raises(TypeError, match="one dtype"):
        batch.to(torch.float16, torch.float32)
    if not torch.cuda.is_available():
        assert batch.pin_memory() is batch  # nothing to pin into without an accelerator
    pinned = _fake_accelerator(monkeypatch)
    p = batch.pin_memory()
    assert p is not batch and [d for _, d in pinned] == [()]  # the image (labels: a list)
    assert torch.equal(p.image, batch.image) and p.__key__ == batch.__key__
    batch.pin_memory("cuda")
    assert pinned[-1][1] == ("cuda",)  # Energon's pin_memory(device) is passed on


def test_varlen_pack_batches_move_too():
    from fpipe.encode.varlen import stack_varlen, varlen_pack

    b = stack_varlen([varlen_pack([[1, 2], [3]], pad_to=4), varlen_pack([[4]], pad_to=4)])
    m = b.to("meta")
    assert m.input_ids.device.type == "meta" and m.cu_seqlens.device.type == "meta"
    assert m.max_seqlen == b.max_seqlen and b.input_ids.device.type == "cpu"
