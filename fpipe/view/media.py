"""Pictures and media of ``fpipe view``: thumbnails of images, poster frames of videos (both
made on request and kept in a cache folder), and raw audio/video members for the browser to
play.

Decoding goes through fpipe's decoders with the loader's limits
(:class:`~fpipe.decode.limits.DecodeLimits`): an image of more pixels than the loader takes, or
a video over its frame, size or duration limits, is refused (a BadSampleError) before it is
decoded. A sample whose stored size is over :data:`MAX_SAMPLE_BYTES` is not read at all.
Cache file names are digests of (dataset path, sample index, size), never a requested name.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from pathlib import Path

from fpipe.core.errors import BadSampleError
from fpipe.decode.extensions import ext_kind, last_part
from fpipe.decode.limits import DEFAULT_LIMITS, DecodeLimits

__all__ = [
    "MAX_SAMPLE_BYTES",
    "MEDIA_TYPES",
    "THUMB_SIZE",
    "check_size",
    "default_cache_dir",
    "member_kind",
    "placeholder_png",
    "thumbnail",
]

#: Longest side of a thumbnail, pixels.
THUMB_SIZE = 200
#: Largest sample (stored bytes of all its members) a page reads; larger ones are refused.
MAX_SAMPLE_BYTES = 256 << 20
#: Content types of the members served for playing, by last extension part (others are not
#: served raw).
MEDIA_TYPES = {
    "mp4": "video/mp4",
    "m4v": "video/mp4",
    "webm": "video/webm",
    "mkv": "video/x-matroska",
    "mov": "video/quicktime",
    "ogv": "video/ogg",
    "mp3": "audio/mpeg",
    "m4a": "audio/mp4",
    "wav": "audio/wav",
    "flac": "audio/flac",
    "ogg": "audio/ogg",
    "opus": "audio/ogg",
}
_AUDIO = {"mp3", "m4a", "wav", "flac", "ogg", "opus"}


def member_kind(ext: str) -> str:
    """``image``, ``video``, ``audio``, ``text`` (text and JSON) or ``""``.

    >>> [member_kind(e) for e in ("jpg", "mp4", "flac", "txt", "json", "npy")]
    ['image', 'video', 'audio', 'text', 'text', '']
    """
    kind, last = ext_kind(ext), last_part(ext)
    if kind == "av":
        return "audio" if last in _AUDIO else "video"
    return "text" if kind == "text" or last == "json" else kind


def default_cache_dir() -> Path:
    """Where thumbnails go by default: ``$XDG_CACHE_HOME/fpipe/view`` (``~/.cache/...``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fpipe" / "view"


def check_size(ds, i: int) -> None:
    """Refuse sample ``i`` before reading it when its stored size is over the limit."""
    if "bytes" in ds.column_names:
        size = int(ds.column("bytes")[i])
        if size > MAX_SAMPLE_BYTES:
            raise BadSampleError(
                f"{ds.path}: sample {ds.key(i)} holds {size} bytes, over fpipe view's limit "
                f"of {MAX_SAMPLE_BYTES}"
            )


def _picture(raw: dict[str, bytes], ds, i: int, limits: DecodeLimits):
    """The sample's first image, else a frame of its first video (PIL), else None."""
    from fpipe.decode.image import decode_image

    key = ds.key(i)
    for ext in sorted(raw):
        if member_kind(ext) == "image":
            img = decode_image(raw[ext], out="pil", limits=limits, path=ds.path, key=key)
            img.thumbnail((THUMB_SIZE, THUMB_SIZE))
            return img
    for ext in sorted(raw):
        if member_kind(ext) == "video":
            from PIL import Image

            from fpipe.decode.av import AVDecoder  # PyAV and torch, for videos only

            meta = ds.av_metadata(i).get(ext)
            dec = AVDecoder(raw[ext], metadata=meta, path=ds.path, key=key, limits=limits)
            n = dec.metadata.video_num_frames or 1
            frames = dec.get_single_frames_uniform(1 if n < 3 else 3).video_clips[0]
            img = Image.fromarray(frames[-1 if n < 3 else 1].permute(1, 2, 0).numpy())
            img.thumbnail((THUMB_SIZE, THUMB_SIZE))
            return img
    return None


def placeholder_png() -> bytes:
    """A small grey PNG: the thumbnail of a sample without a picture."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (220, 220, 220)).save(buf, format="PNG")
    return buf.getvalue()


def thumbnail(
    ds, i: int, cache_dir: Path | None, limits: DecodeLimits = DEFAULT_LIMITS
) -> bytes | None:
    """JPEG bytes of sample ``i``'s thumbnail (image, or a video's middle frame), from the
    cache when made before; None when the sample has no picture. BadSampleError for a sample
    over a limit or undecodable."""
    name = hashlib.sha256(f"{ds.path}\0{i}\0{THUMB_SIZE}".encode()).hexdigest()[:32] + ".jpg"
    cached = None if cache_dir is None else cache_dir / name[:2] / name
    if cached is not None and cached.is_file():
        return cached.read_bytes()
    check_size(ds, i)
    img = _picture(ds.read(i, limits=limits), ds, i, limits)
    if img is None:
        return None
    buf = io.BytesIO()
    img.convert("RGB").save(buf, format="JPEG", quality=85)
    data = buf.getvalue()
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cached.parent, suffix=".part")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, cached)  # whole files only, also with two requests at once
    return data
