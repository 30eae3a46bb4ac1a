"""Building datasets: a dataset path or metadataset and its options -> a plan and a materializer.

Names load on first use, so ``import fpipe.datasets`` does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fpipe.datasets.dataset import get_train_dataset, get_val_dataset

_LAZY = {
    "get_train_dataset": "fpipe.datasets.dataset",
    "get_val_dataset": "fpipe.datasets.dataset",
}

__all__ = ["get_train_dataset", "get_val_dataset"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fpipe.datasets' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
