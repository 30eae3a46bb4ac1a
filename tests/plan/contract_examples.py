"""The contract table: one example plan per plan step, and a variant per config field.

The sweep (test_contract_sweep.py) runs every entry through the contract checks (purity, exact
resume through bytes in a freshly built pipeline, bounded state) and, for every field of the
step's config, builds the variant and checks that the fingerprint changes and that a restore
is refused naming the step and the field (for a field declared ``compatible``: that the
restore is accepted). Every public step of ``fpipe.plan.__all__`` must have an entry.

To register a new step: add an ``Example`` to ``EXAMPLES`` with a ``build(**overrides)`` that
returns the plan's Source, the step's name in it, and one override dict per config field.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from fpipe.core import Refs, Source, chain
from fpipe.plan import (
    BatchSchedule,
    batch,
    blend,
    bucket_batches,
    concat,
    distribute,
    filter_refs,
    group_batches,
    in_memory,
    map_refs,
    pack,
    per_rank,
    repeat,
    samples,
    slice_shuffle,
    window_shuffle,
)
from fpipe.plan.recipe_blend import blend_recipes
from fpipe.plan.recipe_mix import mix_recipes
from fpipe.plan.shard_slices import RaggedSlices, ragged_slice_shuffle
from tests.plan.interleave import interleave

N = 23
COLUMNS = {"t": (np.arange(N) * 7) % 11, "u": np.arange(N) % 3}


@dataclasses.dataclass(frozen=True)
class Example:
    """``factory``: the public name (in ``fpipe.plan.__all__``) or dotted path it exercises;
    ``build(**overrides)``: a fresh Source of a plan that uses it; ``step``: the step's path in
    that plan; ``variants``: config field -> overrides that change that field."""

    factory: str
    build: Callable[..., Source]
    step: str
    variants: dict[str, dict[str, Any]]
    cut_points: tuple[int, ...] = (0, 1, 6, 17)
    limit: int | None = 60


def src(num_epochs=2):
    """The default input of a stream-step example: 2 epochs of N samples with columns."""
    return repeat(samples(N, columns=COLUMNS), num_epochs)


def keep_even(refs: Refs) -> np.ndarray:
    return refs.index % 2 == 0


def add_one(refs: Refs) -> Refs:
    return refs.with_columns(index=refs.index + 1)


def times_two(refs: Refs) -> Refs:
    return refs.with_columns(index=refs.index * 2)


def _samples(n=N, dataset=0, cols=("t",), source_id="", reverse=False):
    idx = np.arange(n)[::-1] if reverse else None
    view = samples(
        None if reverse else n,
        indices=idx,
        dataset=dataset,
        columns={c: COLUMNS[c] for c in cols},
        source_id=source_id,
    )
    return repeat(view, 2)


def _in_memory(n=N, offset=0, source_id=""):
    return repeat(in_memory(Refs.of(index=np.arange(n) + offset), source_id=source_id), 2)


def _filter(column="t", op="<", value=7, fn=None):
    return chain(src(), filter_refs(fn) if fn else filter_refs(column, op, value))


def _distribute(gbs=4, rank=0, world=1, drop_last=True):
    return chain(src(), distribute(gbs, rank=rank, world_size=world, drop_last=drop_last))


def _scheduled(table=((0, 2), (3, 4)), rank=0, world=1, drop_last=True):
    sizes = BatchSchedule.of(list(table))
    dist = distribute(sizes, rank=rank, world_size=world, drop_last=drop_last)
    return chain(src(), dist, batch(sizes.per_rank(world), drop_last=drop_last))


def clip_half(costs, limits):
    """A truncate hook: halve the costs, then clip to the budgets."""
    return np.minimum(costs // 2, limits)


def _pack(budgets=(("t", 12),), strategy="ffd", buffer=7, over="drop", cut=None, shuffle=True):
    step = pack(
        dict(budgets),
        strategy=strategy,
        packing_buffer_size=buffer,
        over_budget=over,
        truncate=cut,
        shuffle_packs=shuffle,
    )
    return chain(src(), step, batch(2, drop_last=False))


def _interleave(k=2, window=5):
    subs = [chain(src(), window_shuffle(window)) for _ in range(k)]
    return interleave(*subs)


BUCKET_COLUMNS = {
    "width": 40 + (np.arange(N) * 13) % 50,
    "height": 40 + (np.arange(N) * 7) % 30,
    "frames": 1 + (np.arange(N) * 5) % 9,
    "w2": 40 + (np.arange(N) * 3) % 50,
    "h2": 40 + (np.arange(N) * 11) % 30,
}
BUCKETS = {"1:1": {32: {1: (1.0, 2), 4: (0.8, 1)}}, "4:3": {"36x48": {1: (1.0, 1), 5: (1.0, 2)}}}


def _buckets(config=BUCKETS, width="width", height="height", frames="frames", epochs=2, **kw):
    view = slice_shuffle(samples(N, columns=BUCKET_COLUMNS), 3)
    return bucket_batches(
        view, config, width=width, height=height, frames=frames, num_epochs=epochs, **kw
    )


def by_t(row):
    return row["t"] % 3, 1


def by_u(row):
    return row["u"], 2


def _groups(fn=by_t, cols=("t", "u"), epochs=2, **kw):
    view = slice_shuffle(samples(N, columns=COLUMNS), 3)
    return group_batches(view, fn, columns=cols, num_epochs=epochs, **kw)


def _blend(
    names=("a", "b"),
    sizes=(9, 14),
    weights=(1.0, 2.0),
    reps=None,
    epochs=2,
    allow=False,
    k=3,
    unit=None,
    draw="hash",
):
    views = [
        slice_shuffle(samples(n, dataset=d, columns={"t": np.arange(n) % 5 + d}), k)
        for d, n in enumerate(sizes)
    ]
    mix = dict(repetitions=reps) if reps else dict(weights=weights)
    head = blend(
        views,
        names=names,
        num_epochs=epochs,
        allow_changed_weights=allow,
        unit=unit,
        draw=draw,
        **mix,
    )
    return chain(head, window_shuffle(5))


def _ragged(starts=(0, 4, 5, 11, 20)):
    return repeat(ragged_slice_shuffle(samples(N), RaggedSlices(np.array(starts), N)), 2)


def _concat(names=("a", "b"), sizes=(9, 14), limit=None):
    views = [samples(n, dataset=d) for d, n in enumerate(sizes)]
    return repeat(concat(views, names=list(names), limit=limit), 2)


def _mix_batches(size=4):
    # Energon's MixBatchDataset: one-sample batches of two datasets drawn by weight, grouped
    parts = [chain(repeat(samples(n, dataset=0), 2), batch(1)) for n in (9, 14)]
    return mix_recipes(blend_recipes(parts, seeds=[1, 2], weights=[2.0, 8.0]), size)


#: Variants of the config fields bucket_batches and group_batches share (their window shuffle,
#: epochs, distribution and remainder).
GROUPED_BATCH_VARIANTS: dict[str, dict[str, Any]] = {
    "window": {"window": 10},
    "shuffle": {"shuffle": False},
    "num_epochs": {"epochs": 3},
    "rank": {"rank": 1, "world_size": 2},
    "world_size": {"world_size": 2},
    "remainder": {"drop_last": False},
}

EXAMPLES: list[Example] = [
    Example(
        "bucket_batches",
        _buckets,
        "bucket",
        {
            "buckets": {"config": {**BUCKETS, "1:1": {32: {1: (1.0, 1), 4: (0.8, 1)}}}},
            "width": {"width": "w2"},
            "height": {"height": "h2"},
            "frames": {"frames": None},
            **GROUPED_BATCH_VARIANTS,
        },
    ),
    Example(
        "group_batches",
        _groups,
        "group_batches",
        {
            "criterion": {"fn": by_u},
            "columns": {"cols": ("u", "t")},
            "max_groups": {"max_groups": 8},
            **GROUPED_BATCH_VARIANTS,
        },
    ),
    Example(
        "samples",
        _samples,
        "samples",
        {
            "num_samples": {"n": N - 1},
            "indices": {"reverse": True},
            "dataset": {"dataset": 1},
            "columns": {"cols": ("t", "u")},
            "source_id": {"source_id": "other"},
        },
    ),
    Example(
        "in_memory",
        _in_memory,
        "in_memory",
        {"num_refs": {"n": N - 1}, "refs": {"offset": 100}, "source_id": {"source_id": "x"}},
    ),
    Example(
        "slice_shuffle",
        lambda k=4: repeat(slice_shuffle(samples(N), k), 2),
        "slice_shuffle",
        {"slice_size": {"k": 5}},
    ),
    Example(
        "fpipe.plan.shard_slices.ragged_slice_shuffle",
        _ragged,
        "slice_shuffle",
        {"num_slices": {"starts": (0, 4, 5, 11)}, "starts": {"starts": (0, 4, 6, 11, 20)}},
    ),
    Example(
        "per_rank",
        lambda rank=0, world=2: repeat(per_rank(samples(N), rank=rank, world_size=world), 2),
        "per_rank",
        {"rank": {"rank": 1}, "world_size": {"world": 3}},
    ),
    Example(
        "repeat",
        lambda epochs=2: repeat(samples(N), epochs),
        "repeat",
        {"num_epochs": {"epochs": 3}},
    ),
    Example(
        "window_shuffle",
        lambda w=5: chain(src(), window_shuffle(w)),
        "window_shuffle",
        {"window_size": {"w": 6}},
    ),
    Example(
        "filter_refs",
        _filter,
        "filter",
        {
            "column": {"column": "u"},
            "op": {"op": "<="},
            "value": {"value": 5},
            "fn": {"fn": keep_even},
        },
    ),
    Example(
        "map_refs",
        lambda fn=add_one: chain(src(), map_refs(fn, name="map_refs")),
        "map_refs",
        {"fn": {"fn": times_two}},
    ),
    Example(
        "distribute",
        _distribute,
        "distribute",
        {
            "global_batch_size": {"gbs": 6},
            "rank": {"rank": 1, "world": 2},
            "world_size": {"world": 2},
            "remainder": {"drop_last": False},
        },
    ),
    Example(  # a global batch size schedule (Megatron's ramp-up is one)
        "distribute",
        _scheduled,
        "distribute",
        {
            "schedule": {"table": ((0, 2), (2, 6))},
            "rank": {"rank": 1, "world": 2},
            "world_size": {"world": 2},
            "remainder": {"drop_last": False},
        },
        cut_points=(0, 1, 3, 5),
    ),
    Example(
        "batch",
        _scheduled,
        "batch",
        {"schedule": {"table": ((0, 2), (2, 6))}, "remainder": {"drop_last": False}},
    ),
    Example(
        "batch",
        lambda b=4, drop_last=True: chain(src(), batch(b, drop_last=drop_last)),
        "batch",
        {"batch_size": {"b": 3}, "remainder": {"drop_last": False}},
        cut_points=(0, 1, 5),
    ),
    Example(
        "pack",
        _pack,
        "pack",
        {
            "budgets": {"budgets": (("t", 12), ("u", 3))},
            "strategy": {"strategy": "balanced"},
            "packing_buffer_size": {"buffer": 9},
            "over_budget": {"over": "truncate"},
            "truncate": {"over": "truncate", "cut": clip_half},
            "shuffle_packs": {"shuffle": False},
        },
        cut_points=(0, 1, 4, 9),
    ),
    Example(
        "tests.plan.interleave.interleave",
        _interleave,
        "interleave",
        {"num_inputs": {"k": 3}},
    ),
    Example(  # a step inside a sub-plan is addressed by its path
        "tests.plan.interleave.interleave",
        _interleave,
        "interleave/1/window_shuffle",
        {"window_size": {"window": 6}},
        cut_points=(0, 3),
    ),
    Example(
        "blend",
        _blend,
        "blend",
        {
            "datasets": {"names": ("a", "c")},
            "sizes": {"sizes": (9, 15)},
            "mode": {"reps": (1, 2)},
            "counts": {"reps": (1, 2)},
            "num_epochs": {"epochs": 3},
            # compatible: checked by name against the restored state, accepted when allowed
            "schedule": {"weights": (2.0, 1.0), "allow": True},
            "allow_changed_weights": {"allow": True},
            "unit": {"unit": "t", "allow": True},  # compatible, checked as the weights are
            "draw": {"draw": "quota"},  # compatible, refused by the blend's own check
        },
    ),
    Example(  # a blend by units (tokens): a unit-by-unit choice, its own state
        "blend",
        functools.partial(_blend, unit="t"),
        "blend",
        {
            "datasets": {"names": ("a", "c")},
            "sizes": {"sizes": (9, 15)},
            "mode": {"reps": (1, 2), "unit": None},
            "counts": {"reps": (1, 2), "unit": None},
            "num_epochs": {"epochs": 3},
            "schedule": {"weights": (2.0, 1.0), "allow": True},
            "allow_changed_weights": {"allow": True},
            "unit": {"unit": None, "allow": True},
            "draw": {"draw": "quota", "unit": None},
        },
    ),
    Example(  # an epochized blend; a dataset's own step is addressed by its path
        "blend",
        lambda k=3: _blend(reps=(2, 1), k=k),
        "blend/0/slice_shuffle",
        {"slice_size": {"k": 4}},
    ),
    Example(
        "concat",
        _concat,
        "concat",
        {"datasets": {"names": ("a", "c")}, "sizes": {"sizes": (9, 15)}, "limit": {"limit": 20}},
    ),
    Example(
        "fpipe.plan.recipe_mix.mix_recipes",
        _mix_batches,
        "mix_batches",
        {"size": {"size": 3}},
    ),
]
