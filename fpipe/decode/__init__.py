"""Pure functions from bytes to values (text, json, npy, safe pth, images, audio/video).

What belongs here: decoders ``fn(data: bytes) -> value``, the registry by member extension and
image decoding (Pillow). What does not: refs, ranks, pipeline state, global RNGs. PyAV is
imported only by the :mod:`fpipe.decode.av` package (the decoder and the opener/probe,
video and audio modules behind it), torch only inside the functions that return tensors; names
here are loaded lazily so ``import fpipe.decode`` stays cheap.
"""

from __future__ import annotations

from fpipe._lazy import lazy_exports

__all__ = [
    "AV_EXTENSIONS",
    "DecodeLimits",
    "Decoder",
    "IMAGE_EXTENSIONS",
    "ImageDecodeOptions",
    "SampleDecoder",
    "decode_av",
    "decode_field",
    "decode_image",
    "decode_image_with",
    "decode_int",
    "decode_json",
    "decode_msgpack",
    "decode_npy",
    "decode_npz",
    "decode_pth",
    "decode_tenbin",
    "decode_txt",
    "get_decoder",
    "image_size",
    "psnr",
    "register_decoder",
    "registered_extensions",
    "unregister_decoder",
]

_WHERE = {
    "AV_EXTENSIONS": "extensions",
    "decode_av": "fields",
    "decode_int": "fields",
    "decode_json": "fields",
    "decode_msgpack": "fields",
    "decode_npy": "fields",
    "decode_npz": "fields",
    "decode_pth": "fields",
    "decode_tenbin": "fields",
    "decode_txt": "fields",
    "DecodeLimits": "limits",
    "SampleDecoder": "_sample_decoder",
    "IMAGE_EXTENSIONS": "extensions",
    "ImageDecodeOptions": "image",
    "decode_image": "image",
    "decode_image_with": "image",
    "image_size": "image",
    "psnr": "image",
    "Decoder": "registry",
    "decode_field": "registry",
    "get_decoder": "registry",
    "register_decoder": "registry",
    "registered_extensions": "registry",
    "unregister_decoder": "registry",
}

__getattr__, __dir__ = lazy_exports(
    __name__, {name: f"fpipe.decode.{module}" for name, module in _WHERE.items()}
)
