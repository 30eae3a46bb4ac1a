"""A training script's use of the loader, as a hypothesis state machine.

The machine drives the public API the way a training loop does, in any order: it takes batches,
changes the blend's weights (now or at a later step, by name or by index), saves
``state_dict()`` and ``mix_history()``, restores a saved state into fresh loaders on another
world size, ``num_workers`` or worker mode (with or without the history), seeks (with or
without a history), builds loaders from a history (``get_loader(mix_history=...)``, then
``start_step`` or ``seek``), skips step ranges and asks lineage questions
(``fpipe.datasets.lineage``). It keeps a model of what it asked for: the run's weight changes,
skip ranges, the step it is at and every global batch it was given. After every rule:

(a) every batch given equals the reference stream's batch at that step, for the weight changes
    the model holds (:func:`reference_batches`: a fresh loader built with their history, run
    without interruption on one rank at ``num_workers=0``); each sample's text is its key's;
(b) the state is under the documented bound (README: under 1 KB for a simple configuration)
    and the same bytes on every rank (global mode: one checkpoint for all ranks), and
    ``mix_history()`` lists the changes asked for up to the loader's step;
(d) against what was asked, not against fpipe: from each change's frontier (the end of the
    shuffle window drawn before it), a dataset of weight 0 gives nothing, a dataset's share of
    samples (by samples) stays within a 1e-9 Chernoff bound of its weight and is never absent
    from a run of samples whose absence has probability under 1e-9, its share of tokens (by
    tokens) stays within the blend's deterministic bound, and no sample comes twice in an epoch.

(c), lineage, is a rule: ``step_samples`` and ``find_key`` must list what was given.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import fpipe
from fpipe.core.errors import ConfigError
from fpipe.loader import Topology

NAMES = ("a.jsonl", "b.jsonl", "c.jsonl")
SIZES = (120, 90, 60)  # epochs turn over within an example; a blend block spans few of them
LENGTHS = ((1, 20), (20, 60), (60, 120))  # tokens per sample, uniform in [lo, hi]
BATCH = 4  # global batch
WORLDS = (1, 2, 4)
STATE_BOUND = 1024  # README: "under 1 KB" for a simple configuration
LOG_P = math.log(1e9)  # the tests of (d) fail on what has probability under 1e-9
# ci 100 -> 10 examples of up to 20 rules (each example ~0.5 s of CPU), long 1000 -> 100.
MACHINE_SETTINGS = settings(
    max_examples=max(4, settings.default.max_examples // 10),
    stateful_step_count=20,
    deadline=None,
)


@dataclasses.dataclass(frozen=True)
class Data:
    root: Path
    tokens: tuple[tuple[int, ...], ...]  # tokens[d][i]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Data:
    root = tmp_path_factory.mktemp("machine")
    rng = np.random.default_rng(0)
    tokens = []
    for name, n, (lo, hi) in zip(NAMES, SIZES, LENGTHS):
        col = rng.integers(lo, hi + 1, n).tolist()
        rows = (json.dumps({"text": f"{name[0]} {i}", "tokens": t}) for i, t in enumerate(col))
        (root / name).write_text("\n".join(rows) + "\n")
        tokens.append(tuple(col))
    blend = "".join(f"      - {{weight: 1, path: {n}}}\n" for n in NAMES)
    (root / "samples.yaml").write_text("splits:\n  train:\n    blend:\n" + blend)
    (root / "tokens.yaml").write_text(
        "splits:\n  train:\n    blend_unit: tokens\n    blend:\n" + blend
    )
    (root / "quota.yaml").write_text(
        "splits:\n  train:\n    blend_draw: quota\n    blend:\n" + blend
    )
    return Data(root, tuple(tokens))


@dataclasses.dataclass(frozen=True)
class Config:
    #: "samples" or "tokens": what the blend's weights are shares of; "quota": of samples,
    #: drawn in blocks that hold each dataset's share exactly (blend_draw: quota)
    unit: str
    window: int  # shuffle_buffer_size (0: no window shuffle)
    seed: int


@dataclasses.dataclass(frozen=True)
class Setup:
    world: int
    num_workers: int
    worker_mode: str


Change = tuple[int, tuple[float, ...]]  # (global step, float32 weights)
Sample = tuple[str, int, int, int]  # (key, dataset, index, epoch)


def options(cfg: Config) -> dict[str, Any]:
    return dict(
        global_batch_size=BATCH,
        seed=cfg.seed,
        sample_type="TextSample",
        field_map={"text": "text"},
        shuffle_buffer_size=cfg.window or None,
        columns=["tokens"],
    )


def dataset(root: Path, cfg: Config, world: int = 1, rank: int = 0):
    # a fresh plan per loader: a plan's blend computes its first blocks short (256 positions,
    # doubling), which is all a short run needs
    path = root / f"{cfg.unit}.yaml"
    topology = Topology(rank=rank, world_size=world)
    return fpipe.get_train_dataset(str(path), topology=topology, **options(cfg))


def history(changes: Sequence[Change]) -> dict:
    """A mix history (the format of ``loader.mix_history()``) of ``changes``."""
    rows = [{"step": s, "weights": dict(zip(NAMES, w))} for s, w in changes]
    return {"format": "fpipe-mix-history", "version": 1, "datasets": list(NAMES), "changes": rows}


def changes_of(hist: dict) -> list[Change]:
    # the history writes each float32 weight as its shortest decimal: read it back as float32
    return [
        (c["step"], tuple(float(np.float32(c["weights"][n])) for n in NAMES))
        for c in hist["changes"]
    ]


def samples_of(batch) -> tuple[Sample, ...]:
    """The samples of a batch; each sample's text must be that of its key."""
    out = []
    for key, text, (d, i, e) in zip(batch.__key__, batch.text, batch.__restore_key__):
        assert key == f"{NAMES[d][0]}/{i}" and text == f"{NAMES[d][0]} {i}", (key, text, d, i)
        out.append((key, int(d), int(i), int(e)))
    return tuple(out)


