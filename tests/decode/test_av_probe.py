"""Probing awkward files: timestamp gaps, millisecond time bases, variable frame rate, audio that
starts before the video, audio-only codecs. Durations end at the end of the last frame and
every keyframe carries its frame number in presentation order."""

from __future__ import annotations

import av
import pytest

from fpipe.decode.av.decoder import probe_av
from tests.decode.av_helpers import write_audio, write_video

GAP_PTS = [0] + list(range(2, 17)) + list(range(18, 40))  # frames 1 and 17 missing, 38 frames
VFR_PTS = [0, 1, 3, 4, 7, 8, 9, 12, 13, 20, 21, 22, 25, 26, 30, 31, 33, 36, 37, 40]


def test_gaps_in_timestamps_avi():
    data = write_video(
        None, num_frames=len(GAP_PTS), fps=30, container_format="avi", gop=8, pts=GAP_PTS
    )
    m = probe_av(data)
    assert m.video_num_frames == len(GAP_PTS)
    # the end of the last frame (pts 39 + 1), not num_frames / fps
    assert m.video_duration_s == pytest.approx(40 / 30)
    assert m.keyframes_s == pytest.approx([GAP_PTS[i] / 30 for i in range(0, len(GAP_PTS), 8)])
    assert m.keyframe_frames == tuple(range(0, len(GAP_PTS), 8))


def test_variable_frame_rate_matroska():
    data = write_video(
        None, num_frames=len(VFR_PTS), fps=30, container_format="matroska", gop=6, pts=VFR_PTS
    )
    m = probe_av(data)
    assert m.video_num_frames == len(VFR_PTS)
    assert m.keyframe_frames == (0, 6, 12, 18)
    assert m.keyframes_s == pytest.approx([VFR_PTS[i] / 30 for i in (0, 6, 12, 18)], abs=1e-3)
    assert m.video_duration_s == pytest.approx(41 / 30, abs=2e-3)


def test_constant_rate_in_millisecond_time_base_keeps_exact_end():
    m = probe_av(write_video(None, num_frames=45, fps=30, container_format="matroska", gop=15))
    assert m.video_duration_s == pytest.approx(1.5, abs=1e-9)
    assert m.keyframe_frames == (0, 15, 30)


def test_b_frames_keyframe_numbers():
    if "libx264" not in av.codecs_available:
        pytest.skip("libx264 not available")
    m = probe_av(
        write_video(None, num_frames=48, fps=24, codec="libx264", gop=12, options={"bf": "2"})
    )
    assert m.video_num_frames == 48 and m.keyframe_frames == (0, 12, 24, 36)


def test_audio_before_video():
    data = write_video(
        None,
        num_frames=24,
        fps=24,
        container_format="matroska",
        audio_codec="pcm_s16le",
        audio_seconds=1.5,
        pts=range(12, 36),
    )
    m = probe_av(data)
    assert m.video_start_s == pytest.approx(0.5) and m.audio_start_s == pytest.approx(0.0)
    assert m.audio_duration_s == pytest.approx(1.5, abs=1e-3)
    assert m.duration_s == pytest.approx(1.5, abs=1e-3)  # audio start to video end


@pytest.mark.parametrize(
    "codec, fmt, rate",
    [
        ("flac", "flac", 16000),
        ("pcm_s16le", "wav", 16000),
        ("libopus", "ogg", 48000),
        ("libmp3lame", "mp3", 16000),
    ],
)
def test_audio_only_durations(codec, fmt, rate):
    if codec not in av.codecs_available:
        pytest.skip(f"{codec} not available")
    m = probe_av(
        write_audio(None, seconds=1.0, sample_rate=rate, codec=codec, container_format=fmt)
    )
    assert m.video_num_frames is None and m.keyframe_frames == ()
    assert m.audio_sample_rate == rate
    # Opus pre-skip is not counted; mp3 packets carry the encoder's padding (one frame)
    tol = 0.08 if codec == "libmp3lame" else 1e-3
    assert m.audio_duration_s == pytest.approx(1.0, abs=tol)
