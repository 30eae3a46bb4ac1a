"""Grouped batching cases for the reference comparisons: ``bucket_batches`` and
``group_batches`` configurations (plain data), built two ways: the fast plan (driven as the
loader drives it: ``planned_recipes`` with skips, a snapshot restored on another world size, the
plan's ``advance``) and the reference of :mod:`property_tests.reference.buckets`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from hypothesis import strategies as st

import property_tests.reference as ref
from fpipe.core import Pipeline
from fpipe.core.errors import ConfigError
from fpipe.loader.steering import planned_recipes
from fpipe.plan import bucket_batches, group_batches, samples
from fpipe.plan.skip import normalize_step_ranges
from property_tests.reference import buckets as ref_buckets
from property_tests.reference import rng as ref_rng
from property_tests.reference_cases import STEPS
from property_tests.reference_runs import fast_slices

# ---------------------------------------------------------------------------------------------
# configurations

RATIOS = {  # aspect ratio -> resolutions ("HxW", or an int side)
    "1:1": (16, 32, 48),
    "16:9": ("18x32", "36x64"),
    "9:16": ("32x18", "64x36"),
    "4:3": (24, "30x40"),
}
LABELS = (0, "short", 7, "long", 3)  # a criterion's groups: ints and strings


@dataclasses.dataclass(frozen=True)
class BucketCase:
    seed: int
    n: int
    slices: tuple  # as Case.slices
    kind: str  # "bucket" | "group"
    config: dict  # bucket_config (kind "bucket")
    group_bs: tuple[int, ...]  # batch size per label (kind "group")
    width: tuple
    height: tuple
    frames: tuple | None  # None: no frame column (every sample an image)
    labels: tuple[int, ...]  # the label column (-1: no group)
    window: int | None
    shuffle: bool
    num_epochs: int | None
    drop_last: bool
    world: int
    skip: tuple[tuple[int, int], ...] = ()
    cut: int | None = None
    world2: int = 1
    seeks: tuple[int, ...] = ()  # also: the plan's advance over so many steps, then steps

    @property
    def sizes(self) -> tuple[int, ...]:  # for reference_runs.fast_slices
        return (self.n,)

    def columns(self) -> dict:
        cols = {"width": list(self.width), "height": list(self.height), "g": list(self.labels)}
        if self.frames is not None:
            cols["num_frames"] = list(self.frames)
        return cols

    def criterion(self):
        sizes = self.group_bs

        def by_label(row):
            g = row["g"]
            return (None, 0) if g < 0 else (LABELS[g], sizes[g])

        return by_label


@st.composite
def bucket_configs(draw) -> dict:
    config: dict = {}
    for aspect in draw(
        st.lists(st.sampled_from(sorted(RATIOS)), min_size=1, max_size=3, unique=True)
    ):
        res = draw(st.lists(st.sampled_from(RATIOS[aspect]), min_size=1, max_size=2, unique=True))
        config[aspect] = {}
        for r in res:
            frames = draw(
                st.lists(st.sampled_from([1, 3, 5, 9]), min_size=1, max_size=3, unique=True)
            )
            config[aspect][r] = {
                t: draw(st.sampled_from([(1.0, 1), (1.0, 2), (0.6, 1), (0.5, 3), (0.0, None)]))
                for t in frames
            }
    if draw(st.integers(0, 3)) or not any(
        bs for rs in config.values() for fs in rs.values() for _, bs in fs.values()
    ):  # mostly a small image bucket, so that most streams give batches
        config.setdefault("1:1", {}).setdefault(16, {})[1] = draw(
            st.sampled_from([(1.0, 1), (0.6, 1), (1.0, 2)])
        )
    return config


@st.composite
def bucket_cases(draw, world: int | None = None, endless: bool = True) -> BucketCase:
    n = draw(st.integers(1, 60))
    kind = draw(st.sampled_from(["bucket", "group"]))
    slices = draw(st.sampled_from(["fixed", "shards", "none"]))
    if slices == "fixed":
        sl: tuple = ("fixed", draw(st.integers(1, 12)))
    elif slices == "shards":
        starts = tuple(
            sorted({0, *draw(st.lists(st.integers(1, max(1, n - 1)), max_size=4))} - {n})
        )
        sl = ("shards", draw(st.one_of(st.none(), st.integers(1, 12))), (starts,))
    else:
        sl = ("none",)
    side = st.sampled_from([40, 64, 20, 33, 80, 12, 36, 18, 48, 71])  # the first most likely
    width = tuple(draw(st.lists(st.one_of(side, st.just(0)), min_size=n, max_size=n)))
    height = tuple(draw(st.lists(side, min_size=n, max_size=n)))
    frames = None
    if draw(st.booleans()):
        count = st.one_of(st.integers(0, 12), st.just(math.nan))
        frames = tuple(float(x) for x in draw(st.lists(count, min_size=n, max_size=n)))
    w = world if world is not None else draw(st.integers(1, 4))
    cut = None if world is not None else draw(st.one_of(st.none(), st.integers(1, STEPS - 1)))
    spans = st.tuples(st.integers(0, 30), st.integers(1, 5)).map(lambda t: (t[0], t[0] + t[1]))
    return BucketCase(
        seed=draw(st.integers(0, 2**32)),
        n=n,
        slices=sl,
        kind=kind,
        config=draw(bucket_configs()),
        group_bs=tuple(draw(st.lists(st.integers(1, 3), min_size=5, max_size=5))),
        width=width,
        height=height,
        frames=frames,
        labels=tuple(draw(st.lists(st.integers(-1, 4), min_size=n, max_size=n))),
        window=draw(st.one_of(st.none(), st.integers(1, 40))),
        shuffle=draw(st.booleans()),
        num_epochs=draw(st.one_of(st.none(), st.integers(1, 3))) if endless else 1,
        drop_last=draw(st.booleans()),
        world=w,
        skip=() if world is not None else normalize_step_ranges(draw(st.lists(spans, max_size=2))),
        cut=cut,
        world2=draw(st.integers(1, 4)) if cut is not None else w,
        seeks=() if world is not None else tuple(draw(st.lists(st.integers(1, 40), max_size=3))),
    )


# ---------------------------------------------------------------------------------------------
# the fast plan and the reference of a bucket case


def fast_source(case: BucketCase, rank: int, world: int):
    cols = {k: np.asarray(v) for k, v in case.columns().items()}
    view = fast_slices(case, 0, samples(case.n, dataset=0, columns=cols))
    common = dict(
        rank=rank, world_size=world, drop_last=case.drop_last, num_epochs=case.num_epochs,
        window=case.window, shuffle=case.shuffle,
    )  # fmt: skip
    if case.kind == "bucket":
        frames = None if case.frames is None else "num_frames"
        return bucket_batches(view, case.config, frames=frames, **common)
    return group_batches(view, case.criterion(), columns=["g"], max_groups=5, name="crit", **common)


def described(recipe) -> tuple:
    triples = [tuple(t) for t in recipe.refs.triples()]
    return (recipe.step, recipe.bucket, tuple(recipe.shape), recipe.key, triples)


def taken(plan, state, skip, limit: int) -> tuple[list, bool]:
    """``(state after, recipe)`` of up to ``limit`` delivered recipes, and whether the plan
    then refused an endless stream of empty epochs (ConfigError)."""
    out: list = []
    if limit <= 0:
        return out, False
    try:
        for after, recipe in planned_recipes(plan, state, skip, ()):
            if recipe is None:
                break
            out.append((after, recipe))
            if len(out) == limit:  # pull no further: the next step may be a refusal
                break
    except ConfigError as e:
        assert "gave no batch" in str(e)
        return out, True
    return out, False


def fast_bucket_run(case: BucketCase):
    """(steps per rank before the cut, per rank after it, resume step, whether it refused)."""
    runs, refused = {}, False
    for r in range(case.world):
        plan = Pipeline(fast_source(case, r, case.world), seed=case.seed)
        got, no = taken(plan, plan.init(), case.skip, STEPS)
        runs[r], refused = (plan, got), refused or no
    cut = case.cut if case.cut is not None and len(runs[0][1]) >= case.cut else None
    before = {r: [described(rc) for _, rc in run[:cut]] for r, (_, run) in runs.items()}
    after: dict = {}
    if cut is None:
        return before, after, None, refused
    plan0, run0 = runs[0]
    state, last = run0[cut - 1]
    snap = plan0.snapshot(state)
    refused = False
    for r in range(case.world2):
        plan = Pipeline(fast_source(case, r, case.world2), seed=case.seed)
        got, no = taken(plan, plan.restore(snap), case.skip, STEPS - cut)
        after[r], refused = [described(rc) for _, rc in got], refused or no
    return before, after, last.step + 1, refused


def ref_view(case: BucketCase) -> ref.EpochView:
    data = ref.Dataset.of(case.n, dataset=0, **case.columns())
    if case.slices[0] == "fixed":
        return ref.slice_shuffled(data, case.slices[1])
    if case.slices[0] == "shards":
        starts = case.slices[2][0]
        ids = [sum(1 for s in starts[1:] if s <= p) for p in range(case.n)]
        return ref.EpochView(data, tuple(ref.shard_slices(ids, case.n, case.slices[1])))
    return ref.EpochView(data, None)


def ref_group_steps(case: BucketCase, resume: int | None = None, counters=None):
    if case.kind == "bucket":
        frames = None if case.frames is None else "num_frames"
        groups, name = ref_buckets.bucket_groups(case.config, frames=frames), "bucket"
    else:
        groups, name = ref_buckets.criterion_groups(case.criterion(), ["g"]), "crit"
    return ref_buckets.group_steps(
        ref_view(case), ref_rng.key(case.seed), groups,
        world=lambda s: case.world if resume is None or s < resume else case.world2,
        window=case.window, shuffle=case.shuffle, drop_last=case.drop_last,
        num_epochs=case.num_epochs, name=name, counters=counters,
    )  # fmt: skip


def ref_bucket_run(case: BucketCase, resume: int | None):
    before: dict = {r: [] for r in range(case.world)}
    after: dict = {r: [] for r in range(case.world2)} if resume is not None else {}
    refused = False
    name = "bucket" if case.kind == "bucket" else "crit"
    k = ref_rng.fold_in(ref_rng.step_key(ref_rng.key(case.seed), name), ref_buckets.SAMPLE_TAG)
    try:
        for s in ref_group_steps(case, resume):
            if any(a <= s.step < b for a, b in case.skip):
                continue
            side = before if resume is None or s.step < resume else after
            for r, part in enumerate(s.ranks):
                if len(side[r]) < STEPS:
                    side[r].append((s.step, s.ident, s.shape, k, [x.triple for x in part]))
            done = after if resume is not None else before
            if all(len(v) >= STEPS for v in done.values()) or s.step > 10 * STEPS:
                break
    except ref_buckets.NoBatch:
        refused = True
    return before, after, refused


def compare_buckets(case: BucketCase) -> None:
    fast_before, fast_after, resume, fast_refused = fast_bucket_run(case)
    ref_before, ref_after, ref_refused = ref_bucket_run(case, resume)
    for r in range(case.world):
        n = len(fast_before[r])
        assert fast_before[r] == ref_before[r][:n], f"rank {r} of {case.world}"
        if resume is None and not fast_refused:
            assert n == min(STEPS, len(ref_before[r])), f"rank {r}: the stream ends elsewhere"
    for r in range(len(fast_after)):
        n = len(fast_after[r])
        assert fast_after[r] == ref_after[r][:n], f"rank {r} of {case.world2} after the restore"
        if not fast_refused:
            assert n == min(STEPS - case.cut, len(ref_after[r]))
    if fast_refused:  # the plan refuses an endless stream of empty epochs: so does the reference
        assert ref_refused
    if case.seeks and not fast_refused:
        compare_seeks(case)


def compare_seeks(case: BucketCase, more: int = 4) -> None:
    """The plan's ``advance`` over ``seek`` steps (on counts, drawing only the groups of the
    window it stops in), then steps: the reference's steps from ``seek`` on, and the refs
    passed are the reference's."""
    expected: list = []
    seeks = case.seeks
    try:
        for s in ref_group_steps(case):
            expected.append(s)
            if len(expected) == max(seeks) + more:
                break
    except ref_buckets.NoBatch:  # the plan refuses there too: seek before it
        seeks = tuple(k for k in seeks if k + more <= len(expected))
    for r in range(case.world):
        plan = Pipeline(fast_source(case, r, case.world), seed=case.seed)
        for seek in seeks:
            state, passed = plan.advance(plan.init(), seek)
            assert passed.outputs == min(seek, len(expected))
            assert passed.refs == sum(len(s.ranks[r]) for s in expected[:seek])
            _, out = plan.next(state, more)
            assert [described(rc)[:3] + described(rc)[4:] for rc in out] == [
                (s.step, s.ident, s.shape, [x.triple for x in s.ranks[r]])
                for s in expected[seek : seek + more]
            ], f"rank {r} of {case.world} after advancing {seek} steps"
