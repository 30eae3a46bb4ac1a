"""Cooking raw members into typed samples: field_map, alternatives, json paths, lazy decode,
missing fields, video handles and crude datasets with cookers."""

from __future__ import annotations

import io
import sys
import types
from dataclasses import dataclass

import msgspec
import numpy as np
import pytest
from PIL import Image

from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.decode import DecodeLimits, ImageDecodeOptions, register_decoder, unregister_decoder
from fpipe.samples import (
    CaptionedVideoSample,
    CaptioningSample,
    Cooker,
    CrudeSample,
    ImageClassificationSample,
    ImageSample,
    Sample,
    TextSample,
    VQASample,
    compile_field_map,
    cook_crude_sample,
    cook_sample,
    make_crude_sample,
    parse_source,
)


def jpeg(w: int = 64, h: int = 48, color=(200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), color).save(buf, "JPEG")
    return buf.getvalue()


def png(w: int = 32, h: int = 32) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (0, 0, 255)).save(buf, "PNG")
    return buf.getvalue()


RAW = {
    "jpg": jpeg(),
    "txt": b"a red square",
    "json": msgspec.json.encode({"caption": "from json", "a": [{"b": "deep"}], "n": 2}),
    "cls": b"7",
}


def test_captioning_sample_from_field_map():
    s = cook_sample(
        RAW,
        sample_type=CaptioningSample,
        field_map={"image": "jpg", "caption": "txt"},
        key="shard-0/000001",
        restore_key=("ds", 0, 1),
        subflavors={"src": "x"},
        path="shard-0.tar",
    )
    assert isinstance(s, CaptioningSample)
    assert tuple(s.image.shape) == (3, 48, 64) and s.caption == "a red square"
    assert (s.__key__, s.__restore_key__, s.__subflavors__) == (
        "shard-0/000001",
        ("ds", 0, 1),
        {"src": "x"},
    )


def test_sample_type_by_name_and_json_paths():
    s = cook_sample(
        RAW,
        sample_type="CaptioningSample",
        field_map={"image": "jpg", "caption": "json[caption]"},
        key="k",
    )
    assert s.caption == "from json"
    s = cook_sample(RAW, sample_type="TextSample", field_map={"text": "json[a][0][b]"}, key="k")
    assert s.text == "deep"
    s = cook_sample(
        RAW, sample_type="TextSample", field_map={"text": "json['a'][0][\"b\"]"}, key="k"
    )
    assert s.text == "deep"
    s = cook_sample(
        RAW,
        sample_type="ImageClassificationSample",
        field_map={"image": "jpg", "label": "cls", "label_name": "txt"},
        key="k",
    )
    assert isinstance(s, ImageClassificationSample) and s.label == 7


def test_alternatives_first_present():
    fm = {"image": ["jpg", "png"], "caption": ["json[missing]", "json[caption]", "txt"]}
    only_png = {"png": png(), "json": RAW["json"]}
    s = cook_sample(only_png, sample_type=CaptioningSample, field_map=fm, key="k")
    assert tuple(s.image.shape) == (3, 32, 32) and s.caption == "from json"
    s = cook_sample(RAW, sample_type=CaptioningSample, field_map=fm, key="k")
    assert tuple(s.image.shape) == (3, 48, 64)


def test_missing_field_names_path_key_field():
    with pytest.raises(BadSampleError) as ei:
        cook_sample(
            {"jpg": RAW["jpg"]},
            sample_type=CaptioningSample,
            field_map={"image": "jpg", "caption": "txt"},
            key="shard-2/000017",
            path="data/shard-2.tar",
        )
    e = ei.value
    assert (e.path, e.key) == ("data/shard-2.tar", "shard-2/000017")
    assert "'caption'" in e.reason and "txt" in e.reason and "jpg" in e.reason
    with pytest.raises(BadSampleError, match=r"json\[nope\]"):
        cook_sample(RAW, sample_type=TextSample, field_map={"text": "json[nope]"}, key="k")
    with pytest.raises(BadSampleError):  # index out of range / path into a scalar
        cook_sample(RAW, sample_type=TextSample, field_map={"text": "json[a][5]"}, key="k")
    with pytest.raises(BadSampleError):
        cook_sample(RAW, sample_type=TextSample, field_map={"text": "json[n][x]"}, key="k")


