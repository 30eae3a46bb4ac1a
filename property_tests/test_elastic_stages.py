"""Invariant 4 (elastic resume) with every plan stage on, through ``get_train_dataset``.

A snapshot taken on W1 ranks (1-8) with global batch G1 after k steps restores on W2 ranks
(1-8) with global batch G2, with a weighted blend, a blend with a weight schedule, an epochized
blend or one dataset; plan-tier packing on or off; or with OpenSora buckets. Checked:

- the ranks hold the same snapshot bytes at the cut;
- no (dataset, sample, epoch) is delivered twice, and none goes missing: the refs delivered
  plus those counted as dropped (the short last global batch, leftovers of a bucket window,
  unfit or rejected samples) are every ref of the epochs;
- without buckets the delivered stream is the reference order (world size 1, batch 1, nothing
  dropped) cut where the run ends, and with an unchanged global batch the global batches after
  the restore are exactly those of the uninterrupted run; with buckets (whose global batch
  follows the world size) the restored steps equal the uninterrupted run's when the world size
  is unchanged, and every rank has the same bucket at every step.

Most examples run the plans (metadata only); a few go through the Loader with ``num_workers``
0 or 2, in worker threads or processes, and check the delivered samples and that the loader's
snapshot does not depend on the workers. Energon's packing hooks are not elastic: their
refusal is tested in tests/loader/test_packing_buffer.py.

The default hypothesis profile runs a few examples; ``HYPOTHESIS_PROFILE=dev`` or ``long``
(see conftest.py) scales them up.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import textwrap

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import fpipe
from fpipe.core.testing import run
from fpipe.encode import DefaultTaskEncoder
from fpipe.loader import Topology
from fpipe.loader.state import decode_loader_state
from fpipe.plan.stats import drop_counters
from fpipe.samples import TextSample
from tests.distributed.helpers import make_text_dataset

HEADS = ("single", "blend", "schedule", "epochized", "buckets")
SIZES = {"a": (3, 10), "b": (2, 7)}  # shards, samples per shard
TABLE_ROWS = 40
BUCKETS = {"1:1": {32: {1: (0.8, 2)}}, "2:1": {"32x64": {1: (1.0, 1)}}}
SCHEDULE = [(0, {"a": 1, "b": 3}), (24, {"a": 3, "b": 1})]  # global sample positions
#: refs a drop may not count: pack truncation keeps the ref
NOT_DROPS = {"truncated"}

# a few examples by default, scaled with the profile (ci 100 -> 10, long 1000 -> 100)
SCALED = settings(max_examples=max(4, settings.default.max_examples // 10))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("elastic_stages")
    for name, (shards, per_shard) in SIZES.items():
        make_text_dataset(root / name, shards=shards, per_shard=per_shard)
    (root / "blend.yaml").write_text(
        textwrap.dedent(
            """\
            splits:
              train:
                blend:
                  - {weight: 2, path: ./a}
                  - {weight: 1, path: ./b}
            """
        )
    )
    (root / "epochized.yaml").write_text(
        textwrap.dedent(
            """\
            splits:
              train:
                blend_epochized:
                  - {repetitions: 1, path: ./a}
                  - {repetitions: 2, path: ./b}
            """
        )
    )
    rng = np.random.default_rng(0)
    rows = [
        {"text": f"t{i}", "width": int(rng.choice([16, 32, 64])), "height": 32, "num_frames": 1}
        for i in range(TABLE_ROWS)
    ]
    (root / "table.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return {
        "single": root / "a",
        "blend": root / "blend.yaml",
        "schedule": root / "blend.yaml",
        "epochized": root / "epochized.yaml",
        "buckets": root / "table.jsonl",
    }


class RestoreKeys(DefaultTaskEncoder):
    """Batches become their samples' ``(dataset, index, epoch)``; a pack carries its samples'
    in its text. Module level: worker processes unpickle it."""

    def pack_selected_samples(self, samples):
        text = ";".join(",".join(map(str, s.__restore_key__)) for s in samples)
        return TextSample(text=text, __key__="+".join(s.__key__ for s in samples))

    def encode_batch(self, batch):
        if all(rk == () for rk in batch.__restore_key__):  # packs
            return [tuple(map(int, t.split(","))) for text in batch.text for t in text.split(";")]
        return [tuple(int(x) for x in rk) for rk in batch.__restore_key__]


@dataclasses.dataclass(frozen=True)
class Setting:
    head: str
    packed: bool
    seed: int
    window: int | None  # shuffle_buffer_size, or the bucket window
    epochs: int
    drop_last: bool

    def dataset(self, env, rank: int, world: int, gbs: int | None, *, drop_last=None, **kw):
        drop = self.drop_last if drop_last is None else drop_last
        args: dict = dict(
            seed=self.seed, topology=Topology(rank, world), num_epochs=self.epochs,
            max_samples_per_sequence=3, drop_last=drop, task_encoder=RestoreKeys(),
        )  # fmt: skip
        if self.head == "buckets":
            args.update(
                bucket_config=BUCKETS, bucket_window=self.window, sample_type="TextSample",
                field_map={"text": "text"},
            )  # fmt: skip
        else:
            args.update(global_batch_size=gbs, shuffle_buffer_size=self.window)
            if self.head == "schedule":
                args["weight_schedule"] = SCHEDULE
            if self.packed:
                budget = {"text.chars": 30}  # "sample N": 8 or 9 chars, 3 per pack
                args.update(
                    plan_stages=[fpipe.plan.pack(budget, packing_buffer_size=7)],
                    columns=["text.chars"],
                )
        args.update(kw)
        return fpipe.get_train_dataset(str(env[self.head]), **args)

    def plan(self, env, rank, world, gbs=None, **kw):
        return self.dataset(env, rank, world, gbs, **kw).plan


@st.composite
def plan_settings(draw, heads=HEADS):
    head = draw(st.sampled_from(heads))
    return Setting(
        head=head,
        packed=head != "buckets" and draw(st.booleans()),
        seed=draw(st.integers(0, 2**31)),
        window=draw(st.sampled_from([None, 5] if head != "buckets" else [None, 15])),
        epochs=draw(st.integers(1, 2)),
        drop_last=draw(st.booleans()),
    )


def _steps(outs: list[list]) -> list[list[tuple]]:
    """Global batches: step by step, rank 0's refs, then rank 1's, ..."""
    return [
        [t for o in outs if step < len(o) for t in o[step].refs.triples()]
        for step in range(max((len(o) for o in outs), default=0))
    ]


def _flat(steps) -> list[tuple]:
    return [t for s in steps for t in s]


def _dropped(plan, state) -> int:
    return sum(n for k, n in drop_counters(plan.stats(state)).items() if k not in NOT_DROPS)


def _head(s: Setting, env, world: int, gbs: int, k: int):
    """k steps on ``world`` ranks: (their outputs, the one snapshot they all hold)."""
    plans = [s.plan(env, rank, world, gbs) for rank in range(world)]
    runs = [run(p, limit=k) for p in plans]
    last = min(len(out) for _, out in runs)
    if last < k:  # the stream ends first: cut before its last step (with drop_last=False a
        # rank may get no refs there and end a step early, see docs/distributed.md)
        runs = [run(p, limit=max(last - 1, 0)) for p in plans]
    outs = [out for _, out in runs]
    snaps = {p.snapshot(state) for p, (state, _) in zip(plans, runs)}
    assert len(snaps) == 1, "ranks disagree on the state at a step boundary"
    return outs, snaps.pop()


def _tail(s: Setting, env, world: int, gbs: int, data: bytes):
    """The rest of the run on ``world`` ranks restored from ``data``: outputs, final states."""
    outs, finals = [], []
    for rank in range(world):
        p = s.plan(env, rank, world, gbs)
        state, out = run(p, p.restore(data))
        outs.append(out)
        finals.append((p, state))
    return outs, finals


@st.composite
def batch_sizes(draw):
    """(W1, G1, W2, G2): world sizes 1-8, a global batch of 1-3 per rank; G2 is G1 when the
    new world size divides it and ``same`` is drawn, else another multiple of W2."""
    w1, w2 = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    g1 = w1 * draw(st.integers(1, 3))
    same = draw(st.booleans()) and g1 % w2 == 0
    return w1, g1, w2, g1 if same else w2 * draw(st.integers(1, 3))


@SCALED
@given(
    s=plan_settings(heads=HEADS[:-1]),
    sizes=batch_sizes(),
    k=st.integers(0, 10),
)
def test_restore_on_other_world_and_batch_continues_the_order(env, s, sizes, k):
    w1, g1, w2, g2 = sizes
    ref_plan = s.plan(env, 0, 1, 1, drop_last=False)
    ref_state, ref_out = run(ref_plan)
    reference = _flat(_steps([ref_out]))  # the order, nothing dropped
    assert len(reference) == len(set(reference))
    head, data = _head(s, env, w1, g1, k)
    tail, finals = _tail(s, env, w2, g2, data)
    full = _flat(_steps(head)) + _flat(_steps(tail))
    note(f"{sizes} k={k} reference={len(reference)} delivered={len(full)}")
    assert full == reference[: len(full)]  # nothing repeated or skipped: the same order
    counted = {_dropped(p, state) for p, state in finals}
    assert len(counted) == 1  # every rank ends with the same counters
    assert len(full) + counted.pop() == len(reference) + _dropped(ref_plan, ref_state)
    if g2 == g1:  # the global batches themselves are those of the uninterrupted run
        steps = _steps([run(s.plan(env, 0, 1, g1))[1]])
        assert _steps(head) == steps[: len(head[0])]
        assert _steps(tail) == steps[len(head[0]) :]


def _bucket_agreement(outs: list[list]) -> None:
    assert len({len(o) for o in outs}) == 1
    for step in zip(*outs):
        assert len({(r.bucket, r.step) for r in step}) == 1


@SCALED
@given(
    s=plan_settings(heads=("buckets",)),
    w1=st.integers(1, 8),
    w2=st.integers(1, 8),
    k=st.integers(0, 12),
)
def test_buckets_restore_on_another_world_size(env, s, w1, w2, k):
    head, data = _head(s, env, w1, 0, k)
    tail, finals = _tail(s, env, w2, 0, data)
    _bucket_agreement(head)
    _bucket_agreement(tail)
    full = _flat(_steps(head)) + _flat(_steps(tail))
    note(f"w1={w1} w2={w2} k={k} delivered={len(full)}")
    assert len(full) == len(set(full))
    counted = {_dropped(p, state) for p, state in finals}
    assert len(counted) == 1
    assert len(full) + counted.pop() == TABLE_ROWS * s.epochs
    if w2 == w1:  # unchanged configuration: the uninterrupted run's steps, rank by rank
        for rank in range(w1):
            _, whole = run(s.plan(env, rank, w1))
            recipes = head[rank] + tail[rank]
            assert [(r.bucket, r.refs.triples()) for r in recipes] == [
                (r.bucket, r.refs.triples()) for r in whole
            ]


# --- through the Loader: num_workers 0 / 2, worker threads or processes ----------------------


def _delivered(loader, steps=None) -> list[list[tuple]]:
    """The (dataset, index, epoch) of each batch ``loader`` delivers (``steps`` of them)."""
    return [list(map(tuple, b)) for b in itertools.islice(iter(loader), steps)]


def _planned(recipes) -> list[list[tuple]]:
    """What a rank's loader delivers for these recipes (an empty one delivers no batch)."""
    return [r.refs.triples() for r in recipes if len(r)]


