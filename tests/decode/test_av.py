"""Tests of fpipe.decode.av.decoder on short videos and tones written by av_helpers at test time."""

from __future__ import annotations

import io
import math
import os

import av
import msgspec
import numpy as np
import pytest
import torch

from fpipe.core.errors import BadSampleError
from fpipe.decode import DecodeLimits
from fpipe.decode.av.decoder import (
    AVDecoder,
    AVMetadata,
    av_open,
    probe_av,
    random_clip_ranges,
    uniform_clip_ranges,
)
from fpipe.encode.video import VideoTransformConfig, stack_videos, video_transform
from tests.decode.av_helpers import frame_index, write_audio, write_video

FPS = 24
N = 120  # 5 s at 24 fps
GOP = 24  # a keyframe every second
TOL = 2e-3  # seconds: matroska stores pts in whole milliseconds

# (codec, container): mpeg4 without B-frames, x264 with B-frames (decode order != pts order),
# and matroska, whose millisecond time base does not divide 1/24 s.
VIDEO_KINDS = [
    ("mpeg4", "mp4", {}),
    ("libx264", "mp4", {"bf": "2"}),
    ("mpeg4", "matroska", {}),
]


def _indices(clip: torch.Tensor) -> list[int]:
    return [frame_index(f) for f in clip]


@pytest.fixture(scope="module", params=VIDEO_KINDS, ids=lambda k: f"{k[0]}-{k[1]}")
def video(request) -> bytes:
    codec, fmt, opts = request.param
    if codec not in av.codecs_available:
        pytest.skip(f"{codec} encoder not available")
    return write_video(
        None, num_frames=N, fps=FPS, codec=codec, container_format=fmt, gop=GOP, options=opts
    )


@pytest.fixture(scope="module")
def av_file() -> bytes:
    """mkv with mpeg4 video and a 44.1 kHz stereo pcm tone, both 5 s long."""
    return write_video(
        None,
        num_frames=N,
        fps=FPS,
        gop=GOP,
        container_format="matroska",
        audio_codec="pcm_s16le",
        audio_sample_rate=44100,
        audio_channels=2,
    )


# -- metadata -------------------------------------------------------------------------------


def test_probe_video(video):
    m = probe_av(video)
    assert m.video_num_frames == N
    assert m.video_fps == pytest.approx(FPS)
    assert (m.width, m.height) == (64, 48)
    assert m.video_start_s == pytest.approx(0.0)
    assert m.video_duration_s == pytest.approx(N / FPS, abs=2e-3)
    assert m.duration_s == pytest.approx(N / FPS, abs=2e-3)
    assert m.video_codec in ("mpeg4", "h264")
    assert m.keyframes_s == pytest.approx([float(s) for s in range(5)], abs=TOL)
    assert m.audio_sample_rate is None and m.audio_duration_s is None


def test_probe_audio_and_roundtrip(av_file):
    m = probe_av(av_file, key="k")
    assert (m.audio_sample_rate, m.audio_channels, m.audio_codec) == (44100, 2, "pcm_s16le")
    assert m.audio_duration_s == pytest.approx(5.0, abs=0.01)
    # the record goes into the index: it must survive msgpack and keep its tuple
    back = msgspec.msgpack.decode(msgspec.msgpack.encode(m), type=AVMetadata)
    assert back == m and isinstance(back.keyframes_s, tuple)


def test_probe_audio_only_wav():
    m = probe_av(write_audio(None, seconds=1.5, sample_rate=8000, channels=1))
    assert m.video_num_frames is None and m.keyframes_s == ()
    assert (m.audio_sample_rate, m.audio_channels) == (8000, 1)
    assert m.duration_s == pytest.approx(1.5, abs=0.01)


# -- laziness and sources --------------------------------------------------------------------


def test_construction_reads_nothing():
    dec = AVDecoder(b"definitely not a video", key="lazy")  # no error until used
    assert dec.frames_decoded == 0
    AVDecoder("/no/such/file.mp4")  # not even the path is touched
    with pytest.raises(BadSampleError):
        dec.get_video()


def test_given_metadata_skips_probe(video):
    meta = probe_av(video)
    dec = AVDecoder(video, metadata=meta)
    assert dec.metadata is meta
    assert dec.frames_decoded == 0
    dec.get_clips([(1.0, 1.5)])
    assert dec.metadata is meta


@pytest.mark.parametrize("kind", ["bytes", "file", "path"])
def test_sources(tmp_path, kind):
    data = write_video(None, num_frames=30, fps=FPS, gop=GOP)
    if kind == "bytes":
        src = data
    elif kind == "file":
        src = io.BytesIO(data)
        src.seek(17)  # the decoder rewinds file-like sources
    else:
        src = tmp_path / "v.mp4"
        src.write_bytes(data)
    out = AVDecoder(src).get_video()
    assert _indices(out.video_clips[0]) == list(range(30))
    out = AVDecoder(src).get_video()  # and again: a second open of the same source works
    assert out.video_clips[0].shape == (30, 3, 48, 64)


