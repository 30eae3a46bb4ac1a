"""Non-reference frames outside every requested range are passed over undecoded, and the
frames a request returns are those of a full decode, bit for bit.

The media are x264 with B-frames (three in a row, the middle one a reference: about half the
frames are non-reference), in MP4, in Matroska (millisecond time base), with a variable frame
rate, and in AVI (no presentation timestamps on its packets: skipping must stand down), and
x265 (HEVC) with B-frames in MP4. The reference is the same request with skipping turned off.
"""

from __future__ import annotations

from unittest import mock

import av
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fpipe.decode.av.video as av_video
from fpipe.decode.av.decoder import AVDecoder, probe_av
from fpipe.encode.video import VideoTransformConfig
from fpipe.encode.video_task import VideoTaskEncoder
from fpipe.samples import CaptionedVideoSample
from tests.decode.av_helpers import frame_index, write_video

N, FPS, GOP = 72, 24, 24
BF = {"bf": "3", "b-pyramid": "normal"}
VFR_PTS = [0]
for i in range(N - 1):
    VFR_PTS.append(VFR_PTS[-1] + 1 + (i * 7) % 3)  # steps of 1 to 3 ticks of 1/24 s

X265 = {"x265-params": "bframes=3:b-pyramid=1:scenecut=0:log-level=error"}
MEDIA = {
    "mp4": dict(container_format="mp4"),
    "mkv": dict(container_format="matroska"),
    "vfr-mkv": dict(container_format="matroska", pts=VFR_PTS),
    "avi": dict(container_format="avi"),
    "hevc-mp4": dict(container_format="mp4", codec="libx265", options=X265),
}


@pytest.fixture(scope="module", params=sorted(MEDIA))
def media(request):
    kw = {"codec": "libx264", "options": BF, **MEDIA[request.param]}
    if kw["codec"] not in av.codecs_available:
        pytest.skip(f"{kw['codec']} not available")
    data = write_video(None, num_frames=N, fps=FPS, gop=GOP, **kw)
    return request.param, data, probe_av(data)


def _get(data, meta, ranges, skipping=True, **kw):
    return AVDecoder(data, metadata=meta).get_clips(ranges, skip_unneeded_frames=skipping, **kw)


def _assert_same(a, b):
    assert len(a.video_clips) == len(b.video_clips)
    for x, y in zip(a.video_clips, b.video_clips):
        assert x.shape == y.shape and torch.equal(x, y)
    for x, y in zip(a.video_frame_times, b.video_frame_times):
        assert torch.equal(x, y)
    assert a.video_timestamps == b.video_timestamps


def test_strided_frames_skip_half_the_lead_in_and_gaps(media):
    name, data, meta = media
    ranges = [(i, i) for i in range(30, 62, 4)]  # OpenSora's stride 4, from mid-interval
    out = _get(data, meta, ranges, video_unit="frames")
    full = _get(data, meta, ranges, skipping=False, video_unit="frames")
    _assert_same(out, full)
    _assert_same(_get(data, meta, ranges, video_unit="frames", codec_threads=2), full)
    assert [frame_index(c[0]) for c in out.video_clips] == [i for i, _ in ranges]
    assert full.video_frames_skipped == 0
    if name == "avi":  # no packet pts: nothing can be placed, so nothing is skipped
        assert out.video_frames_skipped == 0
        return
    # frames 24..58 pass the decoder; of the 27 not kept about half are non-reference
    assert out.video_frames_decoded + out.video_frames_skipped >= full.video_frames_decoded
    assert out.video_frames_skipped >= 8
    assert out.video_frames_decoded <= full.video_frames_decoded - 8


@settings(max_examples=12)
@given(data=st.data())
def test_same_frames_as_a_full_decode(media, data):
    name, video, meta = media
    unit = data.draw(st.sampled_from(["frames", "seconds"]))
    range_end = data.draw(st.sampled_from(["exclusive", "inclusive"]))
    if unit == "frames":
        point = st.integers(0, N + 2).map(float)
    else:
        point = st.floats(0.0, VFR_PTS[-1] / FPS + 0.2, allow_nan=False)
    starts = data.draw(st.lists(point, min_size=1, max_size=6))
    lengths = data.draw(
        st.lists(st.sampled_from([0.0, 0.01, 1.0, 2.0, 0.5]), min_size=6, max_size=6)
    )
    ranges = [(s, s + (d if unit == "seconds" else round(d))) for s, d in zip(starts, lengths)]
    kw = dict(video_unit=unit, range_end=range_end)
    _assert_same(_get(video, meta, ranges, **kw), _get(video, meta, ranges, False, **kw))


def test_a_skipped_frame_that_is_needed_means_a_decode_without_skipping(media):
    """A wrong skip decision (here: every frame called unneeded) costs a second decode,
    never a missing or wrong frame."""
    _, data, meta = media
    ranges = [(i, i + 2) for i in range(30, 62, 8)]
    full = _get(data, meta, ranges, skipping=False, video_unit="frames")
    with mock.patch.object(
        av_video._Cursor, "_unneeded", lambda self, number: lambda t, offset, next_t: True
    ):
        out = _get(data, meta, ranges, video_unit="frames")
    _assert_same(out, full)
    assert out.video_frames_decoded >= full.video_frames_decoded


def test_the_stock_video_encoder_gives_the_same_clips(media):
    """``VideoTaskEncoder`` (16 frames at stride 3, OpenSora's defaults otherwise) returns the
    same tensors whether or not frames are passed over."""
    _, data, meta = media
    enc = VideoTaskEncoder(VideoTransformConfig(num_frames=16, height=32, width=32, stride=3))

    def encode(seed):
        video = AVDecoder(data, metadata=meta, key="k")
        sample = CaptionedVideoSample(__key__="k", __restore_key__=(), video=video, caption="c")
        return enc.encode_sample(sample, np.random.default_rng(seed)), video.frames_skipped

    skipped = 0
    for seed in range(3):
        got, n = encode(seed)
        with mock.patch.object(av_video, "SKIPPING_CODECS", frozenset()):
            want, none = encode(seed)
        assert torch.equal(got.video, want.video) and none == 0
        assert got.frame_indices.tolist() == want.frame_indices.tolist()
        skipped += n
    assert skipped > 0 or media[0] == "avi"