def _loader(s: Setting, env, rank, world, gbs, workers=0, mode="thread"):
    ds = s.dataset(env, rank, world, gbs)
    return fpipe.get_loader(ds, num_workers=workers, worker_mode=mode)


def _check_loader_restore(s: Setting, env, w1, g1, w2, g2, k, workers, mode) -> None:
    """Ranks 0 and W-1 run Loaders in ``mode`` with ``workers`` workers, before and after a
    restore on (W2, G2) from rank 0's snapshot: each delivers what its plan says (the plans of
    all ranks are checked for coverage by the tests above), and its snapshot is that of a
    loader without workers."""
    head_plans, plan_data = _head(s, env, w1, g1, k)
    k = len(head_plans[0])  # _head cuts before the last step
    saved = []
    for rank in sorted({0, w1 - 1}):
        x = _loader(s, env, rank, w1, g1, workers, mode)
        assert _delivered(x, k) == _planned(head_plans[rank])
        data = x.state_dict()["fpipe_snapshot"]
        plain = _loader(s, env, rank, w1, g1)
        _delivered(plain, k)
        assert data == plain.state_dict()["fpipe_snapshot"]  # worker-independent
        # the plan state is the same on every rank (ranks differ in their sample counters)
        assert x.plan.snapshot(decode_loader_state(x.plan, data).plan) == plan_data
        saved.append(data)
    tail_plans, _ = _tail(s, env, w2, g2, plan_data)
    for rank in sorted({0, w2 - 1}):
        x = _loader(s, env, rank, w2, g2, workers, mode)
        x.load_state_dict({"fpipe_snapshot": saved[0]})  # rank 0 saves for all
        assert _delivered(x) == _planned(tail_plans[rank])


@settings(max_examples=max(3, settings.default.max_examples // 25))
@given(
    s=plan_settings(),
    sizes=batch_sizes(),
    k=st.integers(0, 6),
    workers=st.sampled_from([0, 2]),
)
def test_loader_restore_with_worker_threads(env, s, sizes, k, workers):
    w1, g1, w2, g2 = sizes
    if s.head == "buckets":
        g1 = g2 = None
    _check_loader_restore(s, env, w1, g1, w2, g2, k, workers, "thread")


@pytest.mark.parametrize(
    "head, packed, sizes",
    [("blend", True, (2, 6, 3, 6)), ("buckets", False, (3, None, 2, None))],
)
def test_loader_restore_with_worker_processes(env, head, packed, sizes):
    """Two fixed cases in worker processes (each one costs process starts)."""
    s = Setting(head=head, packed=packed, seed=7, window=5 if head != "buckets" else None,
                epochs=1, drop_last=True)  # fmt: skip
    w1, g1, w2, g2 = sizes
    _check_loader_restore(s, env, w1, g1, w2, g2, 3, 2, "process")
