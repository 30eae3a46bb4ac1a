"""``megatron.energon.transforms`` on fpipe: ``MergeTransform``, ``CustomTransform`` and the
mapper names, from :mod:`fpipe.energon._transforms` (exact inside the loader: the steps draw
from generators seeded by the sample's generator).

Names load on first use, so importing this module does not import torch.
"""

from __future__ import annotations

from fpipe._lazy import lazy_exports

#: Energon name -> the fpipe module that defines it.
_LAZY: dict[str, str] = dict.fromkeys(
    (
        "CenterCropMapper",
        "CustomTransform",
        "MergeTransform",
        "RandomCropMapper",
        "RandomHorizontalFlipMapper",
        "RandomPerspectiveMapper",
        "RandomResizedCropMapper",
        "RandomRotationMapper",
        "RandomVerticalFlipMapper",
        "ResizeMapper",
        "TransformMapper",
    ),
    "fpipe.energon._transforms",
)

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
