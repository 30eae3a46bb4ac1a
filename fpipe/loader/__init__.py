"""Torch integration: the DataLoader over recipes, topology and state_dict.

The only package that imports ``torch.utils.data`` / ``torch.distributed``.
"""

from fpipe.loader.consistency import ConsistencyError
from fpipe.loader.dataloader import Loader, LoaderStats, get_loader, get_savable_loader
from fpipe.loader.dataset import PlannedDataset, get_train_dataset, get_val_dataset
from fpipe.loader.materialize import DatasetSource, MaterializedBatch, Materializer
from fpipe.loader.topology import Topology, WorkerConfig

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
