"""The plan tier: every decision about order (which ref comes next, on which rank, in which
batch), made on sample references and index metadata only. No payload is read here.

Each step is one module holding its Config, its State, a factory and pure functions; the step
model (views, stages, sources) is explained in :mod:`fpipe.core.stage`.
"""

from typing import TYPE_CHECKING

from fpipe._lazy import lazy_exports
from fpipe.plan._filter import FilterConfig, FilterState, filter_refs
from fpipe.plan._map_refs import MapRefsConfig, map_refs
from fpipe.plan._shuffle import (
    SliceShuffleConfig,
    WindowShuffleConfig,
    WindowShuffleState,
    slice_shuffle,
    window_shuffle,
)
from fpipe.plan.batch import BatchConfig, BatchState, Remainder, ScheduledBatchConfig, batch
from fpipe.plan.batch_schedule import BatchSchedule
from fpipe.plan.blend import BlendConfig, BlendState, blend, blend_counters
from fpipe.plan.blend_choice import WeightSchedule
from fpipe.plan.buckets._assign import assign_buckets
from fpipe.plan.buckets._config import Bucket, BucketTable, load_bucket_config, parse_bucket_config
from fpipe.plan.buckets.group_batch import GroupBatchState
from fpipe.plan.buckets.stage import (
    BucketBatchConfig,
    GroupBatchConfig,
    bucket_batches,
    group_batches,
)
from fpipe.plan.concat import ConcatConfig, concat
from fpipe.plan.distribute import (
    DistributeConfig,
    DistributeState,
    PerRankConfig,
    ScheduledDistributeConfig,
    ScheduledDistributeState,
    distribute,
    per_rank,
)
from fpipe.plan.packing.stage import PackConfig, PackState, pack
from fpipe.plan.repeat import RepeatConfig, RepeatState, repeat
from fpipe.plan.source import InMemoryConfig, SamplesConfig, View, in_memory, samples
from fpipe.plan.stats import drop_counters

__all__ = [
    "BatchConfig",
    "BatchSchedule",
    "BatchState",
    "BlendConfig",
    "BlendState",
    "Bucket",
    "BucketBatchConfig",
    "BucketTable",
    "ConcatConfig",
    "DistributeConfig",
    "DistributeState",
    "FilterConfig",
    "FilterState",
    "GroupBatchConfig",
    "GroupBatchState",
    "InMemoryConfig",
    "MapRefsConfig",
    "PackConfig",
    "PackState",
    "PerRankConfig",
    "Remainder",
    "RepeatConfig",
    "RepeatState",
    "SamplesConfig",
    "ScheduledBatchConfig",
    "ScheduledDistributeConfig",
    "ScheduledDistributeState",
    "SliceShuffleConfig",
    "View",
    "WeightSchedule",
    "WindowShuffleConfig",
    "WindowShuffleState",
    "assign_buckets",
    "batch",
    "blend",
    "blend_counters",
    "bucket_batches",
    "concat",
    "distribute",
    "drop_counters",
    "filter_refs",
    "group_batches",
    "in_memory",
    "load_bucket_config",
    "map_refs",
    "pack",
    "parse_bucket_config",
    "per_rank",
    "repeat",
    "samples",
    "slice_shuffle",
    "window_shuffle",
]

# Submodules load on first use: `import fpipe` then `fpipe.plan.<module>` works. Hidden from
# type checkers, which would otherwise take any misspelt name of this package for Any.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, {})
