"""Building datasets: a dataset path or metadataset and its options -> a plan and a materializer.

Names load on first use, so ``import fpipe.datasets`` does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fpipe._lazy import lazy_exports

if TYPE_CHECKING:
    from fpipe.datasets.batch_blend import blend_datasets, concat_datasets
    from fpipe.datasets.batch_mix import mix_datasets
    from fpipe.datasets.dataset import get_train_dataset, get_val_dataset
    from fpipe.datasets.options import DatasetOptions

_LAZY = {
    "DatasetOptions": "fpipe.datasets.options",
    "blend_datasets": "fpipe.datasets.batch_blend",
    "concat_datasets": "fpipe.datasets.batch_blend",
    "get_train_dataset": "fpipe.datasets.dataset",
    "get_val_dataset": "fpipe.datasets.dataset",
    "mix_datasets": "fpipe.datasets.batch_mix",
}

__all__ = [
    "DatasetOptions",
    "blend_datasets",
    "concat_datasets",
    "get_train_dataset",
    "get_val_dataset",
    "mix_datasets",
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
