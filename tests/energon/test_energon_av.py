"""``megatron.energon.av`` on fpipe: Energon 7.4's decoder methods, metadata names and free
functions (``megatron/energon/av/av_decoder.py`` and ``utils.py``), on fpipe's one decoder."""

from __future__ import annotations

import io

import pytest
import torch

pytest.importorskip("av")

from fpipe.energon.av import (  # noqa: E402
    AVData,
    AVDecoder,
    AVWebdatasetDecoder,
    get_clips_uniform,
    get_single_frames_uniform,
)
from tests.decode.av_helpers import frame_index, write_audio, write_video  # noqa: E402


@pytest.fixture(scope="module")
def video():
    """3 s at 30 fps (frame i at i / 30 s, encoding i), with 3 s of 16 kHz mono audio."""
    return write_video(None, num_frames=90, fps=30, gop=15, audio_codec="aac")


def _indices(clip):
    return [frame_index(f) for f in clip]


def test_decoder_from_a_stream_and_its_video_clips(video):
    dec = AVDecoder(io.BytesIO(video), suppress_warnings=True)  # Energon builds it on a stream
    clips, stamps = dec.get_video_clips([(0.0, 2.0), (10.0, 11.0), (1.0, 1.0)])
    # Energon: ends are inclusive, a range with no frame gives no clip
    assert [c.shape[0] for c in clips] == [61, 1]
    assert _indices(clips[0]) == list(range(61)) and _indices(clips[1]) == [30]
    assert stamps[0] == pytest.approx((0.0, 61 / 30)) and clips[0].shape[1:] == (3, 48, 64)
    frames, _ = dec.get_video_clips([(10, 12)], video_unit="frames", video_out_frame_size=(32, 24))
    assert _indices(frames[0]) == [10, 11, 12] and frames[0].shape[2:] == (24, 32)
    audio, astamps = dec.get_audio_clips([(0.5, 1.0)])
    assert audio[0].shape == (1, 8000) and astamps[0][0] == pytest.approx(0.5)
    assert dec.stream.read(4) == video[:4]  # Energon's `stream` attribute


def test_get_frames_decodes_the_whole_file(video):
    whole = AVDecoder(video).get_frames()
    assert isinstance(whole, AVData) and len(whole.video_clips) == 1 and whole.audio_clips == []
    assert _indices(whole.video_clips[0]) == list(range(90))
    both = AVDecoder(video).get_frames(video_decode_audio=True)
    assert both.audio_clips[0].shape[0] == 1 and both.audio_clips[0].shape[1] >= 47000
    sound = AVDecoder(write_audio(None, seconds=0.5)).get_frames()  # an audio-only file
    assert sound.video_clips == [] and sound.audio_clips[0].shape == (1, 8000)


def test_metadata_has_energons_field_names(video):
    dec = AVDecoder(video)
    meta = dec.get_metadata()
    assert meta.video_duration == pytest.approx(3.0) and meta.video_num_frames == 90
    assert meta.video_fps == pytest.approx(30.0)
    assert (meta.video_width, meta.video_height) == (64, 48)
    assert meta.audio_sample_rate == 16000 and meta.audio_channels == 1
    assert meta.audio_duration == pytest.approx(3.0, abs=0.1)
    assert meta.audio_num_samples is None  # Energon counts them only when asked
    video_only = dec.get_metadata(get_audio=False)
    assert video_only.audio_sample_rate is None and video_only.video_num_frames == 90
    assert dec.get_metadata(get_video=False).video_duration is None
    assert dec.get_video_duration(get_frame_count=True) == (pytest.approx(3.0), 90)
    assert dec.get_video_duration() == (pytest.approx(3.0), None)
    assert dec.get_audio_duration() == pytest.approx(3.0, abs=0.1)
    assert dec.get_video_fps() == pytest.approx(30.0)
    assert dec.get_audio_samples_per_second() == 16000
    assert dec.has_video_stream() and dec.has_audio_stream()
    assert not AVDecoder(write_audio(None)).has_video_stream()


