"""Decoding forward from a seek without decoding the frames nobody asked for.

Between a keyframe and the frames a clip keeps lie frames that are decoded only to be dropped
(the lead-in, and at a stride of 4 three frames of every four). H.264 and HEVC mark the frames
no other frame predicts from (non-reference frames: with B-frames, about half of them); FFmpeg
drops those without decoding them when their packet is sent with ``skip_frame = NONREF``
(``AVDISCARD_NONREF``). Reference frames are always decoded, so every kept frame has the
pixels of a full decode.

:func:`frames_skipping` reads packets a few ahead of the decoder, so that for each packet it
knows the frame's place in presentation order (its offset from the keyframe, and the pts of
the frame after it), and asks the caller's ``unneeded(t, offset, next_t)`` whether to send it
with ``NONREF``. It gives back every frame in presentation order as ``(pts seconds, frame)``,
with ``None`` for a frame the codec dropped, so counting frames and choosing the frame on
screen at a time work as in a full decode. A dropped frame that turns out to be wanted is the
caller's to detect (a ``None`` it would keep). Whatever the timestamps do not make certain (a
packet without pts, a frame whose pts no packet had, a dropped frame sent after a later one
came out, frames coming out of pts order) raises :class:`SkipUnsafe`: the caller decodes
again without skipping. Skipping is tried only in containers that store presentation times.
"""

from __future__ import annotations

import bisect
import collections
import math
from collections.abc import Callable, Iterator

__all__ = ["SKIPPING_CODECS", "SKIPPING_FORMATS", "SkipUnsafe", "frames_skipping"]

#: Codecs whose FFmpeg decoders drop non-reference frames for ``skip_frame = NONREF``.
SKIPPING_CODECS = frozenset({"h264", "hevc"})
#: Containers that store each packet's presentation time (AVI and raw streams do not: their
#: packets carry decode-order counters, which would misplace a dropped frame).
SKIPPING_FORMATS = frozenset({"mov", "mp4", "matroska", "webm", "mpegts"})
#: Packets read ahead of the decoder: more than any B-frame reordering depth (H.264 allows 16).
_AHEAD = 20
_EPS = 1e-6  # seconds


class SkipUnsafe(Exception):
    """Skipping could give wrong frames or frame numbers here: decode without skipping."""


def frames_skipping(
    container, stream, key_s: float, unneeded: Callable[[float, int, float], bool]
) -> Iterator[tuple]:
    """``(pts seconds, frame or None)`` of ``stream`` from the container's position (just
    after a seek to the keyframe at ``key_s``), in presentation order, not decoding the
    non-reference frames ``unneeded(t, offset, next_t)`` names: ``t`` is the frame's pts in
    seconds, ``offset`` its place after the keyframe in presentation order, ``next_t`` the
    pts of the frame after it (``inf`` where not read yet).

    Raises:
      SkipUnsafe: see the module docstring.
    """
    cc = stream.codec_context
    num, den = stream.time_base.numerator, stream.time_base.denominator
    seen: list[float] = []  # pts seconds of every packet read, sorted
    ahead: collections.deque = collections.deque()
    dropped: list[int] = []  # pts of packets sent with NONREF whose frame has not come out
    sent: set[int] = set()
    last: int | None = None  # pts of the last frame given back
    nonref = False
    packets = container.demux(stream)
    try:
        while True:
            for packet in packets:  # top up the read-ahead
                if packet.size and packet.pts is None:
                    raise SkipUnsafe("a packet without pts")
                if packet.size:
                    bisect.insort(seen, float(packet.pts) * num / den)  # as PyAV's frame.time
                ahead.append(packet)
                if len(ahead) > _AHEAD:
                    break
            if not ahead:
                break
            packet = ahead.popleft()
            if packet.size:  # (the empty packet at the end flushes the decoder)
                pts = packet.pts
                t = float(pts) * num / den
                at = bisect.bisect_left(seen, t)
                offset = at - bisect.bisect_left(seen, key_s - _EPS)
                next_t = seen[at + 1] if at + 1 < len(seen) else math.inf
                skip = unneeded(t, offset, next_t)
                if skip != nonref:
                    cc.skip_frame = "NONREF" if skip else "DEFAULT"
                    nonref = skip
                if skip:
                    if last is not None and pts <= last:
                        raise SkipUnsafe("a frame sent after a later one came out")
                    bisect.insort(dropped, pts)
                sent.add(pts)
            for frame in packet.decode():
                fp = frame.pts
                if fp is None or fp not in sent:
                    raise SkipUnsafe("a frame whose pts no packet had")
                if last is not None and fp <= last:
                    raise SkipUnsafe("frames out of pts order")
                i = bisect.bisect_left(dropped, fp)
                for p in dropped[:i]:  # sent before this frame, never came out: dropped
                    yield float(p) * num / den, None
                if i < len(dropped) and dropped[i] == fp:
                    i += 1  # a reference frame, decoded although NONREF was asked
                del dropped[:i]
                last = fp
                yield frame.time, frame
        for p in dropped:
            yield float(p) * num / den, None
    finally:
        packets.close()
        if nonref:
            cc.skip_frame = "DEFAULT"
