"""Invariants 4 and 5 through ``get_train_dataset`` / the Loader.

Elastic resume: a snapshot taken at world size 2 continues at world sizes 1, 3 and 4 with every
sample of the epoch seen exactly once in global order. Coverage: within an epoch every sample
is seen exactly once across W ranks (global and per-rank mode), the dropped remainder counted.
Most examples run the plan of the real dataset (``ds.plan``, keys only); a few go through the
Loader's state_dict / load_state_dict.
"""

from __future__ import annotations

import collections

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import fpipe
from fpipe.core.errors import SnapshotMismatchError
from fpipe.core.testing import run
from fpipe.plan import filter_refs
from tests.distributed.helpers import batch_keys, build_dataset, make_text_dataset

SIZES = {"d60": (5, 12), "d53": (1, 53)}  # shards, samples per shard


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("elastic")
    return {
        name: make_text_dataset(root / name, shards=s, per_shard=n)
        for name, (s, n) in SIZES.items()
    }


def _size(name: str) -> int:
    s, n = SIZES[name]
    return s * n


@st.composite
def plan_settings(draw):
    return dict(
        dataset=draw(st.sampled_from(sorted(SIZES))),
        seed=draw(st.integers(0, 2**31)),
        shuffle_buffer_size=draw(st.sampled_from([None, 2, 7, 16, 50])),
        max_samples_per_sequence=draw(st.sampled_from([None, 1, 3, 8])),
        num_epochs=draw(st.integers(1, 2)),
        filtered=draw(st.booleans()),
    )


def _plan(datasets, s, *, rank, world, gbs, drop_last=True):
    extra = {}
    if s["filtered"]:  # a filter upstream of distribute: "sample N" with N < 10 (8 chars) go
        extra = dict(plan_stages=[filter_refs("text.chars", ">", 8)], columns=["text.chars"])
    return build_dataset(
        datasets[s["dataset"]],
        rank=rank,
        world_size=world,
        global_batch_size=gbs,
        seed=s["seed"],
        shuffle_buffer_size=s["shuffle_buffer_size"],
        max_samples_per_sequence=s["max_samples_per_sequence"],
        num_epochs=s["num_epochs"],
        drop_last=drop_last,
        **extra,
    ).plan


def _global_order(plans, states=None, limit=None):
    outs = []
    for p in plans:
        _, out = run(p, None if states is None else p.restore(states), limit=limit)
        outs.append(out)
    order = []
    for step in range(max(len(o) for o in outs)):
        for o in outs:
            if step < len(o):
                refs = o[step].refs
                order.extend(zip(refs.index.tolist(), refs.epoch.tolist()))
    return order


@given(
    s=plan_settings(),
    gbs=st.sampled_from([12, 24]),
    k=st.integers(0, 9),
    w2=st.sampled_from([1, 3, 4]),
)
def test_world_size_2_snapshot_continues_on_1_3_4(datasets, s, gbs, k, w2):
    reference = _global_order([_plan(datasets, s, rank=0, world=1, gbs=gbs)])
    # every (sample, epoch) at most once; all but the filtered and the short last global batch
    assert len(reference) == len(set(reference))
    n = _size(s["dataset"])
    if not s["filtered"]:
        assert len(reference) == (n * s["num_epochs"]) // gbs * gbs
    k = min(k, len(reference) // gbs)
    states = set()
    head = []
    for rank in range(2):
        p = _plan(datasets, s, rank=rank, world=2, gbs=gbs)
        state, out = run(p, limit=k)
        states.add(p.snapshot(state))
        head.append(out)
    assert len(states) == 1, "ranks disagree on the state at a batch boundary"
    first = [t for step in zip(*head) for o in step
             for t in zip(o.refs.index.tolist(), o.refs.epoch.tolist())]  # fmt: skip
    rest = _global_order(
        [_plan(datasets, s, rank=r, world=w2, gbs=gbs) for r in range(w2)], states.pop()
    )
    note(f"k={k} w2={w2} ref={len(reference)} first={len(first)} rest={len(rest)}")
    assert first + rest == reference


@given(
    s=plan_settings(),
    world=st.integers(1, 5),
    per_rank=st.integers(1, 5),
    drop_last=st.booleans(),
)
def test_coverage_global_mode(datasets, s, world, per_rank, drop_last):
    s = {**s, "num_epochs": 1, "filtered": False}
    gbs = world * per_rank
    n = _size(s["dataset"])
    seen = collections.Counter()
    for rank in range(world):
        _, out = run(_plan(datasets, s, rank=rank, world=world, gbs=gbs, drop_last=drop_last))
        seen.update(int(i) for o in out for i in o.refs.index)
    assert max(seen.values(), default=1) == 1
    assert sum(seen.values()) == (n // gbs * gbs if drop_last else n)


@settings(max_examples=40)
@given(
    s=plan_settings(),
    world=st.integers(1, 5),
    per_rank=st.integers(1, 5),
    k=st.integers(0, 6),
)
def test_per_rank_mode_covers_and_resumes_on_same_world_only(datasets, s, world, per_rank, k):
    path = datasets[s["dataset"]]
    n = _size(s["dataset"])

    def plan(rank, w):
        return build_dataset(
            path, rank=rank, world_size=w, batch_size=per_rank, distribution="per_rank",
            seed=s["seed"], shuffle_buffer_size=s["shuffle_buffer_size"],
            max_samples_per_sequence=s["max_samples_per_sequence"], num_epochs=1,
            drop_last=False,
        ).plan  # fmt: skip

    seen = collections.Counter()
    for rank in range(world):
        p = plan(rank, world)
        _, full = run(p)
        seen.update(int(i) for o in full for i in o.refs.index)
        kk = min(k, len(full))
        state, _ = run(p, limit=kk)
        data = p.snapshot(state)
        fresh = plan(rank, world)  # shares nothing with p but the bytes
        _, rest = run(fresh, fresh.restore(data))
        assert [o.refs.triples() for o in rest] == [o.refs.triples() for o in full[kk:]]
        with pytest.raises(SnapshotMismatchError, match="world_size"):
            plan(rank % (world + 1), world + 1).restore(data)
    assert sorted(seen) == list(range(n)) and max(seen.values()) == 1


# --- a few cases through the Loader (state_dict / load_state_dict) ----------------------------


@pytest.mark.parametrize("w2", [1, 3, 4])
def test_loader_snapshot_at_world_2_continues(datasets, w2):
    path = datasets["d60"]
    kwargs = dict(global_batch_size=12, num_epochs=2, seed=5, shuffle_buffer_size=7,
                  max_samples_per_sequence=3)  # fmt: skip

    def loaders(world):
        return [
            fpipe.get_loader(build_dataset(path, rank=r, world_size=world, **kwargs))
            for r in range(world)
        ]

    def order(ls, steps=None):
        its = [iter(x) for x in ls]
        out, step = [], 0
        while steps is None or step < steps:
            try:
                batches = [next(it) for it in its]
            except StopIteration:
                break
            out.extend(k for b in batches for k in batch_keys(b))
            step += 1
        return out

    reference = order(loaders(1))
    assert len(reference) == 120 and set(collections.Counter(reference).values()) == {2}
    two = loaders(2)
    head = order(two, 3)
    saved = {x.state_dict()["fpipe_snapshot"] for x in two}
    assert len(saved) == 1
    resumed = loaders(w2)
    data = saved.pop()
    for x in resumed:
        x.load_state_dict({"fpipe_snapshot": data})
    assert head + order(resumed) == reference
