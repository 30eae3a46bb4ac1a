"""Energon's ``AVProbeIndex`` (``av/av_reader.py``; the probe tests of its
``tests/test_av_decoder.py``): a video stream's packets by demuxing once, keyframes found by
timestamp."""

from __future__ import annotations

import io

import av

from fpipe.energon.av import AVProbeIndex
from tests.decode.av_helpers import write_video


def test_probe_index_lists_packets_and_finds_keyframes():
    data = write_video(None, num_frames=48, fps=24, gop=12)
    with av.open(io.BytesIO(data)) as container:
        index = AVProbeIndex(container, 0)
        assert len(index) == container.streams.video[0].frames == 48
        keys = [(i, e.timestamp) for i, e in enumerate(index) if e.is_keyframe]
        assert [i for i, _ in keys] == [0, 12, 24, 36]
        for i, ts in keys:
            assert index.search_timestamp(ts) == i
        for (i, a), (j, b) in zip(keys, keys[1:]):
            mid = (a + b) // 2
            assert index.search_timestamp(mid) == i
            assert index.search_timestamp(mid, backward=False) == j
        assert index.search_timestamp(keys[-1][1] + 1, backward=False) == -1
        assert index.search_timestamp(index[5].timestamp, any_frame=True) == 5
        assert next(container.decode(video=0)).pts == 0  # sought back to the start
