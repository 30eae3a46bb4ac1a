"""The materialize tier: a pure function from a batch recipe to a batch, run in loader workers."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fpipe.materialize.materializer import MaterializedBatch, Materializer
    from fpipe.materialize.sources import DatasetSource

_LAZY = {
    "DatasetSource": "fpipe.materialize.sources",
    "MaterializedBatch": "fpipe.materialize.materializer",
    "Materializer": "fpipe.materialize.materializer",
}

__all__ = ["DatasetSource", "MaterializedBatch", "Materializer"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fpipe.materialize' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