def test_free_functions_follow_energon(video):
    dec = AVDecoder(video)
    # single frames on screen at linspace(0.5 / fps, duration - 0.5 / fps, n) s:
    # 0.017, 1.006, 1.994, 2.983 s at 30 fps are frames 0, 30, 59, 89
    frames, times = get_single_frames_uniform(dec, 4, return_timestamps=True)
    assert frames.shape == (4, 3, 48, 64) and _indices(frames) == [0, 30, 59, 89]
    assert times == pytest.approx([0.0, 30 / 30, 59 / 30, 89 / 30])
    small = get_single_frames_uniform(dec, 2, video_out_frame_size=(32, 24))
    assert small.shape == (2, 3, 24, 32)
    # clips of 1 s starting at linspace(0, duration - 1, 3), ends inclusive
    out = get_clips_uniform(dec, 1.0, 3, request_video=True, request_audio=True)
    assert [c.shape[0] for c in out.video_clips] == [31, 31, 30]
    assert [frame_index(c[0]) for c in out.video_clips] == [0, 30, 60]
    assert [a.shape for a in out.audio_clips] == [(1, 16000)] * 3
    with pytest.raises(ValueError, match="at least one of video or audio"):
        get_clips_uniform(dec, 1.0, 3)


def test_avdata_and_the_webdataset_decoder(video):
    empty = AVData(video_clips=[], video_timestamps=[], audio_clips=[], audio_timestamps=[])
    assert empty.video_clips == [] and empty.video_frame_times == []
    lazy = AVWebdatasetDecoder(video_decode_audio=False)
    assert isinstance(lazy("clip.mp4", video), AVDecoder) and lazy("txt", b"hello") is None
    decoded = AVWebdatasetDecoder(video_decode_audio=True, av_decode="torch")("mp4", video)
    assert isinstance(decoded, AVData) and isinstance(decoded.video_clips[0], torch.Tensor)
    assert len(decoded.audio_clips) == 1
    with AVWebdatasetDecoder(False, av_decode="pyav")("mp4", video) as container:
        assert len(container.streams.video) == 1


def test_16_bit_pcm_audio_is_int16_as_in_energon():
    import numpy as np

    from fpipe.decode.av import AVDecoder as FpipeDecoder

    wav = write_audio(None, seconds=0.5, channels=2)  # pcm_s16le
    own = FpipeDecoder(wav).get_audio().audio_clips[0]
    energon = AVDecoder(io.BytesIO(wav)).get_audio().audio_clips[0]
    assert own.dtype == torch.float32  # fpipe's own decoder keeps float32 in [-1, 1]
    assert energon.dtype == torch.int16 and energon.shape == own.shape == (2, 8000)
    # the same samples: int16 PCM is float32 * 32768, exactly
    assert np.array_equal(energon.numpy(), np.rint(own.numpy() * 32768).astype(np.int16))
    clips, _ = AVDecoder(wav).get_audio_clips([(0.1, 0.2)])
    assert clips[0].dtype == torch.int16
    flac = write_audio(None, seconds=0.5, codec="flac", container_format="flac")
    assert AVDecoder(flac).get_audio().audio_clips[0].dtype == torch.int16


def test_aac_audio_stays_float32(video):
    assert AVDecoder(video).get_audio().audio_clips[0].dtype == torch.float32


def test_get_clips_leaves_out_ranges_past_the_end(video):
    from fpipe.decode.av import AVDecoder as FpipeDecoder

    ranges = [(0.0, 0.5), (10.0, 11.0), (1.0, 1.5)]
    out = AVDecoder(video).get_clips(ranges, range_end="inclusive")
    assert [c.shape[0] for c in out.video_clips] == [16, 16] and len(out.video_timestamps) == 2
    kept = FpipeDecoder(video).get_clips(ranges, range_end="inclusive")  # fpipe's: one per range
    assert [c.shape[0] for c in kept.video_clips] == [16, 0, 16]
    late = get_clips_uniform(AVDecoder(video), 1.0, 3, request_video=True)
    assert all(c.shape[0] > 0 for c in late.video_clips)