# --- the reference --------------------------------------------------------------------------


class _LoaderReference:
    """A fresh loader per set of weight changes, built with their history
    (``get_loader(mix_history=...)``), run once without interruption at ``num_workers=0`` on
    one rank; its batches are kept and extended as the machine needs more."""

    def __init__(self) -> None:
        self.runs: dict[tuple, tuple[Any, list]] = {}

    def batches(self, root: Path, cfg: Config, changes: tuple[Change, ...], n: int) -> list:
        key = (root, cfg, changes)
        if key not in self.runs:
            if len(self.runs) > 32:
                for it, _ in self.runs.values():
                    it.close()
                self.runs.clear()
            loader = fpipe.get_loader(
                dataset(root, cfg), num_workers=0, mix_history=history(changes) if changes else None
            )
            self.runs[key] = (iter(loader), [])
        it, out = self.runs[key]
        while len(out) < n:
            out.append(samples_of(next(it)))
        return out


_REFERENCE = _LoaderReference()


def reference_batches(
    root: Path, cfg: Config, changes: tuple[Change, ...], n: int
) -> Sequence[tuple[Sample, ...]]:
    """The global batches of steps ``0..n-1`` of the plan ``cfg`` with the weight ``changes``
    (each ``(step, weights)`` applied before its step, in order): the reference the machine's
    stream is compared with. Swap in an independent model of the plan here."""
    return _REFERENCE.batches(root, cfg, changes, n)


# --- what was asked: shares of samples and tokens -------------------------------------------


def kl(q: float, p: float) -> float:
    """KL(Bernoulli(q) || Bernoulli(p)): ``n * kl(q, p)`` bounds ``-log P`` of an observed share
    ``q`` over ``n`` draws of probability ``p`` (Chernoff)."""
    out = 0.0
    if q > 0:
        out += q * math.log(q / p) if p > 0 else math.inf
    if q < 1:
        out += (1 - q) * math.log((1 - q) / (1 - p)) if p < 1 else math.inf
    return out


