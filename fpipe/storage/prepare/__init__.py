"""Preparing datasets: scan, probe and index them (`fpipe prepare`), check them (`fpipe check`)."""

from typing import TYPE_CHECKING

from fpipe._lazy import lazy_exports
from fpipe.storage.prepare.run import (
    PARTS_DIR,
    PrepareOptions,
    PrepareReport,
    Problem,
    prepare_dataset,
)

__all__ = ["PARTS_DIR", "PrepareOptions", "PrepareReport", "Problem", "prepare_dataset"]

# Submodules load on first use: `import fpipe` then `fpipe.storage.prepare.<module>` works.
# Hidden from type checkers, which would otherwise take any misspelt name here for Any.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, {})
