"""User hooks of the materialize tier: the TaskEncoder protocol, collate and packing helpers.

Importing this package imports torch (collate builds tensors).
"""

from fpipe.encode.collate import collate, collate_samples, pad_stack
from fpipe.encode.task_encoder import DefaultTaskEncoder, TaskEncoder

__all__ = ["DefaultTaskEncoder", "TaskEncoder", "collate", "collate_samples", "pad_stack"]