def test_get_metadata_is_energons_dataclass(video):
    import dataclasses

    import av

    from fpipe.energon import AVMetadata

    dec = AVDecoder(io.BytesIO(video))
    meta = dec.get_metadata(get_audio_num_samples=True)
    # Energon's tests compare records field by field: type(a) is type(b), dataclasses.fields
    assert type(meta) is AVMetadata and dataclasses.is_dataclass(meta)
    assert [f.name for f in dataclasses.fields(meta)] == [
        "video_duration",
        "video_num_frames",
        "video_fps",
        "video_width",
        "video_height",
        "audio_duration",
        "audio_channels",
        "audio_sample_rate",
        "audio_num_samples",
    ]
    # counted by decoding the audio, as Energon does: AAC's last frame runs past the
    # duration (48128 samples where 3 s at 16 kHz are 48000)
    with av.open(io.BytesIO(video)) as container:
        decoded = sum(frame.samples for frame in container.decode(audio=0))
    assert meta.audio_num_samples == decoded != round(meta.audio_duration * 16000)
    assert dec.get_metadata(get_audio=False, get_audio_num_samples=True).audio_num_samples is None
    assert meta == AVMetadata(
        video_duration=meta.video_duration,
        video_num_frames=90,
        video_fps=30.0,
        video_width=64,
        video_height=48,
        audio_duration=meta.audio_duration,
        audio_channels=1,
        audio_sample_rate=16000,
        audio_num_samples=decoded,
    )


def test_audio_ranges_past_the_end_are_left_out(video):
    from fpipe.decode.av import AVDecoder as FpipeDecoder

    ranges = [(0.5, 0.6), (5.0, 5.1), (1.0, 1.1)]  # the audio ends at 3 s
    out = AVDecoder(video).get_clips(None, audio_clip_ranges=ranges)
    assert [c.shape for c in out.audio_clips] == [(1, 1600), (1, 1600)]
    assert [round(start, 3) for start, _ in out.audio_timestamps] == [0.5, 1.0]
    own = FpipeDecoder(video).get_clips(None, audio_clip_ranges=ranges)  # fpipe's: one per range
    assert [c.shape for c in own.audio_clips] == [(1, 1600), (1, 0), (1, 1600)]
    clips, stamps = AVDecoder(video).get_audio_clips(ranges)
    assert len(clips) == len(stamps) == 2


def test_decoder_pickles(video):
    import pickle

    dec = AVDecoder(io.BytesIO(video))
    before = dec.get_metadata()
    again = pickle.loads(pickle.dumps(dec))
    assert type(again) is type(dec) and again.get_metadata() == before
    frames = get_single_frames_uniform(again, 4, video_out_frame_size=(32, 24))
    assert frames.shape == (4, 3, 24, 32)


def test_the_guides_imports_and_calls(video):
    # Energon's data-decoding guide and API pages import these from megatron.energon.av and
    # its modules; the guide's call, keyword for keyword
    from fpipe.energon.av.av_data import AVData as data_cls
    from fpipe.energon.av.av_decoder import AVDecoder as decoder_cls
    from fpipe.energon.av.utils import get_clips_uniform as uniform
    from fpipe.energon.av.utils import get_single_frames_uniform as single

    assert (data_cls, decoder_cls, uniform, single) == (
        AVData,
        AVDecoder,
        get_clips_uniform,
        get_single_frames_uniform,
    )
    av_decoder = AVDecoder(video)
    dat = uniform(av_decoder=av_decoder, num_clips=5, clip_duration_seconds=0.5, request_audio=True)
    assert [a.shape for a in dat.audio_clips] == [(1, 8000)] * 5
    assert dat.audio_timestamps[0][0] == pytest.approx(0.0)
    frames = single(av_decoder=av_decoder, num_frames=3)  # Energon's defaults for the rest
    assert frames.shape == (3, 3, 48, 64) and _indices(frames) == [0, 45, 89]
