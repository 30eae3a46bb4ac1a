"""User hooks of the materialize tier: the TaskEncoder protocol, collate, packing helpers and
packed sequences for varlen attention.

Importing this package imports torch (collate builds tensors).
"""

from fpipe.encode.collate import collate, collate_samples, pad_stack
from fpipe.encode.task_encoder import DefaultTaskEncoder, TaskEncoder
from fpipe.encode.varlen import VarlenPack, stack_varlen, varlen_pack

__all__ = [
    "DefaultTaskEncoder",
    "TaskEncoder",
    "VarlenPack",
    "collate",
    "collate_samples",
    "pad_stack",
    "stack_varlen",
    "varlen_pack",
]
