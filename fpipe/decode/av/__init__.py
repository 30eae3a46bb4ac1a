"""Audio and video with PyAV: the lazy :class:`AVDecoder`, probing, clip ranges and frame decoding.

The modules of this package are the only ones in fpipe that import ``av``.
"""

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
