"""Preparing datasets: scan, probe and index them (`fpipe prepare`), check them (`fpipe check`)."""

from fpipe.storage.prepare.run import (
    PARTS_DIR,
    PrepareOptions,
    PrepareReport,
    Problem,
    prepare_dataset,
)

__all__ = ["PARTS_DIR", "PrepareOptions", "PrepareReport", "Problem", "prepare_dataset"]
