"""``megatron.energon.av`` on fpipe: Energon's audio and video names over :mod:`fpipe.decode.av`.

Names load on first use, so importing this module does not import PyAV or torch.
"""

from __future__ import annotations

from fpipe._lazy import lazy_exports

#: Energon name -> the fpipe module that defines it.
_LAZY = {
    "AVDecoder": "fpipe.decode.av.energon",  # EnergonAVDecoder: Energon's output
    # Energon's megatron.energon.av.av_reader.AVProbeIndex
    "AVProbeIndex": "fpipe.decode.av.probe_index",
    # Energon's AVData, AVWebdatasetDecoder and free functions, as Energon 7.4 defines them
    "AVData": "fpipe.decode.av.energon",
    "AVWebdatasetDecoder": "fpipe.decode.av.energon",
    "get_clips_uniform": "fpipe.decode.av.energon",
    "get_single_frames_uniform": "fpipe.decode.av.energon",
}

__all__ = sorted(_LAZY)

#: A package, so Energon's module paths below it (``fpipe.energon.av.utils``, ``.av_decoder``,
#: ``.av_data``, ``.av_reader``) import: :mod:`fpipe.energon._paths` makes them.
__path__: list[str] = []

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
