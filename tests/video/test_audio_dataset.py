"""Audio in batches, end to end: an audio-only dataset (FLAC members) through prepare,
get_train_dataset and the loader with AudioTaskEncoder (random clips, whole files padded with
lengths), and video batches whose audio is aligned with the frames they kept.

The audio is a ramp whose value encodes its own time (``t / 10``), so a test can read back
where on the file's timeline each sample of a batch came from.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import fpipe
from fpipe.core.errors import ConfigError
from fpipe.encode.audio import AudioBatch, AudioConfig, AudioTaskEncoder
from fpipe.encode.video import VideoTransformConfig
from fpipe.encode.video_task import VideoBatch, VideoTaskEncoder
from fpipe.storage import prepare_dataset
from tests.decode.av_helpers import write_audio, write_video
from tests.storage.helpers import write_tar

RATE = 8000
LENGTHS = [1.0, 0.75, 1.25, 0.6, 1.5, 0.9]  # seconds


def ramp(seconds: float, rate: int = RATE, start: float = 0.0) -> np.ndarray:
    """``float32 [1, n]``: sample ``i`` holds ``(start + i / rate) / 10``."""
    n = int(round(seconds * rate))
    return ((start + np.arange(n) / rate) / 10).astype(np.float32)[None]


@pytest.fixture(scope="module")
def audio_ds(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("audio_shards")
    samples = []
    for i, sec in enumerate(LENGTHS):
        data = write_audio(
            None, samples=ramp(sec), sample_rate=RATE, codec="flac", container_format="flac"
        )
        samples.append((f"{i:03d}", {"flac": data, "txt": f"sound {i}".encode()}))
    write_tar(d / "shard-0.tar", samples)
    rep = prepare_dataset(
        d, fields={"audio": "flac", "caption": "txt"}, sample_type="CaptionedAudioSample"
    )
    assert rep.num_samples == len(LENGTHS) and not rep.problems
    return d


def _batches(path, enc, workers, n=3):
    ds = fpipe.get_train_dataset(
        path,
        batch_size=2,
        seed=3,
        task_encoder=enc,
        shuffle_buffer_size=4,
        max_samples_per_sequence=2,
    )
    loader = fpipe.get_loader(ds, num_workers=workers)
    out = []
    for b in loader:
        out.append(b)
        if len(out) == n:
            return out
    return out


def test_random_clips_through_the_loader(audio_ds):
    enc = AudioTaskEncoder(AudioConfig(sample_rate=RATE, clip_seconds=0.5, clip="random"))
    ref = _batches(audio_ds, enc, 0)
    for b in ref:
        assert isinstance(b, AudioBatch)
        assert b.audio.shape == (2, 1, 4000) and b.audio.dtype == torch.float32
        assert b.audio_lengths.tolist() == [4000, 4000]
        assert all(c.startswith("sound ") for c in b.caption)
        for j in range(2):  # each clip holds the file's samples at its start time
            want = ramp(0.5, start=float(b.audio_start_s[j]))[0]
            assert np.abs(b.audio[j, 0].numpy() - want).max() < 2e-4  # 2 ms of the ramp
    starts = {round(float(s), 4) for b in ref for s in b.audio_start_s}
    assert len(starts) > 2  # random starts really vary
    two = _batches(audio_ds, enc, 2)
    for a, b in zip(ref, two):
        assert torch.equal(a.audio, b.audio) and a.__key__ == b.__key__


def test_whole_files_are_padded_with_lengths(audio_ds):
    enc = AudioTaskEncoder(AudioConfig(sample_rate=16000, channels=2))
    for b in _batches(audio_ds, enc, 0):
        lengths = b.audio_lengths.tolist()
        assert b.audio.shape == (2, 2, max(lengths))
        assert lengths == [round(LENGTHS[int(k[-3:])] * 16000) for k in b.__key__]
        for j, n in enumerate(lengths):
            assert torch.count_nonzero(b.audio[j, :, n:]) == 0  # padding
            assert b.audio[j, :, n - 100 : n].abs().max() > 0  # real audio up to the length


def test_config_is_checked_when_built():
    with pytest.raises(ConfigError, match="clip_seconds"):
        AudioConfig(clip_seconds=0)
    with pytest.raises(ConfigError, match="clip"):
        AudioConfig(clip="middle")
    with pytest.raises(ConfigError, match="AudioConfig"):
        AudioTaskEncoder({"sample_rate": 16000})


def test_video_batch_with_aligned_audio(tmp_path):
    """Each sample's audio covers exactly the frames the clip kept: from the first kept frame's
    time to one frame after the last, zeros where the file has no audio yet."""
    fps, t, stride = 12, 4, 2
    samples = []
    for i in range(4):
        # audio from 0 s; the video starts at 0.25 s in the last two files
        first = 0 if i < 2 else 3
        data = write_video(
            None,
            num_frames=30,
            fps=fps,
            width=32,
            height=24,
            gop=6,
            container_format="matroska",
            audio_codec="pcm_s16le",
            audio_sample_rate=RATE,
            audio_samples=ramp(3.0),
            pts=range(first, first + 30),
        )
        samples.append((f"{i:03d}", {"mkv": data, "txt": f"clip {i}".encode()}))
    write_tar(tmp_path / "shard-0.tar", samples)
    prepare_dataset(
        tmp_path, fields={"video": "mkv", "caption": "txt"}, sample_type="CaptionedVideoSample"
    )
    cfg = VideoTransformConfig(num_frames=t, height=16, width=16, stride=stride, temporal="random")
    enc = VideoTaskEncoder(cfg, audio=AudioConfig(sample_rate=RATE))
    n = int(round(((t - 1) * stride + 1) / fps * RATE))
    for b in _batches(tmp_path, enc, 0, n=2):
        assert isinstance(b, VideoBatch) and b.video.shape == (2, 3, t, 16, 16)
        assert b.audio.shape == (2, 1, n) and b.audio_lengths.tolist() == [n, n]
        for j in range(2):
            t0 = float(b.frame_times[j, 0])
            assert t0 == pytest.approx(
                float(b.frame_indices[j, 0]) / fps
                + (0.25 if b.__key__[j].endswith(("002", "003")) else 0.0),
                abs=2e-3,
            )
            want = ramp(n / RATE, start=t0)[0]
            assert np.abs(b.audio[j, 0].numpy() - want).max() < 2e-4  # 2 ms of the ramp