def test_optional_field_missing_uses_default():
    s = cook_sample(
        {"jpg": RAW["jpg"], "txt": b"q?"},
        sample_type=VQASample,
        field_map={"image": "jpg", "context": "txt", "answers": "json[answers]"},
        key="k",
    )
    assert s.answers is None


def test_unused_members_are_not_decoded():
    calls = []
    try:
        register_decoder("spy", lambda b: calls.append(b) or "spied")
        raw = {
            "txt": b"hello",
            "jpg": b"corrupt jpeg bytes",  # would raise if decoded
            "npy": b"corrupt npy",
            "json": b"{broken",
            "spy": b"x",
        }
        s = cook_sample(raw, sample_type=TextSample, field_map={"text": "txt"}, key="k")
        assert s.text == "hello" and calls == []
        # the corrupt member does raise (naming it) once a field uses it
        with pytest.raises(BadSampleError, match="'jpg'"):
            cook_sample(raw, sample_type=ImageSample, field_map={"image": "jpg"}, key="k")
    finally:
        unregister_decoder("spy")


def test_shared_member_decoded_once():
    calls = []

    def counting_json(b: bytes):
        calls.append(b)
        return msgspec.json.decode(b)

    try:
        register_decoder("json", counting_json)
        s = cook_sample(
            RAW,
            sample_type=VQASample,
            field_map={"image": "jpg", "context": "json[caption]", "answers": "json[a]"},
            key="k",
        )
        assert s.context == "from json" and s.answers == [{"b": "deep"}]
        assert len(calls) == 1
    finally:
        unregister_decoder("json")


@pytest.mark.parametrize(
    ("fm", "match"),
    [
        ({"image": "jpg", "caption": "txt", "extra": "json"}, "does not have"),
        ({"image": "jpg"}, "required field"),
        ({"image": "jpg", "caption": "json[a"}, "bad field spec"),
        ({"image": "jpg", "caption": "json[]"}, "empty"),
        ({"image": [], "caption": "txt"}, "empty list"),
        ({"image": "jpg", "__key__": "txt", "caption": "txt"}, "does not have"),
    ],
)
def test_bad_field_maps_fail_at_compile(fm, match):
    with pytest.raises(ConfigError, match=match):
        compile_field_map(CaptioningSample, fm)
    with pytest.raises(ConfigError):
        cook_sample(RAW, sample_type=CaptioningSample, field_map=fm, key="k")


def test_compiled_field_map_reused_and_checked():
    fm = compile_field_map(CaptioningSample, {"image": ["jpg", "png"], "caption": "json[caption]"})
    assert fm.extensions == {"jpg", "png", "json"}
    assert compile_field_map(CaptioningSample, fm) is fm
    assert cook_sample(RAW, sample_type=CaptioningSample, field_map=fm, key="k").caption
    with pytest.raises(ConfigError, match="compiled for"):
        cook_sample(RAW, sample_type=ImageSample, field_map=fm, key="k")
    assert str(parse_source(" json[a][0] ")) == "json[a][0]"
    with pytest.raises(ConfigError):
        cook_sample(RAW, sample_type="NoSuchSample", field_map={}, key="k")


def test_image_decode_options_and_rng():
    big = {"jpg": jpeg(400, 300)}
    s = cook_sample(
        big,
        sample_type=ImageSample,
        field_map={"image": "jpg"},
        key="k",
        image_decode_options={"target_size": 64, "out": "numpy"},
    )
    assert s.image.shape == (64, 64, 3)
    opts = ImageDecodeOptions(target_size=32, crop="random", out="numpy")
    a = cook_sample(
        big,
        sample_type=ImageSample,
        field_map={"image": "jpg"},
        key="k",
        image_decode_options=opts,
        rng=np.random.default_rng(3),
    )
    b = cook_sample(
        big,
        sample_type=ImageSample,
        field_map={"image": "jpg"},
        key="k",
        image_decode_options=opts,
        rng=np.random.default_rng(3),
    )
    np.testing.assert_array_equal(a.image, b.image)


