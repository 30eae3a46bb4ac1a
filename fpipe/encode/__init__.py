"""User hooks of the materialize tier: the TaskEncoder protocol, collate, packing helpers and
packed sequences for varlen attention.

Names load on first use: ``TaskEncoder`` and ``DefaultTaskEncoder`` import no torch (building a
dataset's plan stays torch-free); collate and the varlen helpers import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fpipe._lazy import lazy_exports

if TYPE_CHECKING:
    from fpipe.encode._collate import collate, collate_samples, pad_stack, pad_stack_lengths
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

_HOOKS = (
    "IgnoreSample",
    "SkipSample",
    "batch_list",
    "batch_pad_stack",
    "batch_stack",
    "generic_batch",
    "sample_rng",
    "stateless",
)
_LAZY = {
    **dict.fromkeys(_HOOKS, "fpipe.encode.hooks"),
    "DefaultTaskEncoder": "fpipe.encode.task_encoder",
    "TaskEncoder": "fpipe.encode.task_encoder",
    "VarlenPack": "fpipe.encode.varlen",
    "collate": "fpipe.encode._collate",
    "collate_samples": "fpipe.encode._collate",
    "pad_stack": "fpipe.encode._collate",
    "pad_stack_lengths": "fpipe.encode._collate",
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
