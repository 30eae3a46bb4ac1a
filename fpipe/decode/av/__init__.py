"""Audio and video with PyAV: the lazy :class:`AVDecoder`, probing, clip ranges and frame decoding.

The modules of this package are the only ones in fpipe that import ``av`` (PyAV), and names
load on first use: the index and the plan read :mod:`fpipe.decode.av.records` and
:mod:`fpipe.decode.av.ranges` without importing PyAV.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fpipe._lazy import lazy_exports

if TYPE_CHECKING:
    from fpipe.decode.av.decoder import (
        AVClips,
        AVDecoder,
        AVMetadata,
        AVSource,
        RangeEnd,
        VideoUnit,
        audio_layout,
        av_open,
        check_av_limits,
        check_ranges,
        probe_av,
        random_clip_ranges,
        stream_clip_ranges,
        stream_span,
        uniform_clip_ranges,
        uniform_frame_ranges,
    )

__all__ = [
    "AVClips",
    "AVDecoder",
    "AVMetadata",
    "AVSource",
    "RangeEnd",
    "VideoUnit",
    "audio_layout",
    "av_open",
    "check_av_limits",
    "check_ranges",
    "probe_av",
    "random_clip_ranges",
    "stream_clip_ranges",
    "stream_span",
    "uniform_clip_ranges",
    "uniform_frame_ranges",
]

__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(__all__, "fpipe.decode.av.decoder"))
