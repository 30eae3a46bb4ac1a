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

As in Energon, a task encoder's ``decoder`` may also be any callable
``decoder(sample: dict) -> dict``: it is called with the sample's raw members
(``{"__key__": ..., "jpg": b"...", "txt": b"..."}``) and the field map reads its result as it
is; ``decoder = None`` in the task encoder's class keeps raw bytes (Energon 5's
``auto_decode=False``). A ``SampleDecoder`` is such a callable too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fpipe.core.errors import ConfigError

__all__ = ["AUTO_DECODE_FIX", "IMAGE_DECODE_SPECS", "SampleDecoder"]

#: What replaces Energon 5's ``auto_decode`` (refused with this text wherever it is passed).
AUTO_DECODE_FIX = (
    "auto_decode is Energon 5's, gone since Energon 6 and not an fpipe option: decoding is set "
    "by the task encoder's `decoder` class attribute. auto_decode=True is the default "
    '(`decoder = SampleDecoder(image_decode="torchrgb")` for Energon\'s image values); '
    "auto_decode=False (raw bytes) is `decoder = None` in your TaskEncoder subclass; your own "
    "decoding is a callable `decoder(sample: dict) -> dict`, or "
    "fpipe.decode.register_decoder(ext, fn) for one extension"
)

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

    #: What replaces Energon 5's ``auto_decode`` (the text of the error refusing it).
    AUTO_DECODE_FIX = AUTO_DECODE_FIX

    def __init__(
        self,
        *,
        image_decode: str = "torchrgb",
        av_decode: Any = "AVDecoder",
        video_decode_audio: bool = False,
        guess_content: bool = False,
        decode_limits: Any = None,
        **energon5: Any,
    ):
        from fpipe.decode.image import ImageDecodeOptions

        if "auto_decode" in energon5:
            raise ConfigError(f"SampleDecoder(auto_decode=...): {AUTO_DECODE_FIX}")
        if energon5:
            raise TypeError(
                f"SampleDecoder() got an unexpected keyword argument {next(iter(energon5))!r}"
            )
        if image_decode not in IMAGE_DECODE_SPECS:
            how = (
                "a callable is not an image spec (as in Energon); for your own decoding set "
                "the task encoder's `decoder` to a callable `decoder(sample: dict) -> dict`, "
                "or use fpipe.decode.register_decoder('jpg', fn). Image specs: "
                if callable(image_decode)
                else "use one of "
            )
            raise ConfigError(
                f"SampleDecoder(image_decode={image_decode!r}): {how}"
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

    def __call__(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        """Energon's call: ``sample`` with every member decoded by its extension (images as
        ``image_decode`` says; keys starting with ``__`` kept as they are)."""
        from fpipe.decode.registry import decode_field

        key = str(sample.get("__key__", ""))
        return {
            k: v
            if k.startswith("__") or not isinstance(v, (bytes, bytearray, memoryview))
            else decode_field(
                k, bytes(v), key=key, image_options=self.image_options, limits=self.decode_limits
            )
            for k, v in sample.items()
        }

    def decode(self, fname: str, raw: bytes) -> Any:
        """Energon's ``decode("key.ext", raw)``: one member decoded by its extension."""
        key, _, ext = fname.rpartition("/")[2].partition(".")
        return self({"__key__": key, ext: raw})[ext]

    def __repr__(self) -> str:
        return f"SampleDecoder(image_decode={self.image_decode!r})"
