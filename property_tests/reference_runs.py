"""A :class:`~property_tests.reference_cases.Case` run two ways: the fast plan (``fpipe.plan``
pipelines, driven as the loader drives them: ``planned_recipes`` with skips and online changes,
a snapshot restored on another world size) and the reference of :mod:`property_tests.reference`;
:func:`compare` checks that every rank delivers the same steps."""

from __future__ import annotations

import numpy as np

import property_tests.reference as ref
from fpipe.core import Pipeline, chain
from fpipe.loader.steering import MixChange, planned_recipes
from fpipe.plan import (
    BatchSchedule,
    WeightSchedule,
    batch,
    blend,
    distribute,
    filter_refs,
    pack,
    repeat,
    samples,
    slice_shuffle,
    window_shuffle,
)
from fpipe.plan.shard_slices import RaggedSlices, ragged_slice_shuffle, shard_slice_starts
from property_tests.reference import packing as ref_packing
from property_tests.reference import rng as ref_rng
from property_tests.reference.steps import Sizes
from property_tests.reference_cases import STEPS, Case

# ---------------------------------------------------------------------------------------------
# the fast plan


def fast_slices(case: Case, d: int, view):
    kind = case.slices[0]
    if kind == "fixed":
        return slice_shuffle(view, case.slices[1])
    if kind == "shards":
        n = case.sizes[d]
        ids = np.zeros(n, dtype=np.int64)
        for s in case.slices[2][d][1:]:
            ids[s:] += 1
        return ragged_slice_shuffle(
            view, RaggedSlices(shard_slice_starts(ids, n, case.slices[1]), n)
        )
    return view


def fast_schedule(case: Case) -> WeightSchedule:
    if case.head in ("schedule", "linear", "tokens_schedule"):
        return WeightSchedule(
            points=(0, case.point),
            weights=(tuple(map(float, case.weights)), tuple(map(float, case.second))),
            linear=case.head == "linear",
        )
    return WeightSchedule.constant(case.weights)


def fast_sizes(case: Case, world: int, b2: int | None = None):
    """(what distribute takes, what batch takes) on ``world`` ranks."""
    kind = case.sizes_kind
    if kind[0] == "fixed":
        b = kind[1] if b2 is None else b2
        return b * world, b
    if kind[0] == "table":
        sched = BatchSchedule.of(dict(kind[1]))
    else:
        _, start, inc, samples_, final = kind
        sched = BatchSchedule.rampup(start, inc, samples_, final=final)
    return sched, sched.per_rank(world)


def fast_plan(case: Case, rank: int, world: int, b2: int | None = None) -> Pipeline:
    views = []
    for d, n in enumerate(case.sizes):
        cols = {"tokens": np.asarray(case.tokens(d)), "images": np.asarray(case.images(d))}
        v = samples(n, dataset=d, columns=cols)
        views.append(fast_slices(case, d, v))
    if case.head == "repeat":
        head = repeat(views[0], case.num_epochs)
    elif case.head == "epochized":
        head = blend(views, repetitions=list(case.reps), num_epochs=case.num_epochs)
    else:
        unit = "tokens" if case.head.startswith("tokens") else None
        head = blend(views, schedule=fast_schedule(case), unit=unit, num_epochs=case.num_epochs)
    stages = []
    filt = [filter_refs("tokens", "<", case.token_limit)] if case.token_limit else []
    if case.filter_first:
        stages += filt
    if case.window:
        stages.append(window_shuffle(case.window))
    if not case.filter_first:
        stages += filt
    if case.pack is not None:
        strategy, budgets, size, over, shuffle = case.pack
        stages.append(
            pack(dict(budgets), strategy=strategy, packing_buffer_size=size, over_budget=over,
                 shuffle_packs=shuffle)
        )  # fmt: skip
    dist, per = fast_sizes(case, world, b2)
    stages += [
        distribute(dist, rank=rank, world_size=world, drop_last=case.drop_last),
        batch(per, drop_last=case.drop_last),
    ]
    return Pipeline(chain(head, *stages), seed=case.seed)


def mix_changes(case: Case) -> list[MixChange]:
    return [MixChange(s, w) for s, w in case.changes]


def delivered(plan, state, ranges, changes, limit: int) -> list:
    """``(state after, recipe)`` of the first ``limit`` recipes delivered from ``state``."""
    out = []
    for after, recipe in planned_recipes(plan, state, ranges, changes):
        if recipe is None or len(out) == limit:
            break
        out.append((after, recipe))
    return out


def steps_of(recipes) -> list:
    """``(step, triples)`` per recipe; a packed recipe's triples grouped by pack."""
    out = []
    for r in recipes:
        triples = [tuple(t) for t in r.refs.triples()]
        if "pack" in r.refs.columns:
            packs = r.refs.column("pack").tolist()
            grouped: list = []
            for t, p in zip(triples, packs):
                if p == len(grouped):
                    grouped.append([])
                grouped[p].append(t)
            triples = [tuple(g) for g in grouped]
        out.append((r.step, triples))
    return out


