"""Media metadata as Energon records it (``megatron.energon.media``): what an image or an
audio/video file is, without decoding its pixels or samples.

:class:`ImageMetadata` (size, format, mode: from the image header) and :class:`AVMetadata`
(durations, frame rate and count, size, audio rate, channels and samples: from fpipe's
demux of the file) are plain dataclasses with Energon's fields; :class:`MediaFilterConfig`
says which files are media (by extension, by glob patterns, or by the file's header bytes).
A file's metadata is a pure function of its bytes, so it may be stored when a dataset is
prepared (Energon's ``index.sqlite`` ``media_metadata`` table, which fpipe reads) or computed
when asked (:func:`media_metadata`): both give the same record.
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Mapping
from enum import Enum
from fnmatch import fnmatch
from pathlib import PurePosixPath
from typing import Any, ClassVar

__all__ = [
    "AVMetadata",
    "ImageMetadata",
    "MediaFilterConfig",
    "MediaFilterStrategy",
    "MediaMetadataBase",
    "MediaMetadataType",
    "deserialize_media_metadata",
    "media_metadata",
    "serialize_media_metadata",
]


class MediaMetadataType(str, Enum):
    """The kinds of media metadata."""

    AV = "av"
    IMAGE = "image"

    @classmethod
    def from_string(cls, value: str) -> MediaMetadataType:
        return cls(value)


@dataclasses.dataclass
class MediaMetadataBase:
    """A metadata record, stored as JSON (fields that are None left out)."""

    metadata_type: ClassVar[MediaMetadataType]

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> MediaMetadataBase:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in payload.items() if k in names})


@dataclasses.dataclass
class AVMetadata(MediaMetadataBase):
    """An audio or video file: fields of a stream the file lacks are None."""

    metadata_type: ClassVar[MediaMetadataType] = MediaMetadataType.AV

    video_duration: float | None = None
    video_num_frames: int | None = None
    video_fps: float | None = None
    video_width: int | None = None
    video_height: int | None = None
    audio_duration: float | None = None
    audio_channels: int | None = None
    audio_sample_rate: int | None = None
    audio_num_samples: int | None = None


@dataclasses.dataclass
class ImageMetadata(MediaMetadataBase):
    """An image file: its size in pixels, PIL's format name (``JPEG``) and mode (``RGB``)."""

    metadata_type: ClassVar[MediaMetadataType] = MediaMetadataType.IMAGE

    width: int
    height: int
    format: str
    mode: str


_RECORDS: dict[MediaMetadataType, type[MediaMetadataBase]] = {
    MediaMetadataType.AV: AVMetadata,
    MediaMetadataType.IMAGE: ImageMetadata,
}


def serialize_media_metadata(metadata: MediaMetadataBase) -> tuple[MediaMetadataType, str]:
    """``(type, JSON)`` of a record, as stored."""
    return metadata.metadata_type, json.dumps(metadata.to_dict(), separators=(",", ":"))


def deserialize_media_metadata(metadata_type: str | MediaMetadataType, metadata_json: str):
    """The record stored as ``(type, JSON)``."""
    kind = MediaMetadataType(metadata_type)
    return _RECORDS[kind].from_dict(json.loads(metadata_json) if metadata_json else {})


_IMAGE_EXTENSIONS = frozenset(
    ["bmp", "gif", "ico", "j2k", "jp2", "jpx", "jpeg", "jpg", "png", "tif", "tiff", "webp"]
)
_AV_EXTENSIONS = frozenset(
    ["aac", "avi", "flac", "m4a", "m4v", "mkv", "mov", "mp3", "mp4", "ogg", "wav", "webm"]
)


def _kind_by_extension(name: str) -> MediaMetadataType | None:
    ext = PurePosixPath(name).suffix.lstrip(".").lower()
    if ext in _IMAGE_EXTENSIONS:
        return MediaMetadataType.IMAGE
    if ext in _AV_EXTENSIONS:
        return MediaMetadataType.AV
    return None


