"""``megatron.energon.transforms`` on fpipe.

Energon's ``MergeTransform`` and ``CustomTransform`` draw from torch's global generator; fpipe
refuses them where they are constructed, with the fpipe way: torchvision transforms inside an
``encode_sample`` decorated with ``@stateless(restore_seeds=True)``, which seeds that generator
from the sample's key (see docs/energon_migration.md).

Names load on first use, so importing this module does not import torch.
"""

from __future__ import annotations

from fpipe._lazy import lazy_exports

#: Energon name -> the fpipe module that defines it.
_LAZY: dict[str, str] = {}
#: Refused names: importable, raising a ConfigError with the reason where they are used.
_REFUSED = dict.fromkeys(("CustomTransform", "MergeTransform"), "fpipe.energon._refused")

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, {**_REFUSED, **_LAZY})