def test_video_fields_are_lazy_handles(monkeypatch):
    made = []

    class StubAVDecoder:
        def __init__(self, data, **kw):
            self.data = data
            made.append(kw)

    stub = types.ModuleType("fpipe.decode.av.decoder")
    stub.AVDecoder = StubAVDecoder
    monkeypatch.setitem(sys.modules, "fpipe.decode.av.decoder", stub)
    raw = {"mp4": b"VIDEO", "wav": b"AUDIO", "txt": b"a clip", "json": b'{"fps": 30}'}
    s = cook_sample(
        raw,
        sample_type=CaptionedVideoSample,
        field_map={"video": "mp4", "caption": "txt", "audio": "wav", "metadata": "json"},
        key="v/1",
        path="v.tar",
    )
    assert isinstance(s.video, StubAVDecoder) and s.video.data == b"VIDEO"
    assert s.audio.data == b"AUDIO" and s.metadata == {"fps": 30}
    assert made[0] == {"path": "v.tar", "key": "v/1", "limits": DecodeLimits()}
    s = cook_sample(
        {"mp4": b"V", "txt": b"c"},
        sample_type="VideoTextSample",
        field_map={"video": "mp4", "caption": "txt"},
        key="v/2",
    )
    assert s.audio is None


# -- crude datasets -------------------------------------------------------------------------


def test_make_crude_sample_and_decode():
    c = make_crude_sample(
        {"txt": b"hi", "jpg": b"bad"},
        key="s/1",
        restore_key=("d", 1),
        subflavors={"kind": "text"},
        path="s.tar",
    )
    assert isinstance(c, CrudeSample) and isinstance(c, dict)
    assert c["__key__"] == "s/1" and c["__subflavors__"] == {"kind": "text"}
    assert c.decode("txt") == "hi"
    with pytest.raises(BadSampleError) as ei:
        c.decode("jpg")
    assert (ei.value.path, ei.value.key) == ("s.tar", "s/1")
    with pytest.raises(BadSampleError, match="missing member 'png'"):
        c.decode("png")
    t = TextSample.derive_from(c, text="x")
    assert (t.__key__, t.__restore_key__, t.__subflavors__) == ("s/1", ("d", 1), {"kind": "text"})


def test_cookers_by_subflavor():
    @dataclass
    class Doc(Sample):
        body: str
        n_images: int

    def cook_text(crude):
        return TextSample.derive_from(crude, text=crude.decode("txt"))

    def cook_doc(crude):
        meta = crude.decode("json")
        return Doc.derive_from(crude, body=meta["body"], n_images=len(meta["imgs"]))

    cookers = [
        Cooker(cook_text, has_subflavors={"kind": "text"}),
        Cooker(cook_doc, has_subflavors={"kind": "doc"}),
    ]
    text = make_crude_sample({"txt": b"plain"}, key="a/1", subflavors={"kind": "text", "x": 1})
    doc = make_crude_sample(
        {"json": b'{"body": "b", "imgs": [1, 2]}'}, key="b/1", subflavors={"kind": "doc"}
    )
    t = cook_crude_sample(text, cookers)
    assert isinstance(t, TextSample) and t.text == "plain" and t.__key__ == "a/1"
    d = cook_crude_sample(doc, cookers)
    assert isinstance(d, Doc) and d.n_images == 2 and d.__subflavors__ == {"kind": "doc"}
    other = make_crude_sample({"txt": b"?"}, key="c/1", subflavors={"kind": "video"})
    with pytest.raises(ConfigError, match="c/1"):
        cook_crude_sample(other, cookers)
    assert cook_crude_sample(other, [*cookers, cook_text]).text == "?"  # bare function: fallback
    cond = Cooker(cook_text, condition=lambda c: "txt" in c)
    assert cond.is_match(other) and not cond.is_match(doc)


def test_str_field_gets_text_whatever_the_member_is_called():
    """A field declared str gets str: bytes of a member without a text decoder are read as
    UTF-8, a number becomes its text; invalid UTF-8 is a bad sample naming the field."""
    raw = {"jpg": jpeg(8, 6), "cap": "é cat".encode(), "n": b"7"}
    s = cook_sample(
        raw, sample_type=CaptioningSample, field_map={"image": "jpg", "caption": "cap"}, key="k"
    )
    assert s.caption == "é cat"
    s = cook_sample(
        {"jpg": jpeg(8, 6), "cls": b"7"},
        sample_type=ImageClassificationSample,
        field_map={"image": "jpg", "label": "cls", "label_name": "cls"},
        key="k",
    )
    assert s.label == 7 and s.label_name == "7"
    with pytest.raises(BadSampleError, match="'caption' is declared str"):
        cook_sample(
            {"jpg": jpeg(8, 6), "cap": b"\xff\xfe"},
            sample_type=CaptioningSample,
            field_map={"image": "jpg", "caption": "cap"},
            key="k",
        )
