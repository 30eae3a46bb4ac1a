"""What :meth:`fpipe.loader.Loader.stats` reports: the loader's state, its plan's counters and
a blend's per-dataset counters, and its worker recoveries."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fpipe.loader.state import LoaderStats
from fpipe.plan.blend import blend_counters
from fpipe.plan.stats import drop_counters

if TYPE_CHECKING:  # the loader calls this with itself
    from fpipe.loader.dataloader import Loader

__all__ = ["add_io", "loader_stats"]


def add_io(totals: dict, io: dict | None) -> None:
    """Add a worker's read counters to the loader's (high-water marks: the largest)."""
    for k, v in (io or {}).items():
        totals[k] = max(totals.get(k, 0), v) if k.endswith("_peak_bytes") else totals.get(k, 0) + v


def loader_stats(loader: Loader) -> LoaderStats:
    s = loader._state
    steps = loader.plan.stats(s.plan)
    dropped = drop_counters(steps)
    # samples of the final partial batches the loader made (packs or groups) and dropped
    if s.pack_remainder and getattr(loader.dataset, "group_batches", False):
        dropped["group_remainder"] = dropped.get("group_remainder", 0) + s.pack_remainder
    elif s.pack_remainder:
        dropped["pack_remainder"] = s.pack_remainder
    at = loader.plan.position(s.plan)
    epoch, position = (s.epoch, None) if at is None else at
    per_dataset = blend_counters(loader.plan, s.plan)
    healer = loader._healer
    return LoaderStats(
        s.batches, s.samples, s.skipped, epoch, dropped, steps, position, per_dataset,
        recoveries=0 if healer is None else healer.recoveries,
        recovered={} if healer is None else dict(healer.by_reason),
        skip_steps=s.skip,
        io=dict(loader._io),
    )  # fmt: skip