# -- clips -----------------------------------------------------------------------------------


def test_clip_frames_and_timestamps(video):
    dec = AVDecoder(video)
    out = dec.get_clips([(0.0, 1.0), (2.5, 3.0), (4.0, 5.0)])
    assert [c.dtype for c in out.video_clips] == [torch.uint8] * 3
    assert all(c.is_contiguous(memory_format=torch.channels_last) for c in out.video_clips)
    assert [c.shape for c in out.video_clips] == [(24, 3, 48, 64), (12, 3, 48, 64), (24, 3, 48, 64)]
    assert _indices(out.video_clips[0]) == list(range(0, 24))
    assert _indices(out.video_clips[1]) == list(range(60, 72))
    assert _indices(out.video_clips[2]) == list(range(96, 120))
    for (s, e), (es, ee) in zip(out.video_timestamps, [(0, 1), (2.5, 3), (4, 5)]):
        assert s == pytest.approx(es, abs=TOL) and e == pytest.approx(ee, abs=TOL)
    times = out.video_frame_times[1]
    assert times.dtype == torch.float64
    assert times.numpy() == pytest.approx(np.arange(60, 72) / FPS, abs=TOL)


def test_clips_unsorted_overlapping_and_repeated(video):
    dec = AVDecoder(video)
    ranges = [(3.0, 3.5), (0.5, 1.5), (1.0, 2.0), (3.0, 3.5)]
    out = dec.get_clips(ranges)
    assert _indices(out.video_clips[0]) == list(range(72, 84))
    assert _indices(out.video_clips[1]) == list(range(12, 36))
    assert _indices(out.video_clips[2]) == list(range(24, 48))
    assert _indices(out.video_clips[3]) == list(range(72, 84))


def test_frames_unit(video):
    out = AVDecoder(video).get_clips([(10, 20), (100, 101), (119, 120)], video_unit="frames")
    assert [_indices(c) for c in out.video_clips] == [list(range(10, 20)), [100], [119]]
    assert out.video_timestamps[1][0] == pytest.approx(100 / FPS, abs=TOL)


def test_range_without_frame_pts_gives_frame_on_screen(video):
    out = AVDecoder(video).get_clips([(2.01, 2.02), (99.0, 100.0)])
    assert _indices(out.video_clips[0]) == [48]
    assert out.video_clips[1].shape == (0, 3, 48, 64)  # after the end: empty


def test_late_clip_seeks_instead_of_decoding_from_start(video):
    meta = probe_av(video)
    dec = AVDecoder(video, metadata=meta)
    out = dec.get_clips([(4.5, 5.0)])
    assert _indices(out.video_clips[0]) == list(range(108, 120))
    # lead-in from the keyframe at 4.0 s (12 frames) + the 12 clip frames, not 108 + 12
    assert out.video_frames_decoded <= 24 + 2
    # without keyframes (only the first), the same clip is decoded from the start
    slow = AVDecoder(video, metadata=msgspec.structs.replace(meta, keyframes_s=(0.0,)))
    out2 = slow.get_clips([(4.5, 5.0)])
    assert _indices(out2.video_clips[0]) == list(range(108, 120))
    # every frame up to the clip passes through the decoder; non-reference frames before
    # the clip are passed over undecoded
    assert out2.video_frames_decoded + out2.video_frames_skipped >= 108


def test_adjacent_clips_continue_without_seeking(video):
    dec = AVDecoder(video)
    out = dec.get_clips([(0.0, 0.5), (0.5, 1.0), (1.0, 1.5)])
    assert sum(c.shape[0] for c in out.video_clips) == 36
    assert out.video_frames_decoded <= 37  # one lookahead frame past the last clip


def test_output_frame_size(video):
    out = AVDecoder(video).get_clips([(1.0, 2.0)], video_out_frame_size=(32, 24))
    clip = out.video_clips[0]
    assert clip.shape == (24, 3, 24, 32)
    assert _indices(clip) == list(range(24, 48))


def test_uniform_clips(video):
    dec = AVDecoder(video)
    out = dec.get_clips_uniform(3, 1.0)
    assert [s for s, _ in out.video_timestamps] == pytest.approx([0.0, 2.0, 4.0], abs=TOL)
    assert out.video_timestamps[-1][1] == pytest.approx(N / FPS, abs=TOL)
    assert [_indices(c) for c in out.video_clips] == [
        list(range(0, 24)),
        list(range(48, 72)),
        list(range(96, 120)),
    ]
    assert out.video_frames_decoded <= 3 * 24 + 3  # only the clips, no lead-ins here


