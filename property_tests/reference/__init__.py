"""A slow, independent reference of the plan's documented semantics (invariant 8).

Written from the documents, not from the plan's code: docs/plan.md, docs/distributed.md,
docs/steering.md, docs/metadataset.md, docs/energon_migration.md and the design notes
docs/design/{rng,blocks,blend,plan_model}.md. It imports nothing of fpipe: the counter-based
RNG (SplitMix64 finalizer, ``fold_in``, ``key``, ``name_id``, the keyed Feistel permutation) is
re-implemented scalar in :mod:`.rng` from docs/design/rng.md. It uses plain lists and ints, one
ref at a time: no numpy, no blocks of positions, no memo, no run-skipping, no seek.

Stages compose as plain functions over an iterator of :class:`~.views.Ref`:

* views (:mod:`.views`): a dataset's samples with metadata columns; epochs of slices (fixed
  ``max_samples_per_sequence`` slices, or Energon's ragged slices along shards) in a keyed
  order per epoch; ``repeat`` over ``num_epochs``;
* stream stages (:mod:`.stages`): ``window_shuffle``, ``filter_refs`` (counting what they drop);
* blends (:mod:`.blend`): weighted by samples (constant, step or linear schedules), epochized,
  weighted by units (tokens), with online weight changes from the frontier;
* pack selection (:mod:`.packing`, docs/packing.md and docs/design/packing.md): each strategy
  item by item with integer costs, buffers along the stream, packs shuffled per buffer;
* steps (:mod:`.steps`): global batch sizes (fixed, a step table, Megatron's ramp-up),
  distribution to ranks in global mode, short final batches, skipped steps, online changes
  before their step, and world-size / batch-size changes from a step on (elastic restores);
* grouped batching (:mod:`.buckets`, docs/buckets.md and docs/design/buckets.md): OpenSora's
  buckets or a criterion's groups per window of an epoch, one group per global step on every
  rank, remainders, world-size changes from a step on;
* blends of whole datasets (:mod:`.recipe_blend`, docs/design/blend.md): one rank's batches of
  several plans, weighted or concatenated, and mixed in groups.

To add a stage, write it as a generator over refs (or over groups of refs) from its
documentation, and put it in the chain where the plan has it; a stage with lookahead must pull
lazily, as :func:`.stages.window_shuffle` does, so the blend's position stays the frontier of
online changes.
"""

from property_tests.reference.blend import Blend, Schedule
from property_tests.reference.packing import pack
from property_tests.reference.stages import Counters, filter_refs, window_shuffle
from property_tests.reference.steps import Phase, Step, by_step, fixed, rampup, steps
from property_tests.reference.views import (
    Dataset,
    EpochView,
    Ref,
    dataset_stream,
    repeat,
    shard_slices,
    slice_shuffled,
)

__all__ = [
    "Blend",
    "Counters",
    "Dataset",
    "EpochView",
    "Phase",
    "Ref",
    "Schedule",
    "Step",
    "by_step",
    "dataset_stream",
    "filter_refs",
    "fixed",
    "pack",
    "rampup",
    "repeat",
    "shard_slices",
    "slice_shuffled",
    "steps",
    "window_shuffle",
]
