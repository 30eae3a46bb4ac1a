"""The built-in sample types. Names match Megatron-Energon's, so dataset.yaml files written
for Energon resolve to these.

An "image" is whatever the image decoder returns (by default a uint8 ``(3, H, W)`` tensor; PIL
or numpy with other options). A "video" (or an "audio") is a lazy ``fpipe.decode.av.AVDecoder``
handle until a task encoder decodes frames (or samples) from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fpipe.samples.base import Sample

__all__ = [
    "CaptionedAudioSample",
    "CaptionedVideoSample",
    "CaptioningSample",
    "GPTSample",
    "ImageClassificationSample",
    "ImageSample",
    "InterleavedSample",
    "MultiChoiceVQASample",
    "OCRSample",
    "SimilarityInterleavedSample",
    "TextSample",
    "TokensSample",
    "VQASample",
    "VidQASample",
    "VideoTextSample",
]


@dataclass
class CaptioningSample(Sample):
    """An image and its caption."""

    #: The decoded image.
    image: Any
    #: The caption text.
    caption: str


@dataclass
class ImageSample(Sample):
    """An image alone."""

    #: The decoded image.
    image: Any


@dataclass
class TextSample(Sample):
    """A text alone (language-model pretraining)."""

    #: The text.
    text: str


@dataclass
class TokensSample(Sample):
    """A pretokenized text (language-model pretraining): a document or a sequence of a
    Megatron indexed corpus (``prefix.bin`` / ``prefix.idx``)."""

    #: The token ids, a 1-D ``int64`` tensor (a float corpus keeps its float dtype).
    tokens: Any
    #: The lengths of the sequences the tokens are made of (``int64`` tensor; one for a
    #: sequence, one per sentence of a corpus written with ``--split-sentences``).
    lengths: Any = None
    #: The mode of each of those sequences (``int64`` tensor), in a multimodal corpus.
    modes: Any = None


@dataclass
class GPTSample(Sample):
    """A GPT pretraining sample: ``sequence_length`` tokens cut from a Megatron corpus's
    documents laid end to end (it may span several documents), with Megatron ``GPTDataset``'s
    fields. Made by a corpus opened with ``sequence_length`` (docs/megatron_text.md)."""

    #: The input token ids, ``int64 (sequence_length,)`` (padding replaced by 0).
    tokens: Any
    #: The next token of each input token, ``int64 (sequence_length,)``.
    labels: Any
    #: 1.0 where the label is trained on; 0.0 on padding, and on EOD tokens with
    #: ``eod_mask_loss``; ``float32 (sequence_length,)``.
    loss_mask: Any
    #: Each token's position, restarting after each EOD with ``reset_position_ids``.
    position_ids: Any
    #: Where each document starts in ``tokens``, then ``sequence_length`` (``int32``), for
    #: variable-length attention kernels.
    cu_seqlens: Any
    #: Lineage: ``int64 (pieces, 3)``, the ``(sequence, offset, length)`` of each document
    #: piece the sample's tokens (and its extra label token) were read from, in order.
    pieces: Any = None

    def __post_init__(self) -> None:
        # decoded as flat arrays of the widest integer type; shaped and typed here
        if self.pieces is not None and getattr(self.pieces, "ndim", 2) == 1:
            self.pieces = self.pieces.reshape(-1, 3)
        if self.cu_seqlens is not None and hasattr(self.cu_seqlens, "int"):
            self.cu_seqlens = self.cu_seqlens.int()


@dataclass
class VQASample(Sample):
    """Visual question answering: an image, a question (context) and answers."""

    #: The decoded image.
    image: Any
    #: The question or prompt.
    context: str
    #: Possible answers.
    answers: list[str] | None = None
    #: One weight per answer.
    answer_weights: Any = None


@dataclass
class InterleavedSample(Sample):
    """Text and images in document order (OBELICS/MMC4 style)."""

    #: Items in order: ``str`` for text, a decoded image otherwise.
    sequence: list[Any]


@dataclass
class ImageClassificationSample(Sample):
    """An image and its class."""

    #: The decoded image.
    image: Any
    #: The class index.
    label: int | None = None
    #: The class name.
    label_name: str | None = None


@dataclass
class CaptionedVideoSample(Sample):
    """A video with its caption, and optionally a separate audio track and metadata."""

    #: Lazy video handle (``AVDecoder``) or decoded frames.
    video: Any
    #: The caption text.
    caption: str
    #: Lazy audio handle or decoded audio, when the audio is a separate member.
    audio: Any = None
    #: Anything else about the clip (fps, duration, source...).
    metadata: dict[str, Any] | None = None


@dataclass
class CaptionedAudioSample(Sample):
    """An audio clip or file (FLAC, WAV, MP3, Opus...) with its caption or transcript."""

    #: Lazy audio handle (``AVDecoder``) or decoded audio ``float32 [channels, samples]``.
    audio: Any
    #: The caption or transcript.
    caption: str
    #: Anything else about the clip (language, speaker, source...).
    metadata: dict[str, Any] | None = None


#: Alias: the video-text sample under a second name.
VideoTextSample = CaptionedVideoSample


@dataclass
class VidQASample(Sample):
    """Video question answering."""

    #: Lazy video handle (``AVDecoder``) or decoded frames.
    video: Any
    #: The question or prompt.
    context: str
    #: Possible answers.
    answers: list[str] | None = None
    #: One weight per answer.
    answer_weights: Any = None


@dataclass
class OCRSample(Sample):
    """Optical character recognition: an image, its text, and optional boxes and texts of its
    blocks, lines, words and characters (boxes ``float (N, 4|5)``: x, y, w, h[, confidence])."""

    #: The decoded image.
    image: Any
    #: The text in the image.
    text: str
    #: Boxes of the text blocks.
    block_boxes: Any = None
    #: The class of each block (a tensor or a list of names).
    block_classes: Any = None
    #: The text of each block.
    block_text: list[str] | None = None
    #: Boxes of the lines.
    lines_boxes: Any = None
    #: The text of each line.
    lines_text: list[str] | None = None
    #: Boxes of the words.
    words_boxes: Any = None
    #: The text of each word.
    words_text: list[str] | None = None
    #: Boxes of the characters.
    chars_boxes: Any = None
    #: Each character.
    chars_text: list[str] | None = None


@dataclass
class MultiChoiceVQASample(Sample):
    """Multiple-choice visual question answering: an image, a question and the candidate
    answers, with the index of the correct one."""

    #: The decoded image.
    image: Any
    #: The question or prompt.
    context: str
    #: The candidate answers.
    choices: list[str] | None = None
    #: The index of the correct answer in ``choices``.
    correct_choice_idx: int = 0


@dataclass
class SimilarityInterleavedSample(Sample):
    """Images and texts of one document without alignment: the similarity matrix (or the
    matched text of each image) aligns them."""

    #: The decoded images.
    images: list[Any]
    #: The texts.
    texts: list[str]
    #: Optional audio items.
    audio: list[Any] | None = None
    #: Optional video items.
    video: list[Any] | None = None
    #: Similarity of each image (rows) to each text (columns).
    similarity_matrix: Any = None
    #: For each image, the index in ``texts`` of the sentence it matches.
    matched_text_indices: list[int] | None = None
