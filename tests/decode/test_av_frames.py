"""Frame-accurate seeks and Energon's range semantics on awkward containers.

Every file is made here with PyAV: Matroska with its millisecond time base, an AVI-like stream
with gaps in its timestamps, a variable frame rate, x264 with B-frames, and a video whose audio
starts before its first frame. The reference is a plain PyAV decode of every frame: frame ``n``
of a request in frames must be the ``n``-th frame of that decode, whatever the timestamps.
"""

from __future__ import annotations

import av
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fpipe.decode.av.decoder import AVDecoder, probe_av
from tests.decode.av_helpers import frame_index, write_video

GAP_PTS = [0] + list(range(2, 17)) + list(range(18, 45))  # frames 1 and 17 missing
VFR_PTS = np.cumsum([0] + [1 + (i * 7) % 4 for i in range(49)]).tolist()  # steps 1..4

MEDIA = {
    "mkv-ms-timebase": dict(num_frames=60, fps=30, container_format="matroska", gop=10),
    "avi-gaps": dict(num_frames=len(GAP_PTS), fps=30, container_format="avi", gop=8, pts=GAP_PTS),
    "vfr-mkv": dict(
        num_frames=len(VFR_PTS), fps=30, container_format="matroska", gop=6, pts=VFR_PTS
    ),
    "x264-bframes": dict(num_frames=48, fps=24, codec="libx264", gop=12, options={"bf": "2"}),
    "audio-first-mkv": dict(
        num_frames=36,
        fps=24,
        container_format="matroska",
        gop=12,
        pts=range(12, 48),
        audio_codec="pcm_s16le",
        audio_seconds=2.0,
    ),
}


def _reference(data: bytes) -> torch.Tensor:
    """Every frame of a plain PyAV decode, ``uint8 [N, 3, H, W]``."""
    import io

    with av.open(io.BytesIO(data)) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    return torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2)


@pytest.fixture(scope="module", params=sorted(MEDIA))
def media(request):
    kw = MEDIA[request.param]
    if kw.get("codec", "mpeg4") not in av.codecs_available:
        pytest.skip("encoder not available")
    data = write_video(None, width=64, height=48, **kw)
    return request.param, data, _reference(data), kw["gop"]


