"""Torch integration: the DataLoader over recipes, topology and state_dict.

The only package that imports ``torch.utils.data`` / ``torch.distributed``. Names load on first
use, so the plan side (``get_train_dataset(...).plan``, ``Topology``) works without importing
torch: ``fpipe plan`` and ``fpipe info`` start fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fpipe.loader.consistency import ConsistencyError
    from fpipe.loader.dataloader import Loader, LoaderStats, get_loader, get_savable_loader
    from fpipe.loader.dataset import PlannedDataset, get_train_dataset, get_val_dataset
    from fpipe.loader.materialize import MaterializedBatch, Materializer
    from fpipe.loader.sources import DatasetSource
    from fpipe.loader.topology import Topology, WorkerConfig

_LAZY = {
    "ConsistencyError": "fpipe.loader.consistency",
    "DatasetSource": "fpipe.loader.sources",
    "Loader": "fpipe.loader.dataloader",
    "LoaderStats": "fpipe.loader.dataloader",
    "MaterializedBatch": "fpipe.loader.materialize",
    "Materializer": "fpipe.loader.materialize",
    "PlannedDataset": "fpipe.loader.dataset",
    "Topology": "fpipe.loader.topology",
    "WorkerConfig": "fpipe.loader.topology",
    "get_loader": "fpipe.loader.dataloader",
    "get_savable_loader": "fpipe.loader.dataloader",
    "get_train_dataset": "fpipe.loader.dataset",
    "get_val_dataset": "fpipe.loader.dataset",
}

__all__ = [
    "ConsistencyError",
    "DatasetSource",
    "Loader",
    "LoaderStats",
    "MaterializedBatch",
    "Materializer",
    "PlannedDataset",
    "Topology",
    "WorkerConfig",
    "get_loader",
    "get_savable_loader",
    "get_train_dataset",
    "get_val_dataset",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fpipe.loader' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