def test_uniform_clip_ranges_spacing():
    r = uniform_clip_ranges(0.0, 10.0, 5, 2.0)
    starts = np.array([s for s, _ in r])
    assert starts[0] == 0.0 and r[-1][1] == 10.0
    assert np.diff(starts) == pytest.approx([2.0] * 4)
    assert uniform_clip_ranges(1.0, 3.0, 2, 5.0) == [(1.0, 4.0), (1.0, 4.0)]


def test_random_clips_use_only_the_given_rng(video):
    np.random.seed(0)
    a = random_clip_ranges(0.0, 5.0, 3, 1.0, np.random.default_rng(7))
    np.random.seed(1)
    b = random_clip_ranges(0.0, 5.0, 3, 1.0, np.random.default_rng(7))
    assert a == b and a != random_clip_ranges(0.0, 5.0, 3, 1.0, np.random.default_rng(8))
    out = AVDecoder(video).get_clips_random(2, 0.5, np.random.default_rng(7))
    for clip, (s, e) in zip(out.video_clips, out.video_timestamps):
        assert clip.shape[0] == 12 and e - s == pytest.approx(0.5, abs=TOL)


def test_single_frames_uniform(video):
    out = AVDecoder(video).get_single_frames_uniform(5)
    assert out.video_clips[0].shape == (5, 3, 48, 64)
    assert _indices(out.video_clips[0]) == [0, 30, 60, 89, 119]
    assert out.video_frame_times[0].numpy() == pytest.approx(
        np.array([0, 30, 60, 89, 119]) / FPS, abs=TOL
    )


def test_get_video(video):
    out = AVDecoder(video).get_video()
    assert _indices(out.video_clips[0]) == list(range(N))
    assert out.audio_clips == [] and out.audio_sample_rate is None


# -- audio -----------------------------------------------------------------------------------


def test_audio_clips_resampled(av_file):
    dec = AVDecoder(av_file)
    out = dec.get_clips(None, audio_clip_ranges=[(1.0, 2.0), (0.25, 0.75)], audio_sample_rate=16000)
    assert out.audio_sample_rate == 16000
    assert [a.shape for a in out.audio_clips] == [(2, 16000), (2, 8000)]
    assert all(a.dtype == torch.float32 for a in out.audio_clips)
    assert out.audio_timestamps[0] == pytest.approx((1.0, 2.0), abs=1e-4)
    a = out.audio_clips[0]
    # the tone: amplitude 0.5 in channel 0, 0.25 in channel 1
    assert a[0].abs().max() == pytest.approx(0.5, abs=0.02)
    assert a[1].abs().max() == pytest.approx(0.25, abs=0.02)
    assert out.video_clips == [] and dec.frames_decoded == 0


def test_audio_channels_and_samples_unit(av_file):
    out = AVDecoder(av_file).get_clips(
        None, audio_clip_ranges=[(0, 4410)], audio_unit="samples", audio_channels=1
    )
    assert out.audio_clips[0].shape == (1, 4410)
    assert out.audio_timestamps[0] == pytest.approx((0.0, 0.1), abs=1e-4)


def test_whole_audio_and_video_with_audio(av_file):
    dec = AVDecoder(av_file)
    audio = dec.get_audio(audio_sample_rate=8000)
    assert audio.audio_clips[0].shape == (2, 40000)
    both = dec.get_video_with_audio(audio_sample_rate=22050, audio_channels=1)
    assert both.video_clips[0].shape == (N, 3, 48, 64)
    assert both.audio_clips[0].shape == (1, 5 * 22050)


def test_uniform_clips_with_audio(av_file):
    out = AVDecoder(av_file).get_clips_uniform(
        2, 1.0, request_audio=True, audio_sample_rate=16000, audio_channels=1
    )
    assert [a.shape for a in out.audio_clips] == [(1, 16000), (1, 16000)]
    assert out.audio_timestamps[1] == pytest.approx((4.0, 5.0), abs=TOL)
    assert out.video_timestamps[1] == pytest.approx((4.0, 5.0), abs=TOL)


def test_aac_in_mp4_sample_counts():
    data = write_video(
        None, num_frames=48, fps=FPS, audio_codec="aac", audio_sample_rate=44100, audio_channels=2
    )
    out = AVDecoder(data).get_clips(
        [(0.5, 1.5)], audio_clip_ranges=[(0.5, 1.5)], audio_sample_rate=16000, audio_channels=1
    )
    assert out.audio_clips[0].shape == (1, 16000)
    assert _indices(out.video_clips[0]) == list(range(12, 36))


def test_audio_only_file_has_no_video():
    dec = AVDecoder(write_audio(None, seconds=1.0, sample_rate=8000), key="only-audio")
    assert dec.get_audio().audio_clips[0].shape == (1, 8000)
    with pytest.raises(BadSampleError, match="only-audio"):
        dec.get_video()


