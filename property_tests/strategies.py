"""Hypothesis strategies: random datasets, seeds and plan pipelines (built fresh on demand).

A :class:`PlanSpec` is plain data; ``spec.build(rank=..., world_size=...)`` makes a new
:class:`~fpipe.core.Pipeline` each call, so a restored run shares nothing but snapshot bytes.

To put a new stream step into the random pipelines of every property, add an entry to
``OPTIONAL_STAGES``: a name and ``(spec) -> Stage`` built from the spec's plain data (it goes
after the shuffles and filter, before distribution, in the order of the table). The step must
keep the stream a stream of refs; one that changes what distribution sees (groups, buckets)
needs its own branch in ``PlanSpec.build``.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
from hypothesis import strategies as st

from fpipe.core import Pipeline, chain
from fpipe.plan import (
    BatchSchedule,
    batch,
    distribute,
    filter_refs,
    map_refs,
    pack,
    repeat,
    samples,
    slice_shuffle,
    window_shuffle,
)


def add_bucket(refs):
    """A pure metadata map used by random pipelines (adds a derived column)."""
    return refs.with_columns(bucket=refs.column("tokens") // 10)


#: Optional stream steps drawn into random pipelines: name -> (spec -> Stage).
OPTIONAL_STAGES = {
    "map_refs": lambda spec: map_refs(add_bucket),
}


@dataclasses.dataclass(frozen=True)
class PlanSpec:
    num_samples: int
    seed: int
    num_epochs: int
    slice_size: int | None
    window: int | None
    token_limit: int | None  # filter tokens < token_limit
    extras: tuple[str, ...]  # names of OPTIONAL_STAGES, in table order
    per_rank_batch: int
    world_size: int
    drop_last: bool
    pack: tuple[str, int, int] | None = None  # (strategy, token budget, packing_buffer_size)

    def tokens(self) -> np.ndarray:
        return (np.arange(self.num_samples) * 7919 + self.seed) % 50

    def build(self, rank: int = 0, world_size: int | None = None, per_rank_batch=None) -> Pipeline:
        world = self.world_size if world_size is None else world_size
        b = self.per_rank_batch if per_rank_batch is None else per_rank_batch
        view = samples(self.num_samples, columns={"tokens": self.tokens()})
        if self.slice_size:
            view = slice_shuffle(view, self.slice_size)
        stages = []
        if self.window:
            stages.append(window_shuffle(self.window))
        if self.token_limit is not None:
            stages.append(filter_refs("tokens", "<", self.token_limit))
        stages.extend(OPTIONAL_STAGES[name](self) for name in self.extras)
        if self.pack is not None:  # packs (groups of refs) are the items from here on
            strategy, budget, buffer = self.pack
            stages.append(pack({"tokens": budget}, strategy=strategy, packing_buffer_size=buffer))
        stages.append(distribute(b * world, rank=rank, world_size=world, drop_last=self.drop_last))
        stages.append(batch(b, drop_last=self.drop_last))
        return Pipeline(chain(repeat(view, self.num_epochs), *stages), seed=self.seed)

    def kept(self) -> np.ndarray:
        """Sample indices that survive the filter (what coverage expects per epoch)."""
        idx = np.arange(self.num_samples)
        if self.token_limit is None:
            return idx
        return idx[self.tokens() < self.token_limit]


# The strategies plan_specs draws from, made once (not on every draw: building and validating
# them again cost a third of the time each example took to draw).
_SEEDS = st.integers(0, 2**32)
_EPOCHS = st.integers(1, 3)
_SLICE_SIZES = st.one_of(st.none(), st.integers(1, 12))
_WINDOWS = st.one_of(st.none(), st.integers(1, 40))
_TOKEN_LIMITS = st.one_of(st.none(), st.integers(0, 50))
_BATCHES = st.integers(1, 6)
_PACKS = st.one_of(
    st.none(),
    st.tuples(
        st.sampled_from(("greedy", "ffd", "bfd", "balanced")),
        st.integers(50, 150),  # tokens are < 50: no sample is over budget
        st.integers(1, 30),
    ),
)


@functools.cache
def _integers(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.integers(lo, hi)


@st.composite
def plan_specs(draw, max_samples: int = 60, world_sizes=(1, 4), min_samples: int = 1) -> PlanSpec:
    """Random plans over ``min_samples``-``max_samples`` samples. Up to 60 by default: every
    step's size (a slice of 12 at most, a window of 40, a packing buffer of 30, a global batch of
    6 per rank on up to 5 ranks) then falls both below and above the sample count, one sample and
    uneven splits included. Up to 120 (the bound before) took twice as long and ran no other
    line of fpipe in the properties that use the default."""
    return PlanSpec(
        num_samples=draw(_integers(min_samples, max_samples)),
        seed=draw(_SEEDS),
        num_epochs=draw(_EPOCHS),
        slice_size=draw(_SLICE_SIZES),
        window=draw(_WINDOWS),
        token_limit=draw(_TOKEN_LIMITS),
        extras=tuple(name for name in OPTIONAL_STAGES if draw(st.booleans())),
        per_rank_batch=draw(_BATCHES),
        world_size=draw(_integers(*world_sizes)),
        drop_last=draw(st.booleans()),
        pack=draw(_PACKS),
    )


@st.composite
def mix_changes(draw, steps: int, max_changes: int = 4):
    """Online weight changes of a three-dataset blend at steps in ``[0, steps]`` (weights from
    a few values, never all zero; often the weights of the change before again, as a
    controller that sends its weights every few steps does), in step order."""
    from fpipe.loader.steering import MixChange
    from fpipe.plan.online_mix import entry_weights, weights32

    out: list = []
    for step in sorted(draw(st.lists(st.integers(0, steps), max_size=max_changes))):
        if out and draw(st.booleans()):
            out.append(MixChange(step, out[-1].weights))
            continue
        w = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 3.0]), min_size=3, max_size=3))
        if sum(w) == 0:
            w[0] = 1.0
        out.append(MixChange(step, entry_weights(weights32(w))))
    return out


def live_recipes(plan: Pipeline, steps: int, ranges, changes) -> list:
    """``(state after, recipe)`` of the first ``steps`` recipes a loader delivers from the start
    of ``plan`` with skip ``ranges`` and online weight ``changes`` (fewer at the end)."""
    from fpipe.loader.steering import planned_recipes

    out = []
    for state, recipe in planned_recipes(plan, plan.init(), ranges, changes):
        if recipe is None or len(out) == steps:
            break
        out.append((state, recipe))
    return out


def steering_tail(p: dict, g: int, rank: int, world: int, *, first: int, buffer: int) -> list:
    """The stages after the blend in the steering properties: a window shuffle of
    ``p["window"]`` refs (none when 0), plan-tier packing (``p["tail"] == "pack"``, a greedy
    packer over ``buffer`` refs), then ``distribute`` / ``batch`` of ``g`` refs per step on
    ``world`` ranks, or (``p["tail"] == "ramp"``) a ramp-up from ``first`` refs per step to
    ``g``."""
    stages = [window_shuffle(p["window"])] if p["window"] else []
    if p["tail"] == "pack":
        stages.append(pack({"tokens": 40}, strategy="greedy", packing_buffer_size=buffer))
    if p["tail"] == "ramp":
        sizes = BatchSchedule.of({0: first, 3: 2 * first, 7: g})
        return [
            *stages,
            distribute(sizes, rank=rank, world_size=world),
            batch(sizes.per_rank(world)),
        ]
    return [*stages, distribute(g, rank=rank, world_size=world), batch(g // world)]
