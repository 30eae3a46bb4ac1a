"""Energon's ``get_train_dataset``: fpipe's, with the ranks' parts Energon gives them.

On several ranks Energon shards each dataset over its global workers (``num_workers *
world_size``), so a rank's part, and its ``len()``, is Energon's (55 samples on 3 ranks of 5
workers: 19, 19, 17, every sample on one rank); fpipe's own default deals global batches, which
leaves a short last global batch out. ``fpipe.energon.get_train_dataset`` therefore defaults to
``distribution="energon"`` (:mod:`fpipe.plan.worker_split`) when the worker config has more than
one rank; a ``distribution=`` given explicitly is kept (``"global"`` for snapshots that restore on
another world size).
"""

from __future__ import annotations

import functools
import os
from typing import Any

from fpipe.datasets import get_train_dataset as _fpipe_get_train_dataset
from fpipe.loader import Topology

__all__ = ["get_train_dataset"]


@functools.wraps(_fpipe_get_train_dataset)
def get_train_dataset(path: str | os.PathLike, **kwargs: Any) -> Any:
    """:func:`fpipe.get_train_dataset` with Energon's split of the data to ranks by default
    (see the module doc)."""
    if "distribution" not in kwargs:
        topo = kwargs.get("topology") or kwargs.get("worker_config") or Topology.from_env()
        if topo.world_size > 1:
            kwargs["distribution"] = "energon"
    return _fpipe_get_train_dataset(path, **kwargs)
