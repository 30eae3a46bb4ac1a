"""Decoding limits: small inputs that ask for large outputs are bad samples, refused before the
memory is allocated (gzip members, .npy/.npz arrays, images for a small target, audio)."""

import gzip
import io
import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fpipe.core import BadSampleError, ConfigError
from fpipe.decode import DecodeLimits, ImageDecodeOptions, decode_field, decode_image_with
from fpipe.decode.limits import gunzip


def test_gzip_member_over_the_inflate_limit_is_a_bad_sample():
    bomb = gzip.compress(b"\0" * (4 << 20))  # 4 KB that inflate to 4 MiB
    assert len(bomb) < 8192
    with pytest.raises(BadSampleError, match="max_inflated_bytes=1048576") as info:
        decode_field(
            "txt.gz", bomb, path="s.tar", key="s/1", limits=DecodeLimits(max_inflated_bytes=1 << 20)
        )
    assert info.value.key == "s/1" and "txt.gz" in info.value.reason
    # the default limit lets it through; None turns it off
    assert len(decode_field("bin.gz", bomb)) == 4 << 20
    assert (
        len(decode_field("bin.gz", bomb, limits=DecodeLimits(max_inflated_bytes=None))) == 4 << 20
    )


@pytest.mark.parametrize(
    "data, what",
    [
        (gzip.compress(b"hello world" * 100)[:-20], "truncated"),
        (b"\x1f\x8b\x08\x00" + b"\xff" * 40, "corrupt"),
        (b"not gzip at all", "not gzip"),
    ],
    ids=["truncated", "corrupt", "not-gzip"],  # stable ids: gzip headers hold the time
)
def test_broken_gzip_member_is_a_bad_sample(data, what):
    with pytest.raises(BadSampleError, match="txt.gz"):
        decode_field("txt.gz", data, path="p", key="k")


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=4), st.integers(0, 1200))
def test_gunzip_agrees_with_gzip_below_the_limit(parts, limit):
    data = b"".join(gzip.compress(p) for p in parts)
    whole = gzip.decompress(data)
    if len(whole) <= limit:
        assert gunzip(data, limit) == whole
    else:
        with pytest.raises(ValueError, match="max_inflated_bytes"):
            gunzip(data, limit)
    for cut in (1, 5):  # inside the last member's 8-byte trailer
        with pytest.raises((EOFError, zlib.error, ValueError)):
            gunzip(data[:-cut], None)


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def test_npz_over_the_array_limit_is_refused_before_inflating():
    data = _npz(a=np.zeros((4 << 20,), np.uint8), b=np.arange(3))
    assert len(data) < 16384
    with pytest.raises(BadSampleError, match="max_array_bytes=1048576"):
        decode_field("npz", data, limits=DecodeLimits(max_array_bytes=1 << 20))
    out = decode_field("npz", data)
    assert out["a"].shape == (4 << 20,) and out["b"].tolist() == [0, 1, 2]


def test_npy_header_declaring_more_than_it_holds_is_refused():
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (1 << 40,)}
    )
    data = header.getvalue() + b"\0" * 64
    with pytest.raises(BadSampleError, match="max_array_bytes"):
        decode_field("npy", data)
    with pytest.raises(BadSampleError, match="truncated"):
        decode_field("npy", data, limits=DecodeLimits(max_array_bytes=None))
    buf = io.BytesIO()
    np.save(buf, np.arange(1000, dtype=np.int64))
    with pytest.raises(BadSampleError, match="max_array_bytes=100"):
        decode_field("npy", buf.getvalue(), limits=DecodeLimits(max_array_bytes=100))


def test_limits_are_checked_when_built():
    with pytest.raises(ConfigError):
        DecodeLimits(max_array_bytes=-1)
    with pytest.raises(ConfigError):
        DecodeLimits(max_decode_ratio=0)
    with pytest.raises(ConfigError):
        DecodeLimits(max_audio_samples="many")


def test_huge_png_for_a_tiny_target_is_refused_before_decoding():
    from PIL import Image

    buf = io.BytesIO()
    Image.new("L", (5000, 4000)).save(buf, "PNG")  # 20 MP in a few KB
    data = buf.getvalue()
    assert len(data) < 100_000
    opts = ImageDecodeOptions(target_size=8)
    with pytest.raises(BadSampleError, match="max_decode_ratio"):
        decode_image_with(data, opts, path="p", key="k")
    # a larger target, or the limit off, decodes it
    no_ratio = DecodeLimits(max_decode_ratio=None)
    assert decode_image_with(data, opts, limits=no_ratio).shape == (3, 8, 8)


def test_jpeg_draft_decode_counts_the_reduced_size():
    """A large JPEG is decoded at 1/8 scale for a small target, so it stays under the limit."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (4800, 4000)).save(buf, "JPEG")
    lim = DecodeLimits(max_decode_ratio=1.0)
    out = decode_image_with(buf.getvalue(), ImageDecodeOptions(target_size=8), limits=lim)
    assert out.shape == (3, 8, 8)  # 600x500 decoded = 300_000 pixels, under the floor


def test_audio_over_the_sample_limit_is_a_bad_sample():
    pytest.importorskip("av")
    from fpipe.decode.av.decoder import AVDecoder
    from tests.decode.av_helpers import write_audio

    data = write_audio(None, seconds=2.0, sample_rate=8000, channels=1)
    with pytest.raises(BadSampleError, match="4000 audio samples"):
        AVDecoder(data, key="a/1", limits=DecodeLimits(max_audio_samples=4000)).get_audio()
    clip = AVDecoder(data, key="a/1").get_audio().audio_clips[0]
    assert clip.shape == (1, 16000)


def test_gz_members_of_a_shard_use_the_loaders_limits(tmp_path):
    """A ``txt.gz`` member is inflated when the shard is read, under the limits given to the
    loader (not the default 256 MiB), and over them it is a bad sample under the policy."""
    import fpipe
    from fpipe.loader import Topology
    from fpipe.storage import prepare_dataset
    from tests.storage.helpers import write_tar

    big = gzip.compress(b"a" * (64 << 10))  # inflates to 64 KiB
    write_tar(
        tmp_path / "s.tar",
        [(f"{i:03d}", {"txt.gz": big if i == 2 else gzip.compress(b"ok")}) for i in range(4)],
    )
    prepare_dataset(tmp_path, fields={"text": "txt"}, sample_type="TextSample")
    limits = DecodeLimits(max_inflated_bytes=1 << 10)
    kw = dict(batch_size=4, seed=0, num_epochs=1, topology=Topology(0, 1), decode_limits=limits)
    with pytest.raises(BadSampleError, match="max_inflated_bytes=1024") as info:
        next(iter(fpipe.get_loader(fpipe.get_train_dataset(str(tmp_path), **kw))))
    assert info.value.key == "s/002" and "txt.gz" in str(info.value)
    loader = fpipe.get_loader(fpipe.get_train_dataset(str(tmp_path), error_policy="skip", **kw))
    texts = [t for b in loader for t in b.text]
    assert texts == ["ok"] * 3 and loader.stats().skipped == 1