def fast_run(case: Case) -> tuple[dict, dict, int | None]:
    """Delivered ``(step, triples)`` per rank before the cut, and per rank after it (restored
    from rank 0's snapshot on ``world2`` ranks), and the first step after the cut."""
    ranges, changes = case.skip, mix_changes(case)
    before, after = {}, {}
    runs = {}
    for r in range(case.world):
        plan = fast_plan(case, r, case.world)
        runs[r] = (plan, delivered(plan, plan.init(), ranges, changes, STEPS))
    if case.cut is None or len(runs[0][1]) < case.cut:
        return {r: steps_of(rc for _, rc in run) for r, (_, run) in runs.items()}, {}, None
    plan0, run0 = runs[0]
    state, last = run0[case.cut - 1]
    resume = last.step + 1
    for r in range(case.world):
        before[r] = steps_of(rc for _, rc in runs[r][1][: case.cut])
    snap = plan0.snapshot(state)
    later = [c for c in changes if c.step > resume]
    b2 = case.b2 if case.sizes_kind[0] == "fixed" else None
    for r in range(case.world2):
        plan = fast_plan(case, r, case.world2, b2)
        got = delivered(plan, plan.restore(snap), ranges, later, STEPS - case.cut)
        after[r] = steps_of(rc for _, rc in got)
    return before, after, resume


# ---------------------------------------------------------------------------------------------
# the reference


def ref_view(case: Case, d: int) -> ref.EpochView:
    data = ref.Dataset.of(case.sizes[d], dataset=d, tokens=case.tokens(d), images=case.images(d))
    kind = case.slices[0]
    if kind == "fixed":
        return ref.slice_shuffled(data, case.slices[1])
    if kind == "shards":
        n, starts = case.sizes[d], case.slices[2][d]
        ids = [sum(1 for s in starts[1:] if s <= p) for p in range(n)]
        return ref.EpochView(data, tuple(ref.shard_slices(ids, n, case.slices[1])))
    return ref.EpochView(data, None)


def ref_sizes(case: Case, b2: int | None = None, world: int = 1) -> Sizes:
    kind = case.sizes_kind
    if kind[0] == "fixed":
        return ref.fixed((kind[1] if b2 is None else b2) * world)
    if kind[0] == "table":
        return ref.by_step(dict(kind[1]))
    _, start, inc, samples_, final = kind
    return ref.rampup(start, inc, samples_, final)


def ref_steps(case: Case, counters: ref.Counters | None = None):
    root = ref_rng.key(case.seed)
    views = [ref_view(case, d) for d in range(len(case.sizes))]
    mixer = None
    if case.head == "repeat":
        stream = ref.repeat(views[0], root, case.num_epochs)
    else:
        if case.head == "epochized":
            kw: dict = dict(counts=[r * s for r, s in zip(case.reps, case.sizes)])
        else:
            if case.head in ("schedule", "linear", "tokens_schedule"):
                sched = ref.Schedule(
                    (0, case.point),
                    (tuple(map(float, case.weights)), tuple(map(float, case.second))),
                    linear=case.head == "linear",
                )
            else:
                sched = ref.Schedule.constant(case.weights)
            unit = "tokens" if case.head.startswith("tokens") else None
            kw = dict(schedule=sched, unit=unit)
        mixer = ref.Blend(views, root, num_epochs=case.num_epochs, **kw)
        stream = mixer
    counters = ref.Counters() if counters is None else counters

    def filt(s):
        if not case.token_limit:
            return s
        return ref.filter_refs(s, "tokens", "<", case.token_limit, counters)

    if case.filter_first:
        stream = filt(stream)
    if case.window:
        stream = ref.window_shuffle(stream, case.window, root)
    if not case.filter_first:
        stream = filt(stream)
    if case.pack is not None:
        strategy, budgets, size, over, shuffle = case.pack
        stream = ref_packing.pack(
            stream, budgets, root, strategy=strategy, packing_buffer_size=size,
            over_budget=over, shuffle_packs=shuffle, counters=counters,
        )  # fmt: skip
    phases = [ref.Phase(0, case.world, ref_sizes(case, world=case.world))]
    return stream, mixer, phases, counters


def triples(item):
    """A ref's triple, or a pack's triples."""
    return item.triple if isinstance(item, ref.Ref) else tuple(x.triple for x in item)


def ref_run(case: Case, resume: int | None) -> tuple[dict, dict]:
    stream, mixer, phases, counters = ref_steps(case)
    if resume is not None:
        b2 = case.b2 if case.sizes_kind[0] == "fixed" else None
        phases.append(ref.Phase(resume, case.world2, ref_sizes(case, b2, case.world2)))
    before: dict = {r: [] for r in range(case.world)}
    after: dict = {r: [] for r in range(case.world2)} if resume is not None else {}
    gen = ref.steps(
        stream, phases, drop_last=case.drop_last, skip=case.skip, changes=case.changes,
        blend=mixer, counters=counters,
    )  # fmt: skip
    done = after if resume is not None else before
    for s in gen:
        if s.skipped:
            continue
        side = before if resume is None or s.step < resume else after
        for r, part in enumerate(s.ranks):
            if part is not None and len(side[r]) < STEPS:
                side[r].append((s.step, [triples(x) for x in part]))
        if all(len(v) >= STEPS for v in done.values()) or s.step > 10 * STEPS:
            break
    return before, after


def compare(case: Case) -> None:
    fast_before, fast_after, resume = fast_run(case)
    ref_before, ref_after = ref_run(case, resume)
    if resume is not None:
        cut = case.cut
        for r in range(case.world):
            assert fast_before[r] == ref_before[r][:cut], (
                f"rank {r} of {case.world}, before the cut"
            )
        for r in range(case.world2):
            n = len(fast_after[r])
            assert fast_after[r] == ref_after[r][:n], f"rank {r} of {case.world2} after the restore"
            assert n == min(STEPS - cut, len(ref_after[r]))
        return
    for r in range(case.world):
        n = len(fast_before[r])
        assert fast_before[r] == ref_before[r][:n], f"rank {r} of {case.world}"
        assert n == min(STEPS, len(ref_before[r])), f"rank {r}: the stream ends elsewhere"
