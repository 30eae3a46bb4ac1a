"""The materialize tier: a pure function from a batch recipe to a batch, run in loader workers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fpipe._lazy import lazy_exports

if TYPE_CHECKING:
    from fpipe.materialize.materializer import MaterializedBatch, Materializer
    from fpipe.materialize.sources import DatasetSource

_LAZY = {
    "DatasetSource": "fpipe.materialize.sources",
    "MaterializedBatch": "fpipe.materialize.materializer",
    "Materializer": "fpipe.materialize.materializer",
}

__all__ = ["DatasetSource", "MaterializedBatch", "Materializer"]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