def _kind_by_header(data: bytes) -> MediaMetadataType | None:
    """The kind a file's first bytes announce (the common image and media containers)."""
    head = data[:16]
    if head.startswith((b"\xff\xd8\xff", b"\x89PNG", b"GIF8", b"BM", b"II*\x00", b"MM\x00*")):
        return MediaMetadataType.IMAGE
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return MediaMetadataType.IMAGE
    if head[:4] == b"RIFF" and head[8:12] in (b"WAVE", b"AVI "):
        return MediaMetadataType.AV
    if head[4:8] == b"ftyp" or head.startswith((b"\x1a\x45\xdf\xa3", b"fLaC", b"OggS", b"ID3")):
        return MediaMetadataType.AV
    if head[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2", b"\xff\xf1", b"\xff\xf9"):
        return MediaMetadataType.AV
    return None


class MediaFilterStrategy(str, Enum):
    """How files are recognized as media."""

    EXTENSION = "EXTENSION"  #: by the file name's extension
    HEADER = "HEADER"  #: by the file's first bytes (the extension when they tell nothing)
    GLOB = "GLOB"  #: by glob patterns on the file name, then by extension


@dataclasses.dataclass(frozen=True)
class MediaFilterConfig:
    """Which files get media metadata (Energon's ``MediaFilterConfig``)."""

    strategy: MediaFilterStrategy
    patterns: list[str] = dataclasses.field(default_factory=list)

    @classmethod
    def parse(cls, glob: str | None, header: bool, extension: bool) -> MediaFilterConfig:
        """One of a comma-separated glob list, the header or the extension strategy."""
        if sum(bool(s) for s in (glob, header, extension)) != 1:
            raise ValueError("exactly one of the glob, header or extension media filters is needed")
        if glob:
            return cls(MediaFilterStrategy.GLOB, glob.split(","))
        return cls(MediaFilterStrategy.HEADER if header else MediaFilterStrategy.EXTENSION)

    def should_consider_all(self) -> bool:
        """Whether every file must be read to tell (the header strategy)."""
        return self.strategy == MediaFilterStrategy.HEADER

    def should_consider_media(self, name: str) -> bool:
        """Whether file ``name`` may be media, from its name alone."""
        lower = name.lower()
        if self.strategy == MediaFilterStrategy.HEADER:
            return True
        if self.strategy == MediaFilterStrategy.EXTENSION:
            return _kind_by_extension(lower) is not None
        return any(fnmatch(lower, p) for p in self.patterns)

    def kind(self, name: str, data: bytes) -> MediaMetadataType | None:
        """The media kind of file ``name`` with content ``data`` (None: not media)."""
        if self.strategy == MediaFilterStrategy.GLOB and not any(
            fnmatch(name, p) for p in self.patterns
        ):
            return None
        if self.strategy == MediaFilterStrategy.HEADER:
            return _kind_by_header(data) or _kind_by_extension(name)
        return _kind_by_extension(name)

    def extract_metadata(self, source: Any, filename: str | None = None):
        """The metadata of a media file (``source``: bytes with ``filename``, an open binary
        file with ``filename``, or a path); None when the filter says it is not media or it
        cannot be read as such."""
        if isinstance(source, (bytes, bytearray, memoryview)):
            data = bytes(source)
        elif hasattr(source, "read"):
            data = source.read()
        else:
            filename = str(getattr(source, "name", source)) if filename is None else filename
            with open(source, "rb") as f:
                data = f.read()
        if filename is None:
            raise ValueError("extract_metadata: a file name is needed with bytes or a stream")
        kind = self.kind(filename, data)
        return None if kind is None else _metadata_of(kind, data)


def media_metadata(name: str, data: bytes):
    """The metadata of file ``name`` with content ``data``: by its header bytes, else by its
    extension; None when it is not a readable image or audio/video file."""
    kind = _kind_by_header(data) or _kind_by_extension(name)
    return None if kind is None else _metadata_of(kind, data)


def _metadata_of(kind: MediaMetadataType, data: bytes):
    if kind is MediaMetadataType.IMAGE:
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(io.BytesIO(data)) as img:
                return ImageMetadata(
                    width=img.width,
                    height=img.height,
                    format=img.format or "UNKNOWN",
                    mode=img.mode or "UNKNOWN",
                )
        except (UnidentifiedImageError, OSError):
            return None
    from fpipe.decode.av import AVDecoder

    try:
        meta = AVDecoder(data).get_metadata(get_audio_num_samples=True)
    except Exception:  # noqa: BLE001 - not a readable media file: no metadata, as in Energon
        return None
    return AVMetadata(
        **{f.name: getattr(meta, f.name, None) for f in dataclasses.fields(AVMetadata)}
    )
