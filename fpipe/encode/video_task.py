"""``VideoTaskEncoder``: video samples -> ``[B, 3, T, H, W]`` batches with the OpenSora chain.

For each sample (e.g. a :class:`~fpipe.samples.CaptionedVideoSample` whose ``video`` is the
lazy :class:`~fpipe.decode.av.AVDecoder` made while cooking), :meth:`encode_sample`:

1. checks the decoder's metadata (stored by ``fpipe prepare``, else probed) against its
   limits (the loader's :class:`fpipe.decode.DecodeLimits`);
2. draws the ``num_frames`` frame indices with :func:`~fpipe.encode.video.clip_frame_indices`
   (fixed stride, from frame 0 or from a start drawn from the sample's ``rng``; or, with
   ``temporal="whole"``, spread evenly over the whole clip) over the video's frame count, and
   decodes only those frames (each from its nearest keyframe);
3. applies the rest of :func:`~fpipe.encode.video.video_transform`: resize the short side,
   center or random crop (``rng``), normalize to ``[-1, 1]``, layout ``[3, T, H, W]``, one
   frame at a time straight into the output.

Two options trade the exact default output for less CPU per sample (see ``docs/video.md``):
``resize="ffmpeg"`` scales the kept frames in FFmpeg while decoding (bilinear, in the video's
own pixel format, then converted to RGB at the small size: no full-size RGB frame, no float
work on full-size frames; the luma within about a level of torch's antialiased bilinear),
and ``normalize=False`` returns ``uint8 [3, T, H, W]`` in ``[0, 255]`` (a quarter of the
bytes to move between processes and to the GPU) for :func:`~fpipe.encode.video.normalize` to
map to ``[-1, 1]`` on the GPU. ``codec_threads`` sets FFmpeg's frame threads (same frames).

The result equals ``video_transform(config, <all frames>, rng)`` (same draws from ``rng`` in the
same order: temporal start, then crop) without decoding the frames it does not keep. Batches are
:class:`VideoBatch`: ``video`` ``float32 [B, 3, T, H, W]``, ``caption`` a list of strings; with
``batch_format="opensora"`` they are the dict OpenSora's training loop reads (``video``,
``text``, ``num_frames``, ``height``, ``width``, ``ar``, ``fps``; see
:meth:`VideoTaskEncoder.batch`).

With ``audio=AudioConfig(...)`` each sample also gets the audio of its clip, aligned with the
kept frames: from the first kept frame's pts for the clip's nominal duration
``((T - 1) * stride + 1) / fps`` (one frame period past the last kept frame at a constant rate;
the whole clip with ``temporal="whole"``),
as :func:`~fpipe.encode.audio.aligned_audio` (zeros where the file has no audio), batched as
``audio [B, C, S]`` zero-padded plus ``audio_lengths [B]``.

Example::

    from fpipe.encode.video import VideoTransformConfig
    from fpipe.encode.video_task import VideoTaskEncoder

    enc = VideoTaskEncoder(VideoTransformConfig(num_frames=16, height=256, width=256))
    ds = fpipe.get_train_dataset("data/videos", batch_size=8, task_encoder=enc, seed=1)
    for batch in fpipe.get_loader(ds, num_workers=4):
        batch.video.shape   # torch.Size([8, 3, 16, 256, 256])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import torch

from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.encode._collate import pad_stack_lengths
from fpipe.encode.audio import AudioConfig, aligned_audio, sample_decoder
from fpipe.encode.task_encoder import TaskEncoder
from fpipe.encode.video import (
    VideoTransformConfig,
    clip_frame_indices,
    cover_size,
    crop_origin,
    resize_crop,
    stack_videos,
    video_transform,
)
from fpipe.samples.base import Sample
from fpipe.samples.batch import Batch

__all__ = ["EncodedVideoSample", "VideoBatch", "VideoTaskEncoder"]

#: The frame rate OpenSora gives an image (a 1-frame clip), and a video of unknown rate.
IMAGE_FPS, UNKNOWN_FPS = 120.0, 24.0
BATCH_FORMATS = ("batch", "opensora")
RESIZERS = ("torch", "ffmpeg")


@dataclass
class EncodedVideoSample(Sample):
    """One sample after :meth:`VideoTaskEncoder.encode_sample`."""

    #: ``float32 [3, T, H, W]`` in ``[-1, 1]`` (``uint8`` in ``[0, 255]`` with
    #: ``normalize=False``).
    video: Any
    #: The caption (None when the sample has none).
    caption: Any = None
    #: ``int64 [T]``: index in the source video of each output frame.
    frame_indices: Any = None
    #: ``float64 [T]``: pts (seconds) of each output frame in the source video.
    frame_times: Any = None
    #: ``float32 [C, S]``: the clip's audio (with ``VideoTaskEncoder(audio=...)``), else None.
    audio: Any = None
    #: Frame rate of the output clip as OpenSora computes it: the source's ``fps // stride``
    #: (``stride`` = frames / ``num_frames`` with ``temporal="whole"``); 120 for an image, a
    #: source of unknown rate counts as 24 fps.
    fps: float | None = None


@dataclass(kw_only=True)
class VideoBatch(Batch):
    """A batch of :class:`EncodedVideoSample`."""

    #: ``float32 [B, 3, T, H, W]`` in ``[-1, 1]`` (``uint8`` with ``normalize=False``).
    video: Any
    #: One caption per sample.
    caption: list = field(default_factory=list)
    #: ``int64 [B, T]``: source frame index of each output frame.
    frame_indices: Any = None
    #: ``float64 [B, T]``: source pts (seconds) of each output frame.
    frame_times: Any = None
    #: ``float32 [B, C, S]``: the clips' audio, zero-padded (None without the audio option).
    audio: Any = None
    #: ``int64 [B]``: samples of each clip's audio before padding.
    audio_lengths: Any = None


class VideoTaskEncoder(TaskEncoder):
    """OpenSora-style video encoding: fixed ``(T, H, W)`` clips, batches ``[B, 3, T, H, W]``.

    Args:
      config: the :class:`~fpipe.encode.video.VideoTransformConfig` (frames, size, stride,
        ``temporal="first"|"random"``, ``crop="center"|"random"``).
      decode_limits: :class:`fpipe.decode.DecodeLimits` the loader uses unless
        ``get_train_dataset(decode_limits=...)`` is given, and the limits of encoded bytes this
        encoder decodes itself (None: the defaults for those, whatever the loader's): a video
        over a limit is a bad sample (``BadSampleError`` naming file and key; the loader's
        error policy raises or skips and counts it). The loader hands its limits to the
        decoders it cooks, which probe files without stored metadata while cooking
        (``probe_av``).
      video_field: the sample attribute holding the video (``AVDecoder``, encoded bytes,
        decoded ``uint8 [T, 3, H, W]`` frames, or an image ``[3, H, W]``: a 1-frame clip);
        samples without it use their ``image`` attribute (image datasets).
      caption_field: the sample attribute copied into ``caption`` (None to skip).
      audio: an :class:`~fpipe.encode.audio.AudioConfig` (rate, channels) to also return the
        clip's audio aligned with its frames; None (default) for video only.
      batch_format: ``"batch"`` (default): a :class:`VideoBatch`; ``"opensora"``: the dict
        OpenSora's training loop reads (see :meth:`batch`).
      resize: ``"torch"`` (default): torch's antialiased bilinear on the decoded full-size
        frames (the output of earlier versions, bit for bit); ``"ffmpeg"``: FFmpeg scales
        each kept frame while decoding (bilinear), less than half the CPU per sample of
        "torch" on 360p and 720p video (``bench/video_encode.py``); the same frames and crop,
        the luma within about a level of "torch" on average, colour edges further off.
        Frames given as tensors are always resized by torch.
      normalize: True (default): ``float32`` in ``[-1, 1]``; False: ``uint8`` in ``[0, 255]``
        (normalize on the GPU with :func:`fpipe.encode.video.normalize`).
      codec_threads: FFmpeg frame threads per decode (``AVDecoder.get_clips``): "auto"
        (default; only in a DataLoader worker process with spare cores) or an int (1:
        none). The frames are the same with any setting.

    Randomness comes only from the ``rng`` handed to :meth:`encode_sample`, so a sample
    re-materialized after a restore, in any worker, gives the same tensor.
    """

    #: audio/video members without stored metadata are probed while cooking
    probe_av = True

    def __init__(
        self,
        config: VideoTransformConfig,
        *,
        decode_limits: Any = None,
        video_field: str = "video",
        caption_field: str | None = "caption",
        audio: AudioConfig | None = None,
        batch_format: str = "batch",
        resize: str = "torch",
        normalize: bool = True,
        codec_threads: int | str = "auto",
    ):
        if resize not in RESIZERS:
            raise ConfigError(
                f"VideoTaskEncoder(resize=) must be 'torch' (antialiased bilinear on full-size "
                f"frames, the default) or 'ffmpeg' (scaled while decoding), got {resize!r}"
            )
        if not isinstance(normalize, bool):
            raise ConfigError(
                f"VideoTaskEncoder(normalize=) must be True or False, got {normalize!r}"
            )
        if codec_threads != "auto" and (
            isinstance(codec_threads, bool)
            or not isinstance(codec_threads, int)
            or codec_threads < 1
        ):
            raise ConfigError(
                f"VideoTaskEncoder(codec_threads=) must be 'auto' or an int >= 1, got "
                f"{codec_threads!r}"
            )
        if batch_format not in BATCH_FORMATS:
            raise ConfigError(
                f"VideoTaskEncoder(batch_format=) must be 'batch' (a VideoBatch) or 'opensora' "
                f"(OpenSora's dict: video, text, num_frames, ...), got {batch_format!r}"
            )
        if audio is not None and not isinstance(audio, AudioConfig):
            raise ConfigError(f"VideoTaskEncoder(audio=) needs an AudioConfig, got {audio!r}")
        if not isinstance(config, VideoTransformConfig):
            raise ConfigError(
                f"VideoTaskEncoder needs a VideoTransformConfig, got {type(config).__name__}"
            )
        self.config = config
        self.decode_limits = decode_limits
        self.video_field = video_field
        self.caption_field = caption_field
        self.audio = audio
        self.batch_format = batch_format
        self.resize, self.normalize, self.codec_threads = resize, normalize, codec_threads
        # after the frames are picked: no temporal sampling left, only resize/crop/normalize
        self._spatial = msgspec.structs.replace(config, stride=1, temporal="first")
        self._buckets: dict[tuple[int, ...], VideoTaskEncoder] = {}

    def __repr__(self) -> str:
        return (
            f"VideoTaskEncoder({self.config!r}, decode_limits={self.decode_limits!r}, "
            f"audio={self.audio!r}, batch_format={self.batch_format!r}, resize={self.resize!r}, "
            f"normalize={self.normalize!r}, codec_threads={self.codec_threads!r})"
        )

    def for_bucket(self, shape: tuple[int, ...]) -> VideoTaskEncoder:
        """This encoder with ``(num_frames, height, width) = shape`` (a bucket's shape): every
        sample of the batch is sampled, resized and cropped to it, images as 1-frame clips."""
        t, h, w = (int(x) for x in shape)
        if (t, h, w) == (self.config.num_frames, self.config.height, self.config.width):
            return self
        enc = self._buckets.get((t, h, w))
        if enc is None:
            cfg = msgspec.structs.replace(self.config, num_frames=t, height=h, width=w)
            enc = self._buckets[(t, h, w)] = VideoTaskEncoder(
                cfg,
                decode_limits=self.decode_limits,
                video_field=self.video_field,
                caption_field=self.caption_field,
                audio=self.audio,
                batch_format=self.batch_format,
                resize=self.resize,
                normalize=self.normalize,
                codec_threads=self.codec_threads,
            )
        return enc

    def _fps(self, source_fps: float | None, num_available: int) -> float:
        """The output clip's frame rate as OpenSora computes it: ``source_fps // stride``."""
        cfg = self.config
        stride = num_available / cfg.num_frames if cfg.temporal == "whole" else cfg.stride
        return float((source_fps or UNKNOWN_FPS) // stride)

    def _scaled(self, video: Any, meta: Any, idx: np.ndarray, rng: np.random.Generator | None):
        """``(video_out_frame_size, crop origin)`` for ``resize="ffmpeg"`` (the crop drawn
        from ``rng`` as ``video_transform`` draws it), else ``(None, None)``."""
        if self.resize != "ffmpeg":
            return None, None
        shape = (meta.height, meta.width)
        if not (meta.height and meta.width):  # metadata without the size: decode one frame
            first = video.get_clips([(int(idx[0]), int(idx[0]))], video_unit="frames")
            shape = first.video_clips[0].shape[-2:] if first.video_clips else (0, 0)
            if not (shape[0] and shape[1]):
                raise BadSampleError(video.path, video.key, "no video frame could be decoded")
        size = (self.config.height, self.config.width)
        nh, nw = cover_size(shape, size)
        return (nw, nh), crop_origin(self.config.crop, (nh, nw), size, rng)

    def _frames(self, video: Any, sample: Any, rng: np.random.Generator | None):
        """(the ``T`` ``uint8 [3, h, w]`` frames of the clip, their source indices, their
        pts, the clip's audio or None, the clip's fps, the crop origin when FFmpeg scaled the
        frames (``resize="ffmpeg"``) else None)."""
        from fpipe.decode.av.decoder import check_av_limits

        cfg = self.config
        also = " or a [T, 3, H, W] tensor"
        video = sample_decoder(video, sample, self.video_field, self.decode_limits, also)
        meta = video.metadata  # stored by `fpipe prepare`, else probed now (no decoding)
        check_av_limits(meta, video.limits, path=video.path, key=video.key)
        if not meta.video_num_frames:
            raise BadSampleError(video.path, video.key, "no video frames")
        idx = clip_frame_indices(cfg, meta.video_num_frames, rng)
        # one single-frame range per kept frame: the decoder seeks to the keyframe before
        # the first, decodes forward, and converts only these frames to RGB
        out_size, origin = self._scaled(video, meta, idx, rng)
        out = video.get_clips(
            [(int(i), int(i)) for i in idx],
            video_unit="frames",
            video_out_frame_size=out_size,
            codec_threads=self.codec_threads,
        )
        frames, times, last = [], [], None
        for clip, t in zip(out.video_clips, out.video_frame_times):
            if clip.shape[0]:
                last = (clip[0], t[:1])
            if last is None:
                continue
            frames.append(last[0])  # a frame past the end (metadata overcounts): repeat
            times.append(last[1])
        if not frames:
            raise BadSampleError(video.path, video.key, "no video frame could be decoded")
        while len(frames) < len(idx):
            frames.insert(0, frames[0])
            times.insert(0, times[0])
        frame_times = torch.cat(times)
        audio = None
        if self.audio is not None:  # from the first kept frame, the clip's nominal duration
            t0 = float(frame_times[0])
            whole = cfg.temporal == "whole"
            n = meta.video_num_frames if whole else (len(idx) - 1) * cfg.stride + 1
            span = n / (meta.video_fps or 1.0)
            audio = aligned_audio(video, t0, t0 + span, self.audio)
        fps = self._fps(meta.video_fps, meta.video_num_frames)
        return frames, idx, frame_times, audio, fps, origin

    def encode_sample(self, sample: Any, rng: np.random.Generator) -> EncodedVideoSample:
        """Decode ``num_frames`` frames and transform them to ``float32 [3, T, H, W]`` (``uint8``
        with ``normalize=False``)."""
        video = getattr(sample, self.video_field, None)
        image = video is None or (isinstance(video, torch.Tensor) and video.ndim == 3)
        if video is None:  # an image sample: a 1-frame clip, as OpenSora treats images
            video = getattr(sample, "image", None)
        if isinstance(video, torch.Tensor) and video.ndim == 3:  # an image [3, H, W]
            video = video.unsqueeze(0)
        if isinstance(video, torch.Tensor):  # already decoded frames [T, 3, H, W]
            idx = clip_frame_indices(self.config, video.shape[0], rng)
            frames = video[torch.as_tensor(idx)]
            frame_times, audio = None, None
            fps = IMAGE_FPS if image else self._fps(None, video.shape[0])
            x = video_transform(self._spatial, frames, rng, normalize=self.normalize)
        else:
            frames, idx, frame_times, audio, fps, origin = self._frames(video, sample, rng)
            size, shape = (self.config.height, self.config.width), tuple(frames[0].shape[-2:])
            # what video_transform(self._spatial, torch.stack(frames), rng) gives, without
            # stacking full-size frames; frames FFmpeg scaled are only cropped
            resized = cover_size(shape, size) if origin is None else shape
            if origin is None:
                origin = crop_origin(self.config.crop, resized, size, rng)
            n, norm = len(frames), self.normalize
            x = resize_crop(frames, range(n), resized, origin, size, normalize=norm)
        caption = getattr(sample, self.caption_field, None) if self.caption_field else None
        return EncodedVideoSample.derive_from(
            sample,
            video=x,
            caption=caption,
            frame_indices=torch.as_tensor(idx, dtype=torch.int64),
            frame_times=frame_times,
            audio=audio,
            fps=fps,
        )

    def batch(self, samples: list[EncodedVideoSample]) -> Any:
        """Stack into ``[B, 3, T, H, W]``; captions as a list; audio padded plus lengths.

        A :class:`VideoBatch`, or with ``batch_format="opensora"`` the dict OpenSora's
        ``VariableVideoTextDataset`` and ``default_collate`` give its training loop: ``video``
        ``float32 [B, 3, T, H, W]``, ``text`` (the captions), ``num_frames`` / ``height`` /
        ``width`` ``int64 [B]`` (the clip's ``T, H, W``), ``ar`` ``float64 [B]``
        (``height / width``), ``fps`` ``float64 [B]`` (:attr:`EncodedVideoSample.fps`), then
        ``audio`` and ``audio_lengths`` with the audio option, and the samples' ``__key__``,
        ``__restore_key__`` and ``__subflavors__`` (lists: no tensors a loop would move)."""
        fields: dict[str, Any] = {"frame_times": None, "audio": None, "audio_lengths": None}
        if all(s.frame_times is not None for s in samples):
            fields["frame_times"] = torch.stack([s.frame_times for s in samples])
        if all(s.audio is not None for s in samples):
            fields["audio"], fields["audio_lengths"] = pad_stack_lengths([s.audio for s in samples])
        if self.batch_format == "opensora":
            return self._opensora_batch(samples, fields)
        return VideoBatch.from_samples(
            samples,
            video=stack_videos([s.video for s in samples]),
            frame_indices=torch.stack([s.frame_indices for s in samples]),
            **fields,
        )

    def _opensora_batch(self, samples: list[EncodedVideoSample], fields: dict) -> dict:
        """The dict of :meth:`batch` for ``batch_format="opensora"``."""
        video = stack_videos([s.video for s in samples])
        b, (t, h, w) = len(samples), video.shape[2:]
        out: dict[str, Any] = {
            "video": video,
            "text": [s.caption for s in samples],
            "num_frames": torch.full((b,), t, dtype=torch.int64),
            "height": torch.full((b,), h, dtype=torch.int64),
            "width": torch.full((b,), w, dtype=torch.int64),
            "ar": torch.full((b,), h / w, dtype=torch.float64),
            "fps": torch.tensor([s.fps for s in samples], dtype=torch.float64),
        }
        if fields["audio"] is not None:
            out["audio"], out["audio_lengths"] = fields["audio"], fields["audio_lengths"]
        out["__key__"] = [s.__key__ for s in samples]
        out["__restore_key__"] = tuple(s.__restore_key__ for s in samples)
        out["__subflavors__"] = [s.__subflavors__ for s in samples]
        return out
