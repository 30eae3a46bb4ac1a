"""Audio-only files (FLAC, WAV, MP3, Opus) and audio options: clips with exact sample counts,
uniform clips, full decode, resampling and channel layouts."""

from __future__ import annotations

import io
import math

import av
import numpy as np
import pytest
import torch

from fpipe.core.errors import BadSampleError
from fpipe.decode.av.decoder import AVDecoder, audio_layout, probe_av
from tests.decode.av_helpers import sine, write_audio

# (encoder, container, rate): lossless first, then lossy codecs with priming/padding
AUDIO_KINDS = [
    ("flac", "flac", 16000),
    ("pcm_s16le", "wav", 22050),
    ("libopus", "ogg", 48000),
    ("libmp3lame", "mp3", 16000),
]


@pytest.fixture(scope="module", params=AUDIO_KINDS, ids=lambda k: k[1])
def audio(request):
    codec, fmt, rate = request.param
    if codec not in av.codecs_available:
        pytest.skip(f"{codec} not available")
    return (
        write_audio(
            None, seconds=2.0, sample_rate=rate, channels=2, codec=codec, container_format=fmt
        ),
        rate,
        codec,
    )


def _reference(data: bytes) -> np.ndarray:
    with av.open(io.BytesIO(data)) as c:
        rs = av.AudioResampler(format="fltp")
        parts = [f.to_ndarray() for fr in c.decode(audio=0) for f in rs.resample(fr)]
    return np.concatenate(parts, axis=1)


def test_full_decode_matches_pyav(audio):
    data, rate, _ = audio
    out = AVDecoder(data).get_audio()
    ref = _reference(data)
    assert out.audio_sample_rate == rate and out.video_clips == []
    assert out.audio_clips[0].shape == ref.shape and out.audio_clips[0].dtype == torch.float32
    assert np.array_equal(out.audio_clips[0].numpy(), ref)


def test_clips_have_exact_sample_counts(audio):
    data, rate, _ = audio
    dec = AVDecoder(data)
    s0 = probe_av(data).audio_start_s  # 0, or the MP3 encoder delay (0.069 s)
    ranges = [(s0, s0 + 0.5), (0.123, 0.456), (1.0, 1.95), (1.7, 1.7)]
    out = dec.get_clips(None, audio_clip_ranges=ranges)
    assert [a.shape for a in out.audio_clips] == [(2, round((e - s) * rate)) for s, e in ranges]
    up = dec.get_clips(None, audio_clip_ranges=ranges, audio_sample_rate=44100, audio_channels=1)
    assert [a.shape for a in up.audio_clips] == [(1, round((e - s) * 44100)) for s, e in ranges]


def test_uniform_clips_on_an_audio_only_file(audio):
    data, rate, _ = audio
    dec = AVDecoder(data, key="only-audio")
    out = dec.get_clips_uniform(
        5, 0.3, request_audio=True, audio_sample_rate=16000, audio_channels=1
    )
    assert out.video_clips == [] and len(out.audio_clips) == 5
    assert all(a.shape == (1, 4800) for a in out.audio_clips)
    meta = probe_av(data)
    starts = [s for s, _ in out.audio_timestamps]
    assert starts[0] == pytest.approx(meta.audio_start_s, abs=1e-3)
    assert out.audio_timestamps[-1][1] == pytest.approx(
        meta.audio_start_s + meta.audio_duration_s, abs=2e-3
    )
    with pytest.raises(BadSampleError, match="only-audio.*no video stream"):
        dec.get_clips_uniform(5, 0.3)


def test_clip_content_is_the_requested_time(audio):
    """The samples of a clip are the ones at its time in a full decode (lossless codecs)."""
    data, rate, codec = audio
    if codec not in ("flac", "pcm_s16le"):
        pytest.skip("lossy codecs shift samples by their priming")
    ref = _reference(data)
    clip = AVDecoder(data).get_clips(None, audio_clip_ranges=[(0.25, 0.75)]).audio_clips[0]
    a = round(0.25 * rate)
    assert np.array_equal(clip.numpy(), ref[:, a : a + clip.shape[1]])
    tone = sine(ref.shape[1], rate, 2)
    assert np.abs(ref - tone).max() < 1e-3  # and the file holds the tone written


def test_channel_layouts_and_samples_unit():
    data = write_audio(
        None, seconds=1.0, sample_rate=8000, channels=1, codec="flac", container_format="flac"
    )
    dec = AVDecoder(data)
    st = dec.get_clips(
        None, audio_clip_ranges=[(0, 800)], audio_unit="samples", audio_channels="stereo"
    )
    assert st.audio_clips[0].shape == (2, 800)
    assert torch.allclose(st.audio_clips[0][0], st.audio_clips[0][1])
    six = dec.get_clips(None, audio_clip_ranges=[(0.0, 0.1)], audio_channels=6)
    assert six.audio_clips[0].shape == (6, 800)
    assert audio_layout(2) == "stereo" and audio_layout("5.1") == "5.1"
    with pytest.raises(ValueError, match="audio_channels"):
        dec.get_audio(audio_channels=0)


def test_past_end_and_whole_ranges():
    data = write_audio(None, seconds=1.0, sample_rate=8000, codec="flac", container_format="flac")
    out = AVDecoder(data).get_clips(
        None, audio_clip_ranges=[(0.9, 1.5), (1.2, 1.4), (0.5, math.inf), (-0.5, 0.25)]
    )
    assert [a.shape[1] for a in out.audio_clips] == [800, 0, 4000, 2000]
    assert out.audio_timestamps[3] == pytest.approx((0.0, 0.25))


def test_energon_methods_leave_out_audio_ranges_past_the_end():
    # fpipe's own decoder, Energon's method names: get_audio_clips leaves a range that starts
    # at or after the audio's end out, as get_video_clips does a range with no frame (and as
    # Energon does); get_clips keeps one entry per range.
    data = write_audio(None, seconds=2.0, sample_rate=16000, channels=1, codec="flac",
                       container_format="flac")  # fmt: skip
    dec = AVDecoder(data)
    ranges = [(0.5, 0.6), (2.5, 2.6), (1.9, 2.5), (1.0, 1.1)]
    clips, stamps = dec.get_audio_clips(ranges)
    assert [c.shape for c in clips] == [(1, 1600), (1, 1600), (1, 1600)]
    assert [round(start, 3) for start, _ in stamps] == [0.5, 1.9, 1.0]
    own = dec.get_clips(None, audio_clip_ranges=ranges)
    assert [c.shape[-1] for c in own.audio_clips] == [1600, 0, 1600, 1600]
