"""Energon's ``AVProbeIndex`` (``megatron.energon.av.av_reader``): the packets of a video
stream found by demuxing it once, with their timestamps and keyframe flags, for seeking in
containers whose index PyAV does not fill on open.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_right
from typing import Any

__all__ = ["AVProbeIndex", "AVProbeIndexEntry"]


@dataclasses.dataclass(frozen=True)
class AVProbeIndexEntry:
    """One packet: its presentation timestamp (stream time base) and whether it is a keyframe."""

    timestamp: int
    is_keyframe: bool


class AVProbeIndex:
    """The packets of video stream ``stream_idx`` of an open PyAV ``container`` in demux
    order (packets without a timestamp left out); the container is sought back to its start."""

    def __init__(self, container: Any, stream_idx: int = 0):
        self._entries = [
            AVProbeIndexEntry(int(p.pts), bool(p.is_keyframe))
            for p in container.demux(video=stream_idx)
            if p.pts is not None
        ]
        self._keyframes = [e.timestamp for e in self._entries if e.is_keyframe]
        container.seek(0)

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, idx: int) -> AVProbeIndexEntry:
        return self._entries[idx]

    def search_timestamp(
        self, timestamp: int, *, backward: bool = True, any_frame: bool = False
    ) -> int:
        """The entry index of the keyframe (``any_frame``: of any packet) at or before
        ``timestamp`` (``backward=False``: at or after it); -1 when there is none after it,
        0 when there is none before it."""
        stamps = [e.timestamp for e in self._entries] if any_frame else self._keyframes
        if not stamps:
            return -1
        if backward:
            pos = bisect_right(stamps, timestamp) - 1
            if pos < 0:
                return 0
        else:
            pos = bisect_right(stamps, timestamp - 1)
            if pos >= len(stamps):
                return -1
        if any_frame:
            return pos
        found = stamps[pos]
        return next(
            i for i, e in enumerate(self._entries) if e.is_keyframe and e.timestamp == found
        )