def test_frame_n_is_the_nth_decoded_frame(media):
    name, data, full, gop = media
    meta = probe_av(data)
    n = full.shape[0]
    assert meta.video_num_frames == n == MEDIA[name]["num_frames"]
    # every frame, in one call (one seek, then forward decoding)
    out = AVDecoder(data, metadata=meta).get_clips([(i, i) for i in range(n)], video_unit="frames")
    for i, clip in enumerate(out.video_clips):
        assert clip.shape[0] == 1 and torch.equal(clip[0], full[i]), f"{name}: frame {i}"
    # single requests, each seeking to its own keyframe
    for i in sorted({1, 2, 3, gop - 1, gop, gop + 1, n // 2, n - 3, n - 1}):
        dec = AVDecoder(data, metadata=meta)
        clip = dec.get_clips([(i, i + 1)], video_unit="frames").video_clips[0]
        assert clip.shape[0] == 1 and torch.equal(clip[0], full[i]), f"{name}: frame {i}"
        assert frame_index(clip[0]) == i
        assert dec.frames_decoded <= gop + 2 + 3, f"{name}: frame {i} not from its keyframe"


def test_frame_ranges_exclusive_and_inclusive(media):
    name, data, full, _ = media
    dec = AVDecoder(data)
    n = full.shape[0]
    a, b = n // 3, n // 3 + 7
    ex = dec.get_clips([(a, b), (n - 2, n + 5), (n, n + 3)], video_unit="frames")
    assert torch.equal(ex.video_clips[0], full[a:b])
    assert torch.equal(ex.video_clips[1], full[n - 2 :])  # past the end: cut at the end
    assert ex.video_clips[2].shape[0] == 0  # starts after the last frame: empty
    inc = dec.get_clips([(a, b), (a, a)], video_unit="frames", range_end="inclusive")
    assert torch.equal(inc.video_clips[0], full[a : b + 1])
    assert torch.equal(inc.video_clips[1], full[a : a + 1])


def test_uniform_frames_match_a_full_decode(media):
    name, data, full, _ = media
    idx = np.round(np.linspace(0, full.shape[0] - 1, 16)).astype(int)
    out = AVDecoder(data).get_single_frames_uniform(16)
    assert torch.equal(out.video_clips[0], full[idx])
    small = AVDecoder(data).get_single_frames_uniform(16, video_out_frame_size=(32, 24))
    ref = F.interpolate(full[idx].float(), size=(24, 32), mode="bilinear", antialias=True)
    mae = (small.video_clips[0].float() - ref).abs().mean().item() / 255.0
    assert mae <= 0.01, f"{name}: MAE {mae:.4f}"


def test_seconds_ranges_follow_timestamps(media):
    """In seconds, a range holds the frames whose pts lies in it, whatever their spacing."""
    name, data, full, _ = media
    meta = probe_av(data)
    out = AVDecoder(data, metadata=meta).get_video()
    times = out.video_frame_times[0].numpy()
    assert torch.equal(out.video_clips[0], full)
    lo, hi = times[5] + 1e-3, times[12] + 1e-3  # from just after frame 5 to just after 12
    clip = AVDecoder(data, metadata=meta).get_clips([(lo, hi)])
    assert torch.equal(clip.video_clips[0], full[6:13])
    energon = AVDecoder(data, metadata=meta).get_clips([(lo, hi)], range_end="inclusive")
    assert torch.equal(energon.video_clips[0], full[5:13])  # + the frame on screen at `lo`
    at = AVDecoder(data, metadata=meta).get_clips([(lo, lo), (times[7], times[7])])
    assert torch.equal(at.video_clips[0], full[5:6]) and torch.equal(at.video_clips[1], full[7:8])


def test_energon_range_end_and_past_end():
    """(0, 2) s at 30 fps: 60 frames by default, Energon's 61 with range_end="inclusive"."""
    data = write_video(None, num_frames=90, fps=30, gop=15)
    dec = AVDecoder(data)
    ex = dec.get_clips([(0.0, 2.0), (2.9, 9.0), (3.0, 4.0), (5.0, 5.0)])
    assert [c.shape[0] for c in ex.video_clips] == [60, 3, 0, 0]
    inc = dec.get_clips([(0.0, 2.0), (1.0, 1.0), (1.01, 1.01)], range_end="inclusive")
    assert [c.shape[0] for c in inc.video_clips] == [61, 1, 1]
    assert [frame_index(c[0]) for c in inc.video_clips[1:]] == [30, 30]
    with pytest.raises(ValueError, match="range_end"):
        dec.get_clips([(0.0, 1.0)], range_end="closed")
    with pytest.raises(ValueError, match="before the start"):
        dec.get_clips([(1.0, 0.5)])


def test_clip_before_a_late_first_frame():
    """The audio starts 0.5 s before the first frame: ranges are on the shared timeline."""
    data = write_video(None, width=64, height=48, **MEDIA["audio-first-mkv"])
    meta = probe_av(data)
    dec = AVDecoder(data, metadata=meta)
    out = dec.get_clips(
        [(0.0, 0.75), (0.2, 0.2)], audio_clip_ranges=[(0.0, 0.75)], audio_sample_rate=8000
    )
    assert [frame_index(f) for f in out.video_clips[0]] == list(range(6))  # pts 0.5 .. 0.708
    assert out.video_clips[1].shape[0] == 0  # nothing on screen yet at 0.2 s
    assert out.audio_clips[0].shape == (1, 6000) and out.audio_timestamps[0][0] == 0.0
    both = dec.get_clips_uniform(2, 0.5, request_audio=True)
    assert [s for s, _ in both.audio_timestamps] == pytest.approx(
        [s for s, _ in both.video_timestamps], abs=1e-3
    )
