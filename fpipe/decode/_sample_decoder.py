"""Energon's ``SampleDecoder``: how image members are decoded, named as WebDataset names it.

A task encoder sets ``decoder = SampleDecoder(image_decode="torchrgb")`` as Energon's docs do;
the loader decodes images with :attr:`SampleDecoder.image_options`. The values and what they
give (WebDataset's ``imagespecs``, which Energon uses):

=================  ==========================  ==============================================
``image_decode``   type                        values
=================  ==========================  ==============================================
``torchrgb``       torch float32 (3, H, W)     0..1 (Energon's default; also ``torch``)
``torchrgb8``      torch uint8 (3, H, W)       0..255 (fpipe's default without a decoder)
``torchrgba(8)``   torch (4, H, W)             float 0..1 / uint8
``torchl(8)``      torch (H, W)                float 0..1 / uint8
``rgb`` / ``rgb8``     numpy (H, W, 3)         float32 0..1 / uint8
``rgba`` / ``rgba8``   numpy (H, W, 4)         float32 0..1 / uint8
``l`` / ``l8``         numpy (H, W)            float32 0..1 / uint8
``pil`` / ``pilrgb``   PIL RGB image
``pilrgba`` / ``pill`` PIL RGBA / L image
=================  ==========================  ==============================================
"""

from __future__ import annotations

from typing import Any

from fpipe.core.errors import ConfigError

__all__ = ["IMAGE_DECODE_SPECS", "SampleDecoder"]

#: WebDataset image spec -> (out, dtype, mode) of :class:`~fpipe.decode.image.ImageDecodeOptions`.
IMAGE_DECODE_SPECS: dict[str, tuple[str, str, str]] = {
    "l8": ("numpy", "uint8", "L"),
    "rgb8": ("numpy", "uint8", "RGB"),
    "rgba8": ("numpy", "uint8", "RGBA"),
    "l": ("numpy", "float32", "L"),
    "rgb": ("numpy", "float32", "RGB"),
    "rgba": ("numpy", "float32", "RGBA"),
    "torchl8": ("torch", "uint8", "L"),
    "torchrgb8": ("torch", "uint8", "RGB"),
    "torchrgba8": ("torch", "uint8", "RGBA"),
    "torchl": ("torch", "float32", "L"),
    "torchrgb": ("torch", "float32", "RGB"),
    "torch": ("torch", "float32", "RGB"),
    "torchrgba": ("torch", "float32", "RGBA"),
    "pill": ("pil", "uint8", "L"),
    "pil": ("pil", "uint8", "RGB"),
    "pilrgb": ("pil", "uint8", "RGB"),
    "pilrgba": ("pil", "uint8", "RGBA"),
}


class SampleDecoder:
    """Energon's decoder settings: ``image_decode`` and fpipe's ``decode_limits`` change what
    fpipe decodes.

    Args:
      image_decode: a WebDataset image spec (see the module docstring); default ``"torchrgb"``
        as in Energon.
      decode_limits: :class:`fpipe.decode.DecodeLimits` for every decoder the loader runs
        (None: the defaults, or ``get_train_dataset(decode_limits=...)``).
      av_decode, video_decode_audio, guess_content: accepted for Energon compatibility; audio
        and video members are always lazy :class:`fpipe.decode.av.AVDecoder` handles.

    Example:
      >>> SampleDecoder(image_decode="pilrgb").image_options.out
      'pil'
    """

    def __init__(
        self,
        *,
        image_decode: str = "torchrgb",
        av_decode: Any = "AVDecoder",
        video_decode_audio: bool = False,
        guess_content: bool = False,
        decode_limits: Any = None,
    ):
        from fpipe.decode.image import ImageDecodeOptions

        if image_decode not in IMAGE_DECODE_SPECS:
            raise ConfigError(
                f"SampleDecoder(image_decode={image_decode!r}): use one of "
                + ", ".join(IMAGE_DECODE_SPECS)
            )
        out, dtype, mode = IMAGE_DECODE_SPECS[image_decode]
        self.image_decode = image_decode
        self.av_decode = av_decode
        self.video_decode_audio = video_decode_audio
        self.guess_content = guess_content
        self.decode_limits = decode_limits
        #: what the loader decodes images with
        self.image_options = ImageDecodeOptions(out=out, dtype=dtype, mode=mode)

    def __repr__(self) -> str:
        return f"SampleDecoder(image_decode={self.image_decode!r})"
