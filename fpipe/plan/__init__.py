"""The plan tier: every decision about order (which ref comes next, on which rank, in which
batch), made on sample references and index metadata only. No payload is read here.

Each step is one module holding its Config, its State, a factory and pure functions; the step
model (views, stages, sources) is explained in :mod:`fpipe.core.stage`.
"""

from fpipe.plan.batch import BatchConfig, BatchState, Remainder, batch
from fpipe.plan.distribute import (
    DistributeConfig,
    DistributeState,
    PerRankConfig,
    distribute,
    per_rank,
)
from fpipe.plan.filter import FilterConfig, FilterState, filter_refs
from fpipe.plan.map_refs import MapRefsConfig, map_refs
from fpipe.plan.pack import PackConfig, PackState, pack
from fpipe.plan.repeat import RepeatConfig, RepeatState, repeat
from fpipe.plan.shuffle import (
    SliceShuffleConfig,
    WindowShuffleConfig,
    WindowShuffleState,
    slice_shuffle,
    window_shuffle,
)
from fpipe.plan.source import InMemoryConfig, SamplesConfig, View, in_memory, samples
from fpipe.plan.stats import drop_counters

__all__ = [
    "BatchConfig",
    "BatchState",
    "DistributeConfig",
    "DistributeState",
    "FilterConfig",
    "FilterState",
    "InMemoryConfig",
    "MapRefsConfig",
    "PackConfig",
    "PackState",
    "PerRankConfig",
    "Remainder",
    "RepeatConfig",
    "RepeatState",
    "SamplesConfig",
    "SliceShuffleConfig",
    "View",
    "WindowShuffleConfig",
    "WindowShuffleState",
    "batch",
    "distribute",
    "drop_counters",
    "filter_refs",
    "in_memory",
    "map_refs",
    "pack",
    "per_rank",
    "repeat",
    "samples",
    "slice_shuffle",
    "window_shuffle",
]
