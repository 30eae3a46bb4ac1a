"""Torch integration: the DataLoader over recipes, topology and state_dict.

The only package that imports ``torch.utils.data`` / ``torch.distributed``. Names load on first
use, so the plan side (``get_train_dataset(...).plan``, ``Topology``) works without importing
torch: ``fpipe plan`` and ``fpipe info`` start fast. Datasets are built by :mod:`fpipe.datasets`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fpipe._lazy import lazy_exports

if TYPE_CHECKING:
    from fpipe.loader._ray_workers import release_ray_actors
    from fpipe.loader.consistency import ConsistencyError
    from fpipe.loader.dataloader import Loader, LoaderStats, get_loader, get_savable_loader
    from fpipe.loader.planned import PlannedDataset
    from fpipe.loader.topology import Topology, WorkerConfig

_LAZY = {
    "ConsistencyError": "fpipe.loader.consistency",
    "Loader": "fpipe.loader.dataloader",
    "LoaderStats": "fpipe.loader.dataloader",
    "PlannedDataset": "fpipe.loader.planned",
    "Topology": "fpipe.loader.topology",
    "WorkerConfig": "fpipe.loader.topology",
    "get_loader": "fpipe.loader.dataloader",
    "get_savable_loader": "fpipe.loader.dataloader",
    "release_ray_actors": "fpipe.loader._ray_workers",
}

__all__ = [
    "ConsistencyError",
    "Loader",
    "LoaderStats",
    "PlannedDataset",
    "Topology",
    "WorkerConfig",
    "get_loader",
    "get_savable_loader",
    "release_ray_actors",
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