def frontier(step: int, window: int) -> int:
    """The blend position from which a change made before ``step`` holds: the end of the
    window block that the steps before it drew (docs/steering.md)."""
    p = step * BATCH
    return -(-p // window) * window if window else p


def check_asked(data: Data, cfg: Config, changes: Sequence[Change], stream: dict) -> None:
    """(d): the delivered stream against the weights asked for."""
    if not stream:
        return
    steps = np.array(sorted(stream), dtype=np.int64)
    refs = [sum(stream[s][1], ()) for s in steps.tolist()]
    triples = [(d, i, e) for batch in refs for _, d, i, e in batch]
    assert len(set(triples)) == len(triples), "a sample came twice in one epoch"
    pos = (steps[:, None] * BATCH + np.arange(BATCH)).ravel()
    ds = np.array([d for d, _, _ in triples], dtype=np.int64)
    toks = np.array([data.tokens[d][i] for d, i, _ in triples], dtype=np.int64)
    # the weights in force from each frontier on (a later change at the same frontier wins)
    segs = [(0, (1.0, 1.0, 1.0))] + [(frontier(s, cfg.window), w) for s, w in changes]
    bounds = [f for f, _ in segs[1:]] + [1 << 62]
    block = cfg.window or 1
    for (lo, w), hi in zip(segs, bounds):
        if hi <= lo:
            continue
        p = np.asarray(w) / sum(w)
        m = (pos >= lo) & (pos < hi)
        seg_pos, seg_d, seg_t = pos[m], ds[m], toks[m]
        if not len(seg_pos):
            continue
        where = f"weights {w} from position {lo} to {hi}"
        for d in np.flatnonzero(p == 0):
            assert not (seg_d == d).any(), f"{NAMES[d]} (weight 0) gave samples, {where}"
        # runs of consecutive delivered positions
        cut = np.flatnonzero(np.diff(seg_pos) != 1) + 1
        runs = np.split(np.arange(len(seg_pos)), cut)
        if cfg.unit in ("samples", "quota"):
            n = len(seg_d)
            for d in np.flatnonzero(p > 0):
                q = float((seg_d == d).mean())
                assert n * kl(q, p[d]) <= LOG_P, f"{NAMES[d]}: {q:.3f} of {n} samples, {where}"
                for run in runs:  # absence: the longest stretch without d
                    hits = np.flatnonzero(seg_d[run] == d)
                    edges = np.concatenate([[-1], hits, [len(run)]])
                    gap = int(np.diff(edges).max()) - 1
                    assert gap == 0 or (p[d] < 1 and gap * -math.log1p(-p[d]) <= LOG_P), (
                        f"{NAMES[d]} absent from {gap} consecutive samples, {where}"
                    )
        else:
            # by tokens, over whole window blocks: each dataset's tokens since the frontier
            # stay within p_d * B of its share, B = max over weighted datasets of (longest
            # sample / weight); a window of blocks has two ends
            longest = np.array([hi_ for _, hi_ in LENGTHS], dtype=np.float64)
            big = (longest[p > 0] / p[p > 0]).max()
            for run in runs:
                rp = seg_pos[run]
                first = -(-rp[0] // block) * block
                keep = (rp >= first) & (rp < (rp[-1] + 1) // block * block)
                if keep.sum() < 2 * block:
                    continue
                onehot = (seg_d[run][keep][:, None] == np.arange(3)) * seg_t[run][keep][:, None]
                cum = np.concatenate([np.zeros((1, 3)), np.cumsum(onehot, axis=0)])[::block]
                diff = cum[None, :, :] - cum[:, None, :]  # tokens of d in blocks [i, j)
                total = diff.sum(axis=2, keepdims=True)
                excess = np.abs(diff - p * total) - 2 * p * big
                i, j, d = np.unravel_index(np.argmax(excess), excess.shape)
                assert excess[i, j, d] <= 1e-6, (
                    f"{NAMES[d]}: {diff[i, j, d]:.0f} of {total[i, j, 0]:.0f} tokens at "
                    f"positions {first + i * block}..{first + j * block}, {where}"
                )


# --- the machine ----------------------------------------------------------------------------

weight_rows = st.tuples(*[st.sampled_from([0.0, 0.3, 1.0, 4.0])] * 3).filter(any)
# worker processes are rare (their start costs ~50 ms); shrinking goes to threads
setups = st.builds(
    lambda world, workers, rare: Setup(
        world, workers, "process" if rare == 15 and workers and world == 1 else "thread"
    ),
    st.sampled_from(WORLDS),
    st.sampled_from([0, 1, 2]),
    st.integers(0, 15),
)
configs = st.builds(
    Config,
    st.sampled_from(["samples", "tokens", "quota"]),
    st.sampled_from([0, 8, 12]),
    st.integers(0, 3),
)


@dataclasses.dataclass(frozen=True)
class Saved:
    """A checkpoint: the state bytes, the mix history saved beside them (None: the loader did
    not know it) and the model at that point."""

    state: bytes
    history: dict | None
    cursor: int
    changes: tuple[Change, ...]  # those the state holds
    skip: tuple[tuple[int, int], ...]
    stream: dict


class LoaderMachine(RuleBasedStateMachine):
    def __init__(self, data: Data):
        super().__init__()
        self.data = data
        self.loaders: list = []
        self.iters: list = []
        self.saved: list[Saved] = []
        self.cursor = 0  # the next step the loader is at
        self.changes: list[Change] = []  # the run's weight changes (those ahead included)
        self.known = True  # whether the loader knows the changes its state holds
        self.skip: list[tuple[int, int]] = []
        self.stream: dict[int, tuple[int, tuple]] = {}  # step -> (world, each rank's samples)
        self._checked: tuple = ((), set())

    # --- helpers ---

    def _open(self, setup: Setup, **kw) -> None:
        self._close()
        self.setup = setup
        self.loaders = [
            fpipe.get_loader(
                dataset(self.data.root, self.cfg, setup.world, r),
                num_workers=setup.num_workers,
                worker_mode=setup.worker_mode,
                **kw,
            )
            for r in range(setup.world)
        ]
        self.iters = [None] * setup.world

    def _close(self) -> None:
        for it in self.iters:
            if it is not None:
                it.close()
        self.iters = []

    def teardown(self) -> None:
        self._close()

    def _held(self) -> list[Change]:
        return [c for c in self.changes if c[0] <= self.cursor]

    def _skipped(self, step: int) -> bool:
        return any(a <= step < b for a, b in self.skip)

    def _truncate(self, stream: dict, cursor: int) -> dict:
        return {s: v for s, v in stream.items() if s < cursor}

    def _unchanged(self, before: list[bytes]) -> None:
        assert [lo.snapshot() for lo in self.loaders] == before

    def _refused(self, call, match: str | None = None) -> None:
        """``call(loader)`` must raise a ConfigError on every rank and change nothing."""
        before = [lo.snapshot() for lo in self.loaders]
        for lo in self.loaders:
            with pytest.raises(ConfigError, match=match):
                call(lo)
        self._unchanged(before)

    # --- rules ---

    @initialize(cfg=configs, setup=setups)
    def start(self, cfg: Config, setup: Setup) -> None:
        self.cfg = cfg
        self._open(setup)

    @rule(k=st.integers(1, 6))
    def take(self, k: int) -> None:
        self._take(k)

    def _take(self, k: int) -> None:
        """Take ``k`` batches on every rank (every rule that steers ends with some: hypothesis
        turns rules off in some examples, and a loop always trains)."""
        for _ in range(k):
            step = self.cursor
            while self._skipped(step):
                step += 1
            parts = []
            for r, lo in enumerate(self.loaders):
                if self.iters[r] is None:
                    self.iters[r] = iter(lo)
                got = samples_of(next(self.iters[r]))
                assert len(got) == BATCH // self.setup.world
                parts.append(got)
            self.stream[step] = (self.setup.world, tuple(parts))
            self.cursor = step + 1

    @rule(
        weights=weight_rows,
        form=st.sampled_from(["list", "names", "indices"]),
        when=st.sampled_from(["now", "ahead", "landing"]),
        n=st.integers(0, 6),
        then=st.integers(0, 12),
    )
    def set_weights(self, weights, form: str, when: str, n: int, then: int) -> None:
        """``when``: the next step, ``n`` steps ahead, or the ``n``-th step ahead whose first
        position starts a shuffle window block (where the blend's position is the change's)."""
        step = self.cursor
        if when == "ahead":
            step += n
        elif when == "landing":
            for _ in range(n + 1):
                while self.cfg.window and step * BATCH % self.cfg.window:
                    step += 1
                step += 1
            step -= 1
        if form == "list":
            arg: Any = list(weights)
        else:
            arg = {(NAMES[d] if form == "names" else d): w for d, w in enumerate(weights) if w}
        at = None if when == "now" else step
        for lo in self.loaders:
            lo.set_weights(arg, at_step=at)
        row = tuple(float(x) for x in np.asarray(weights, dtype=np.float32))
        i = sum(s <= step for s, _ in self.changes)
        self.changes.insert(i, (step, row))
        self._take(then)

    @precondition(lambda self: self.cursor > 0)
    @rule(back=st.integers(1, 6))
    def set_weights_in_the_past(self, back: int) -> None:
        at = max(0, self.cursor - back)
        self._refused(lambda lo: lo.set_weights([1, 1, 1], at_step=at), "already at step")

    @rule()
    def save(self) -> None:
        states = [lo.state_dict()["fpipe_snapshot"] for lo in self.loaders]
        hist = None
        if self.known:
            hist = self.loaders[0].mix_history()
        else:
            self._refused(lambda lo: lo.mix_history(), "load_mix_history")
        held = tuple(self._held())
        self.saved.append(
            Saved(states[0], hist, self.cursor, held, tuple(self.skip), dict(self.stream))
        )
        del self.saved[:-4]

    @precondition(lambda self: self.saved)
    @rule(
        i=st.integers(0, 3),
        setup=setups,
        hist=st.sampled_from(["none", "own", "other"]),
        then=st.integers(0, 6),
    )
    def restore(self, i: int, setup: Setup, hist: str, then: int) -> None:
        """A fresh loader per rank restores a saved state (elastic: any world size), then
        maybe gets a saved history: its own, or another checkpoint's (refused unless it leads
        to the state)."""
        saved = self.saved[i % len(self.saved)]
        self._open(setup)
        for lo in self.loaders:
            lo.load_state_dict({"fpipe_snapshot": saved.state})
            assert lo.snapshot() == saved.state
        self.cursor, self.skip = saved.cursor, list(saved.skip)
        self.stream = dict(saved.stream)
        self.changes, self.known = list(saved.changes), not saved.changes
        given = saved.history if hist == "own" else self.saved[-1].history
        if hist != "none" and given is not None:
            steps = changes_of(given)
            k = len(saved.changes)
            if tuple(steps[:k]) != saved.changes:
                self._refused(lambda lo: lo.load_mix_history(given), "does not lead")
            elif any(s < saved.cursor for s, _ in steps[k:]):
                # another run's: it changed steps this state has passed without those changes
                self._refused(lambda lo: lo.load_mix_history(given))
            else:
                for lo in self.loaders:
                    lo.load_mix_history(given)
                self.changes, self.known = steps, True
        self._take(then)

    @rule(
        back=st.booleans(),
        d=st.integers(0, 8),
        hist=st.sampled_from(["none", "mine", "saved"]),
        then=st.integers(0, 6),
    )
    def seek(self, back: bool, d: int, hist: str, then: int) -> None:
        """``seek(N)`` in place, with no history (the loader's own), the training script's
        record of every change, or the history of the last checkpoint saved."""
        target = max(0, self.cursor - d) if back else self.cursor + d
        given: list[Change] | None = None
        if hist == "mine":
            given = list(self.changes)
        elif hist == "saved" and self.saved and self.saved[-1].history is not None:
            given = changes_of(self.saved[-1].history)
        arg = None if given is None else history(given)
        if given is None:
            if not self.known:
                self._refused(lambda lo: lo.seek(target), "pass the history")
                return
            new = self.changes
        elif self.known:
            mine = self.changes
            if any(a != b for a, b in zip(given, mine)):
                self._refused(lambda lo: lo.seek(target, mix_history=arg), "differs")
                return
            new = given if len(given) > len(mine) else mine
        else:
            count = len(self._held())
            if given[:count] != self.changes[:count]:
                self._refused(lambda lo: lo.seek(target, mix_history=arg), "does not lead")
                return
            new = given
        for lo in self.loaders:
            lo.seek(target, mix_history=arg)
        # a history that goes on from the known one may change steps already given: from
        # there on, the batches given were another run's
        i = next((i for i, (a, b) in enumerate(zip(new, self.changes)) if a != b), None)
        if i is None and len(new) > len(self.changes):
            i = len(self.changes)
        end = target if i is None else min(target, new[i][0])
        self.stream = self._truncate(self.stream, end)
        self.cursor, self.changes, self.known = target, list(new), True
        self._take(then)

    @rule(
        source=st.sampled_from(["current", "saved"]),
        how=st.sampled_from(["start_step", "then_seek", "from_zero"]),
        back=st.booleans(),
        d=st.integers(0, 8),
        setup=setups,
        then=st.integers(0, 6),
    )
    def replay(self, source: str, how: str, back: bool, d: int, setup: Setup, then: int) -> None:
        """New loaders from a history, as a restarted job without a loader state does:
        ``get_loader(ds, mix_history=h, start_step=N)``, ``get_loader(ds, mix_history=h)``
        then ``seek(N)``, or from step 0."""
        if source == "saved" and self.saved and self.saved[-1].history is not None:
            base, hist = self.saved[-1], self.saved[-1].history
            cursor, stream = base.cursor, base.stream
        elif self.known:
            hist, cursor, stream = self.loaders[0].mix_history(), self.cursor, self.stream
        else:
            return
        target = 0 if how == "from_zero" else max(0, cursor - d) if back else cursor + d
        if how == "start_step":
            self._open(setup, mix_history=hist, start_step=target)
        else:
            self._open(setup, mix_history=hist)
            if how == "then_seek":
                for lo in self.loaders:
                    lo.seek(target)
        self.stream = self._truncate(stream, target)
        self.cursor, self.changes, self.known, self.skip = target, changes_of(hist), True, []
        self._take(then)

    @precondition(lambda self: len(self.skip) < 4)
    @rule(
        off=st.integers(-2, 10),
        length=st.integers(1, 5),
        form=st.sampled_from(["range", "tuple", "text"]),
        then=st.integers(0, 6),
    )
    def skip_steps(self, off: int, length: int, form: str, then: int) -> None:
        a = max(0, self.cursor + off)
        b = a + length
        arg = {"range": range(a, b), "tuple": (a, b), "text": f"{a}:{b}"}[form]
        for lo in self.loaders:
            lo.skip(arg)
        self.skip.append((a, b))
        self._take(then)

    @precondition(lambda self: self.stream)
    @rule(which=st.integers(0, 1000))
    def lineage(self, which: int) -> None:
        """``step_samples`` over a few delivered steps and ``find_key`` of one of their samples
        (from a plan config of the run: its world size, skip ranges and mix history) list what
        the loader gave."""
        from fpipe.datasets.lineage import find_key, step_samples
        from fpipe.datasets.plan_config import load_plan_config

        path = self.data.root / "lineage_history.json"
        path.write_text(json.dumps(history(self.changes)))
        world = self.setup.world
        overrides = dict(options(self.cfg), world_size=world, skip_steps=self.skip or None)
        overrides["mix_history"] = str(path)
        plan = load_plan_config(self.data.root / f"{self.cfg.unit}.yaml", overrides)
        steps = sorted(self.stream)
        first = steps[which % len(steps)]
        rows = list(step_samples(plan, (first, first + 3)))
        for step in range(first, first + 3):
            got = [r for r in rows if r["step"] == step]
            assert all(r.get("skipped", False) == self._skipped(step) for r in got)
            if step not in self.stream:
                continue
            w, parts = self.stream[step]
            listed = [(r["key"], NAMES.index(r["dataset"]), r["index"], r["epoch"]) for r in got]
            assert listed == list(sum(parts, ())), f"step_samples of step {step}"
            if w == world:
                assert [(r["rank"], r["position"]) for r in got] == [
                    (r, p) for r, part in enumerate(parts) for p in range(len(part))
                ]
        key = self.stream[first][1][0][0][0]
        hits = find_key(plan, key, (0, self.cursor))["hits"]
        found = sorted((h["step"], h["epoch"]) for h in hits if h["step"] in self.stream)
        want = sorted(
            (s, e)
            for s, (_, parts) in self.stream.items()
            for k, _, _, e in sum(parts, ())
            if k == key
        )
        assert found == want, f"find_key({key!r})"

    # --- invariants ---

    @invariant()
    def stream_is_the_reference(self) -> None:
        """(a), checking each step once per set of changes."""
        if not self.stream:
            return
        key = tuple(self.changes)
        if self._checked[0] != key:
            self._checked = (key, set())
        done = self._checked[1]
        todo = [s for s in self.stream if s not in done]
        if not todo:
            return
        ref = reference_batches(self.data.root, self.cfg, key, max(todo) + 1)
        for s in sorted(todo):
            got = sum(self.stream[s][1], ())
            assert got == ref[s], f"step {s}: {got} != reference {ref[s]}"
            done.add(s)

    @invariant()
    def state_is_small_and_the_same_on_every_rank(self) -> None:
        """(b)"""
        if not self.loaders:
            return
        states = [lo.snapshot() for lo in self.loaders]
        assert max(map(len, states)) < STATE_BOUND, f"the state is {len(states[0])} bytes"
        assert all(b == states[0] for b in states), "ranks hold different states"
        if self.known:
            listed = changes_of(self.loaders[0].mix_history())
            assert listed == self._held(), f"mix_history() lists {listed}, asked {self._held()}"

    @invariant()
    def shares_follow_the_weights_asked(self) -> None:
        """(d)"""
        if hasattr(self, "cfg"):
            check_asked(self.data, self.cfg, self.changes, self.stream)


def test_loader_state_machine(data):
    run_state_machine_as_test(lambda: LoaderMachine(data), settings=MACHINE_SETTINGS)


# Sequences the machine found, kept as plain tests (cheap, and they run in every profile): a
# blend by tokens changed where its position is the change's (each dataset's token count must
# start again there); a seek that must keep the history the loader has, from its own
# set_weights or from get_loader(mix_history=...); a checkpoint taken right after a replay
# from a history must hold the changes of its step; two ranks whose own samples are of
# different epochs at a step must still hold the same state bytes.
T0 = Setup(1, 0, "thread")
FOUND = {
    "tokens_change_at_the_blend_position": [
        ("start", dict(cfg=Config("tokens", 0, 0), setup=T0)),
        ("take", dict(k=6)),
        ("set_weights", dict(weights=(0.0, 0.3, 4.0), form="list", when="now", n=0, then=6)),
    ],
    "seek_keeps_the_changes_made": [
        ("start", dict(cfg=Config("samples", 0, 0), setup=T0)),
        ("set_weights", dict(weights=(0.0, 0.0, 0.3), form="list", when="now", n=0, then=1)),
        ("seek", dict(back=False, d=4, hist="none", then=2)),
    ],
    "seek_after_get_loader_with_history": [
        ("start", dict(cfg=Config("samples", 8, 1), setup=T0)),
        ("set_weights", dict(weights=(4.0, 0.0, 1.0), form="names", when="now", n=0, then=6)),
        ("replay", dict(source="current", how="then_seek", back=True, d=2, setup=T0, then=6)),
    ],
    "checkpoint_right_after_a_replay": [
        ("start", dict(cfg=Config("samples", 0, 0), setup=T0)),
        ("set_weights", dict(weights=(0.0, 0.3, 0.0), form="list", when="now", n=0, then=0)),
        ("replay", dict(source="current", how="from_zero", back=False, d=0, setup=T0, then=0)),
        ("save", {}),
        ("restore", dict(i=0, setup=T0, hist="own", then=3)),
    ],
    # a quota blend whose change sends the weights in force again: the warm plan reused the
    # blocks it had drawn under the change before, a restore of its own state did not
    "quota_change_to_the_weights_in_force": [
        ("start", dict(cfg=Config("quota", 0, 0), setup=T0)),
        ("set_weights", dict(weights=(1.0, 3.0, 0.0), form="list", when="now", n=0, then=2)),
        ("set_weights", dict(weights=(1.0, 3.0, 0.0), form="list", when="now", n=0, then=2)),
        ("save", {}),
        ("take", dict(k=4)),
        ("restore", dict(i=0, setup=T0, hist="own", then=4)),
    ],
    "state_bytes_at_an_epoch_boundary_on_two_ranks": [
        ("start", dict(cfg=Config("samples", 12, 1), setup=Setup(2, 0, "thread"))),
        ("set_weights", dict(weights=(0.0, 0.3, 0.0), form="list", when="now", n=0, then=12)),
        ("take", dict(k=2)),
        ("seek", dict(back=False, d=8, hist="none", then=0)),
    ],
}


@pytest.mark.parametrize("name", sorted(FOUND))
def test_found_sequences(data, name):
    machine = LoaderMachine(data)
    try:
        for rule_name, kw in FOUND[name]:
            getattr(machine, rule_name)(**kw)
            machine.stream_is_the_reference()
            machine.state_is_small_and_the_same_on_every_rank()
            machine.shares_follow_the_weights_asked()
    finally:
        machine.teardown()
