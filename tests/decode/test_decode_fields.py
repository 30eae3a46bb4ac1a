"""Field decoders and the decoder registry."""

from __future__ import annotations

import gzip
import io
import subprocess
import sys
import types

import numpy as np
import pytest
from PIL import Image

import fpipe.decode as fd
from fpipe.core.errors import BadSampleError
from fpipe.decode import (
    DecodeLimits,
    ImageDecodeOptions,
    decode_field,
    get_decoder,
    register_decoder,
    registered_extensions,
    unregister_decoder,
)


def png_bytes(w: int = 20, h: int = 10) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (10, 200, 30)).save(buf, "PNG")
    return buf.getvalue()


def npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=True)
    return buf.getvalue()


def test_import_pulls_no_torch_or_av():
    code = (
        "import sys, fpipe.decode, fpipe.decode.registry, fpipe.samples;"
        "fpipe.decode.decode_field('txt', b'x');"
        "bad = [m for m in ('torch', 'av') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_all_sorted_and_documented():
    assert fd.__all__ == sorted(fd.__all__)
    for name in fd.__all__:
        obj = getattr(fd, name)
        if callable(obj) and not isinstance(obj, type(list[int])):
            assert obj.__doc__, name
    with pytest.raises(AttributeError):
        fd.nope  # noqa: B018


def test_builtin_decoders():
    assert decode_field("txt", "héllo".encode()) == "héllo"
    assert decode_field("json", b'{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}
    assert decode_field("cls", b" 12\n") == 12
    assert decode_field("index", b"3") == 3
    arr = np.arange(6, dtype=np.int16).reshape(2, 3)
    out = decode_field("npy", npy_bytes(arr))
    np.testing.assert_array_equal(out, arr)
    assert out.dtype == np.int16
    buf = io.BytesIO()
    np.savez(buf, a=arr, b=arr * 2)
    npz = decode_field("npz", buf.getvalue())
    np.testing.assert_array_equal(npz["b"], arr * 2)
    import msgspec

    assert decode_field("mp", msgspec.msgpack.encode({"x": 1})) == {"x": 1}


def test_pth_weights_only():
    import torch

    buf = io.BytesIO()
    torch.save({"w": torch.arange(3), "meta": [1, "a"]}, buf)
    out = decode_field("pth", buf.getvalue())
    assert torch.equal(out["w"], torch.arange(3)) and out["meta"] == [1, "a"]

    buf = io.BytesIO()
    torch.save({"obj": types.SimpleNamespace(a=1)}, buf)  # arbitrary object: refused
    with pytest.raises(BadSampleError, match="pth"):
        decode_field("pth", buf.getvalue(), path="p.tar", key="p/1")


def test_npy_object_array_refused():
    data = npy_bytes(np.array([{"a": 1}], dtype=object))
    with pytest.raises(BadSampleError) as ei:
        decode_field("npy", data, path="x.tar", key="x/5")
    assert ei.value.key == "x/5" and "npy" in ei.value.reason


@pytest.mark.parametrize(
    ("ext", "data"),
    [("txt", b"\xff\xfe"), ("json", b"{oops"), ("cls", b"three"), ("npy", b"nope")],
)
def test_decode_errors_name_path_key_member(ext, data):
    with pytest.raises(BadSampleError) as ei:
        decode_field(ext, data, path="shard-1.tar", key="shard-1/000009")
    e = ei.value
    assert (e.path, e.key) == ("shard-1.tar", "shard-1/000009")
    assert repr(ext) in e.reason and "shard-1/000009" in str(e)


def test_images_default_and_options():
    t = decode_field("png", png_bytes())
    assert tuple(t.shape) == (3, 10, 20)
    pil = decode_field("PNG", png_bytes(), image_options=ImageDecodeOptions(out="pil"))
    assert pil.size == (20, 10)
    with pytest.raises(BadSampleError) as ei:
        decode_field("jpg", b"garbage", path="s.tar", key="s/3")
    assert ei.value.key == "s/3" and "'jpg'" in ei.value.reason


def test_multi_part_extension_uses_last_part_then_whole():
    assert get_decoder("seg.png") is get_decoder("png")
    assert tuple(decode_field("seg.png", png_bytes()).shape) == (3, 10, 20)
    try:
        register_decoder("seg.png", lambda b: "segmentation")
        assert decode_field("seg.png", png_bytes()) == "segmentation"
        assert decode_field("png", png_bytes()).shape[0] == 3
    finally:
        unregister_decoder("seg.png")
    assert get_decoder("seg.png") is get_decoder("png")


def test_gzip_members():
    assert decode_field("txt.gz", gzip.compress(b"zipped")) == "zipped"
    assert decode_field("json.gz", gzip.compress(b"[1]")) == [1]
    assert decode_field("gz", gzip.compress(b"raw")) == b"raw"
    with pytest.raises(BadSampleError):
        decode_field("txt.gz", b"not gzip", key="k")


def test_unknown_extension_stays_bytes_and_pickle_is_never_decoded():
    assert decode_field("bin", b"\x00\x01") == b"\x00\x01"
    assert decode_field("pyd", b"\x80\x04N.") == b"\x80\x04N."
    assert decode_field("pickle", b"\x80\x04N.") == b"\x80\x04N."
    assert "pyd" not in registered_extensions()


def test_register_override_and_unregister():
    calls = []

    def upper(b: bytes) -> str:
        calls.append(b)
        return b.decode().upper()

    try:
        assert register_decoder(".SHOUT", upper) is None
        assert "shout" in registered_extensions()
        assert decode_field("shout", b"abc") == "ABC"
        old = register_decoder("txt", upper)
        assert decode_field("txt", b"x") == "X"
        assert old is not None
    finally:
        unregister_decoder("shout")
        unregister_decoder("txt")
    assert decode_field("txt", b"x") == "x"
    assert decode_field("shout", b"abc") == b"abc"
    assert len(calls) == 2
    with pytest.raises(TypeError):
        register_decoder("x", "not callable")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        register_decoder("", upper)


def test_a_registration_applies_to_extensions_decoded_before_it():
    # how each extension is decoded is worked out once; registering or removing a decoder
    # must still apply to the next member of that extension
    arr = np.arange(3, dtype=np.int32)
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    npy, txt_gz = buf.getvalue(), gzip.compress(b"abc")
    assert decode_field("txt.gz", txt_gz) == "abc" and decode_field("TXT", b"x") == "x"
    assert np.array_equal(decode_field("npy", npy), arr)
    try:
        register_decoder("txt", lambda b: b.decode().upper())
        register_decoder("npy", lambda b: len(b))
        assert decode_field("txt.gz", txt_gz) == "ABC" and decode_field("TXT", b"x") == "X"
        assert decode_field("npy", npy) == len(npy)
    finally:
        unregister_decoder("txt")
        unregister_decoder("npy")
    assert decode_field("txt.gz", txt_gz) == "abc" and decode_field("TXT", b"x") == "x"
    assert np.array_equal(decode_field("npy", npy), arr)
    assert decode_field("gz", txt_gz) == b"abc"  # a bare .gz member: inflated, not decoded


def test_custom_decoder_error_becomes_bad_sample():
    def broken(b: bytes):
        raise RuntimeError("boom")

    try:
        register_decoder("brk", broken)
        with pytest.raises(BadSampleError, match="RuntimeError: boom") as ei:
            decode_field("brk", b"", path="f.tar", key="f/1")
        assert ei.value.path == "f.tar"
    finally:
        unregister_decoder("brk")


def test_video_is_a_lazy_handle(monkeypatch):
    made = []

    class StubAVDecoder:
        def __init__(self, data, **kw):
            made.append((data, kw))

    stub = types.ModuleType("fpipe.decode.av.decoder")
    stub.AVDecoder = StubAVDecoder
    monkeypatch.setitem(sys.modules, "fpipe.decode.av.decoder", stub)
    limits = DecodeLimits(max_video_frames=7)
    for ext in ("mp4", "webm", "mkv", "mov", "avi", "mp3", "wav", "flac", "m4a", "ogg"):
        h = decode_field(ext, b"videobytes", path="v.tar", key="v/1", limits=limits)
        assert isinstance(h, StubAVDecoder)
    # the handle gets the caller's limits
    assert made[0] == (b"videobytes", {"path": "v.tar", "key": "v/1", "limits": limits})


def test_video_handle_with_real_module():
    av_mod = pytest.importorskip("fpipe.decode.av.decoder")
    h = decode_field("mp4", b"not parsed yet", key="v/2")  # lazy: nothing is read here
    assert isinstance(h, av_mod.AVDecoder)


@pytest.mark.parametrize(
    "arr",
    [
        np.arange(7, dtype=np.int32),
        np.zeros((3, 4), np.float32),
        np.asfortranarray(np.arange(12.0).reshape(3, 4)),
        np.array(5, np.int64),
        np.zeros((0,), np.uint8),
        np.arange(6, dtype=">i2").reshape(2, 3),
    ],
)
def test_npy_fast_path_matches_np_load(arr):
    from fpipe.decode.fields import _npy_fast

    buf = io.BytesIO()
    np.save(buf, arr)
    fast = _npy_fast(buf.getvalue())
    ref = np.load(io.BytesIO(buf.getvalue()), allow_pickle=False)
    assert fast is not None and fast.dtype == ref.dtype and fast.shape == ref.shape
    assert np.array_equal(fast, ref) and fast.flags.writeable
    again = _npy_fast(buf.getvalue())  # the header parsed once, from the cache now
    assert again is not fast and np.array_equal(again, ref) and again.flags.writeable


def test_npy_fast_path_leaves_odd_input_to_np_load():
    from fpipe.decode.fields import _npy_fast

    buf = io.BytesIO()
    np.save(buf, np.array(["x"], dtype=object), allow_pickle=True)
    assert _npy_fast(buf.getvalue()) is None  # object arrays: np.load refuses them
    np.save(buf := io.BytesIO(), np.arange(4))
    assert _npy_fast(buf.getvalue()[:-3]) is None  # truncated: np.load reports it


def test_npy_arrays_sharing_a_header_are_each_checked_on_their_own_bytes(monkeypatch):
    """Arrays of one shape share their header's parse (looked up by the bytes before their
    data, in a bounded table); each array's size and the size limit are still checked on its
    own bytes, and a memoryview decodes as bytes do."""
    from fpipe.decode import fields

    monkeypatch.setattr(fields, "_npy_preambles", {})
    monkeypatch.setattr(fields, "_NPY_PREAMBLES_MAX", 2)
    ids = np.arange(9, dtype=np.int32)
    np.save(buf := io.BytesIO(), ids)
    data = buf.getvalue()
    for _ in range(2):  # parsed, then from the table
        assert np.array_equal(fields._npy_fast(data), ids)
    assert fields._npy_fast(data[:-4]) is None  # truncated, padded: np.load reports them
    assert fields._npy_fast(data + b"\0\0\0\0") is None
    assert fields._npy_fast(data, max_bytes=35) is None  # 36 bytes of data declared
    assert np.array_equal(fields._npy_fast(data, max_bytes=36), ids)
    assert np.array_equal(fields._npy_fast(memoryview(data)), ids)
    for n in range(1, 5):  # more shapes than the table holds: parsed each time
        np.save(buf := io.BytesIO(), np.arange(n))
        assert np.array_equal(fields._npy_fast(buf.getvalue()), np.arange(n))
    assert len(fields._npy_preambles) == 2


def test_a_route_worked_out_while_a_decoder_is_registered_is_not_kept(monkeypatch):
    """Another thread registers a decoder while this one works out the route of the same
    extension with the decoder before it: that route decodes this member, and is not kept for
    the next (which would use the old decoder until the next registration)."""
    from fpipe.decode import registry

    real = registry.get_decoder

    def meanwhile(ext):
        fn = real(ext)  # the decoder before
        registry.register_decoder("racex", lambda b: "new")  # the other thread, now
        return fn

    monkeypatch.setattr(registry, "get_decoder", meanwhile)
    try:
        assert registry.decode_field("racex", b"raw") == b"raw"  # no decoder yet: the bytes
        monkeypatch.setattr(registry, "get_decoder", real)
        assert registry.decode_field("racex", b"raw") == "new"
    finally:
        registry.unregister_decoder("racex")
