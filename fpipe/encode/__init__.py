"""User hooks of the materialize tier: the TaskEncoder protocol, collate, packing helpers and
packed sequences for varlen attention.

Names load on first use: ``TaskEncoder`` and ``DefaultTaskEncoder`` import no torch (building a
dataset's plan stays torch-free); collate and the varlen helpers import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fpipe import _ENCODE as _ENERGON_NAMES
from fpipe._lazy import lazy_exports

if TYPE_CHECKING:
    from fpipe.encode.collate import collate, collate_samples, pad_stack, pad_stack_lengths
    from fpipe.encode.hooks import (
        IgnoreSample,
        SkipSample,
        batch_list,
        batch_pad_stack,
        batch_stack,
        generic_batch,
        sample_rng,
        stateless,
    )
    from fpipe.encode.task_encoder import DefaultTaskEncoder, TaskEncoder
    from fpipe.encode.varlen import VarlenPack, stack_varlen, varlen_pack

# The names fpipe re-exports at top level (Energon's hook helpers and task encoders) are listed
# once, in fpipe/__init__.py; the task encoders' entries below override the hooks module.
_LAZY = {
    **dict.fromkeys(_ENERGON_NAMES, "fpipe.encode.hooks"),
    "DefaultTaskEncoder": "fpipe.encode.task_encoder",
    "TaskEncoder": "fpipe.encode.task_encoder",
    "VarlenPack": "fpipe.encode.varlen",
    "collate": "fpipe.encode.collate",
    "collate_samples": "fpipe.encode.collate",
    "pad_stack": "fpipe.encode.collate",
    "pad_stack_lengths": "fpipe.encode.collate",
    "stack_varlen": "fpipe.encode.varlen",
    "varlen_pack": "fpipe.encode.varlen",
}

__all__ = [
    "DefaultTaskEncoder",
    "IgnoreSample",
    "SkipSample",
    "TaskEncoder",
    "VarlenPack",
    "batch_list",
    "batch_pad_stack",
    "batch_stack",
    "collate",
    "collate_samples",
    "generic_batch",
    "pad_stack",
    "pad_stack_lengths",
    "sample_rng",
    "stack_varlen",
    "stateless",
    "varlen_pack",
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
