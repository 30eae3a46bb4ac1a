"""Typed samples (Captioning, VQA, Interleaved, Video...), the Batch base, and cooking.

What belongs here: user-facing sample and batch types, the allow-list of sample types that
dataset.yaml may name, and cooking raw members into samples (``field_map`` or crude cookers).
Randomness only comes in as an explicit ``rng``; nothing here knows about workers or ranks.
torch is imported lazily (``pin_memory`` / ``to`` of samples and batches, tensor image output).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fpipe._lazy import lazy_exports
from fpipe.samples._cook import (
    Cooker,
    CrudeSample,
    as_image_options,
    cook_crude_sample,
    cook_fields,
    cook_sample,
    decode_members,
    decode_whole_sample,
    make_crude_sample,
)
from fpipe.samples._field_map import (
    FieldMap,
    FieldSource,
    FieldSpec,
    compile_field_map,
    parse_source,
)
from fpipe.samples._types import (
    CaptionedAudioSample,
    CaptionedVideoSample,
    CaptioningSample,
    GPTSample,
    ImageClassificationSample,
    ImageSample,
    InterleavedSample,
    MultiChoiceVQASample,
    OCRSample,
    SimilarityInterleavedSample,
    TextSample,
    TokensSample,
    VideoTextSample,
    VidQASample,
    VQASample,
)
from fpipe.samples.base import BASE_FIELDS, Sample, basic_sample_keys
from fpipe.samples.batch import Batch, map_tensors
from fpipe.samples.registry import (
    joiner_from_name,
    register_joiner,
    register_sample_type,
    sample_type_from_name,
    sample_type_name,
)
from fpipe.samples.source_info import SourceInfo
from fpipe.samples.tensors import PinMemoryMixin

__all__ = [
    "BASE_FIELDS",
    "Batch",
    "CaptionedAudioSample",
    "CaptionedVideoSample",
    "CaptioningSample",
    "Cooker",
    "CrudeSample",
    "FieldMap",
    "FieldSource",
    "FieldSpec",
    "GPTSample",
    "ImageClassificationSample",
    "ImageSample",
    "InterleavedSample",
    "MultiChoiceVQASample",
    "OCRSample",
    "PinMemoryMixin",
    "Sample",
    "SimilarityInterleavedSample",
    "SourceInfo",
    "TextSample",
    "TokensSample",
    "VQASample",
    "VidQASample",
    "VideoTextSample",
    "as_image_options",
    "basic_sample_keys",
    "compile_field_map",
    "cook_crude_sample",
    "cook_fields",
    "cook_sample",
    "decode_members",
    "decode_whole_sample",
    "joiner_from_name",
    "make_crude_sample",
    "map_tensors",
    "parse_source",
    "register_joiner",
    "register_sample_type",
    "sample_type_from_name",
    "sample_type_name",
]

# Submodules load on first use: `import fpipe` then `fpipe.samples.<module>` works. Hidden from
# type checkers, which would otherwise take any misspelt name of this package for Any.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, {})