# -- limits, corrupt input, threads ---------------------------------------------------------


@pytest.mark.parametrize(
    "limits, word",
    [
        (DecodeLimits(max_av_duration_s=4.0), "max_av_duration_s"),
        (DecodeLimits(max_video_frames=100), "max_video_frames"),
        (DecodeLimits(max_video_pixels=64 * 47), "max_video_pixels"),
    ],
)
def test_limits(video, limits, word):
    dec = AVDecoder(video, path="shard-3.tar", key="shard-3/0042", limits=limits)
    with pytest.raises(BadSampleError, match=word) as info:
        dec.get_clips([(0.0, 0.5)])
    assert info.value.key == "shard-3/0042" and info.value.path == "shard-3.tar"
    assert dec.frames_decoded == 0
    with pytest.raises(BadSampleError, match=word):  # known metadata: refused at construction
        AVDecoder(video, metadata=probe_av(video), key="k", limits=limits)


def test_limits_off():
    data = write_video(None, num_frames=12, fps=FPS)
    lim = DecodeLimits(max_av_duration_s=None, max_video_frames=None, max_video_pixels=None)
    assert AVDecoder(data, limits=lim).get_video().video_clips[0].shape[0] == 12


@pytest.mark.parametrize("kind", ["garbage", "empty", "truncated"])
def test_corrupt_input_names_the_key(kind):
    data = write_video(None, num_frames=48, fps=FPS)
    bad = {
        "garbage": os.urandom(4096),
        "empty": b"",
        "truncated": data[: len(data) // 3],
    }[kind]
    with pytest.raises(BadSampleError) as info:
        AVDecoder(bad, path="/data/s.tar", key="s/000007").get_clips([(0.0, 1.0)])
    assert "s/000007" in str(info.value) and "/data/s.tar" in str(info.value)
    with pytest.raises(BadSampleError, match="s/000007"):
        probe_av(bad, key="s/000007")


def test_av_open_turns_threads_off():
    data = write_video(None, num_frames=24, fps=FPS, codec="libx264", width=160, height=128)
    with av_open(data) as container:
        ctx = container.streams.video[0].codec_context
        assert ctx.thread_count == 1 and ctx.thread_type.name == "NONE"
        before = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 0
        n = sum(1 for _ in container.decode(video=0))
        after = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 0
    assert n == 24 and after <= before


# -- with the transform chain ---------------------------------------------------------------


def test_decode_then_opensora_chain(video):
    dec = AVDecoder(video)
    cfg = VideoTransformConfig(num_frames=8, height=16, width=16, stride=2, temporal="first")
    clips = dec.get_clips_uniform(2, 1.0).video_clips
    batch = stack_videos([video_transform(cfg, c) for c in clips])
    assert batch.shape == (2, 3, 8, 16, 16) and batch.dtype == torch.float32
    assert batch.min() >= -1.0 and batch.max() <= 1.0
    # undo the normalization: the kept frames are every second frame of each clip
    frames = ((batch[1].permute(1, 0, 2, 3) + 1) * 127.5).round().clamp(0, 255)
    assert [frame_index(f) for f in frames] == list(range(96, 112, 2))
    assert not math.isnan(float(batch.sum()))


# -- module structure -----------------------------------------------------------------------

PYAV_MODULES = {"decoder", "audio", "probe", "video"}  # fpipe/decode/av/<name>.py


def test_only_the_av_modules_import_pyav():
    """PyAV is imported by decode/av/decoder.py, probe.py, video.py and audio.py only;
    records.py and ranges.py (read by the index and the plan) stay PyAV-free."""
    import ast
    import re
    from pathlib import Path

    import fpipe

    root = Path(fpipe.__file__).parent
    importers = set()
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if not re.search(r"\bav\b", text):
            continue  # no word "av": no import of av or av.x (parsing every file took seconds)
        for node in ast.walk(ast.parse(text)):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            if any(n == "av" or n.startswith("av.") for n in names):
                importers.add(path.relative_to(root).as_posix())
    assert importers == {f"decode/av/{m}.py" for m in PYAV_MODULES}


def test_the_index_side_of_av_loads_no_pyav():
    """Reading AV metadata from an index (records, ranges, av_meta) must not import PyAV: the
    package fpipe.decode.av loads its decoder names on first use."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import fpipe.decode.av.records, fpipe.decode.av.ranges, fpipe.storage.read.av_meta\n"
        "assert 'av' not in sys.modules, 'PyAV imported'\n"
        "from fpipe.decode.av import AVDecoder\n"
        "assert 'av' in sys.modules and AVDecoder.__module__ == 'fpipe.decode.av.decoder'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
