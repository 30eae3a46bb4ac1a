"""Online blend weights from the loader (set_weights, mix_history) and seek / start_step: the
change takes effect at the step, restores and replays continue exactly in both worker modes,
seek gives the snapshot's bytes, and what cannot work is refused naming why."""

from __future__ import annotations

import copy
import json
import re
import textwrap

import numpy as np
import pytest

import fpipe
from fpipe.core.errors import ConfigError, SnapshotError
from fpipe.loader import Topology
from fpipe.loader.consistency import ConsistencyError
from fpipe.plan import BatchSchedule

NAMES = ("a.jsonl", "b.jsonl", "c.jsonl")


@pytest.fixture(scope="module")
def mix(tmp_path_factory):
    root = tmp_path_factory.mktemp("online")
    rng = np.random.default_rng(0)
    for name, n in (("a", 300), ("b", 200), ("c", 150)):
        with open(root / f"{name}.jsonl", "w") as f:
            for i in range(n):
                row = {"text": f"{name} {i}", "tokens": int(rng.integers(1, 200))}
                f.write(json.dumps(row) + "\n")
    blend = "".join(f"      - {{weight: 1, path: {n}}}\n" for n in NAMES)
    (root / "mix.yaml").write_text("splits:\n  train:\n    blend:\n" + blend)
    (root / "tokens.yaml").write_text(
        "splits:\n  train:\n    blend_unit: tokens\n    blend:\n" + blend
    )
    epochized = "".join(f"      - {{repetitions: 1, path: {n}}}\n" for n in NAMES)
    (root / "epochized.yaml").write_text("splits:\n  train:\n    blend_epochized:\n" + epochized)
    return root


def dataset(root, name="mix.yaml", world=1, rank=0, **kw):
    args = dict(
        global_batch_size=8,
        seed=3,
        sample_type="TextSample",
        field_map={"text": "text"},
        shuffle_buffer_size=40,
        columns=["tokens"],
        topology=Topology(rank=rank, world_size=world),
    )
    return fpipe.get_train_dataset(str(root / name), **{**args, **kw})


def keys(batch) -> list[str]:
    return list(batch.__key__)


CHANGES = {5: {"c.jsonl": 1.0}, 12: [1.0, 0.0, 2.0], 30: {"b.jsonl": 1, "a.jsonl": 1}}


def steered_run(root, steps=40, name="mix.yaml", **loader_kw):
    """Batches, the snapshot after each batch (taken after that step's set_weights) and the
    history of a run that changes its weights at the steps of CHANGES."""
    loader = fpipe.get_loader(dataset(root, name), **loader_kw)
    out, snaps = [], []
    for step, batch in zip(range(steps), loader):
        out.append(keys(batch))
        if step + 1 in CHANGES:
            loader.set_weights(CHANGES[step + 1])
        snaps.append(loader.snapshot())
    return out, snaps, loader.mix_history()


@pytest.fixture(scope="module")
def steered(mix):
    """``steered(name)``: ``steered_run(mix, name=name)``. The run is pure: it is made once per
    module, and each call gets its own copy."""
    runs: dict = {}

    def get(name="mix.yaml"):
        if name not in runs:
            runs[name] = steered_run(mix, name=name)
        return copy.deepcopy(runs[name])

    return get


def test_a_change_takes_effect_at_its_step_and_leaves_earlier_steps(mix, steered):
    plain = [keys(b) for _, b in zip(range(40), fpipe.get_loader(dataset(mix)))]
    out, _, hist = steered()
    assert out[:5] == plain[:5] and out[5:] != plain[5:]
    # weights {c: 1} from step 5: once the shuffle window drawn before it is used up (40
    # samples, 5 steps), every sample is c's until step 12
    assert all(k.startswith("c/") for batch in out[10:12] for k in batch)
    # [1, 0, 2] from step 12: no b after its window
    assert not any(k.startswith("b/") for batch in out[18:30] for k in batch)
    assert [c["step"] for c in hist["changes"]] == [5, 12, 30]
    assert hist["changes"][1]["weights"] == {"a.jsonl": 1.0, "b.jsonl": 0.0, "c.jsonl": 2.0}
    json.dumps(hist)  # plain data


@pytest.mark.parametrize("name", ["mix.yaml", "tokens.yaml"])
def test_replay_seek_and_restore_continue_exactly(mix, steered, name):
    out, snaps, hist = steered(name)
    replay = fpipe.get_loader(dataset(mix, name), mix_history=hist)
    assert [keys(b) for _, b in zip(range(40), replay)] == out
    for n in (1, 5, 6, 13, 31, 37):
        at = fpipe.get_loader(dataset(mix, name), start_step=n, mix_history=hist)
        assert at.snapshot() == snaps[n - 1]  # the same bytes as the run saved
        assert [keys(b) for _, b in zip(range(3), at)] == out[n : n + 3]
    # a restore without the history continues exactly (the state holds the weights), the
    # training loop making its later changes again
    restored = fpipe.get_loader(dataset(mix, name))
    restored.load_state_dict(snaps[20])
    got = []
    for step, batch in zip(range(21, 40), restored):
        got.append(keys(batch))
        if step + 1 in CHANGES:
            restored.set_weights(CHANGES[step + 1])
    assert got == out[21:40]


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_worker_modes_and_world_sizes_give_the_same_steered_run(mix, steered, mode):
    out, snaps, hist = steered()
    loader = fpipe.get_loader(dataset(mix), num_workers=2, worker_mode=mode, mix_history=hist)
    assert [keys(b) for _, b in zip(range(40), loader)] == out
    # restored on 2 ranks at step 8: the ranks' halves are the global batches
    parts = []
    for rank in range(2):
        ranked = fpipe.get_loader(dataset(mix, world=2, rank=rank), num_workers=2, worker_mode=mode)
        ranked.load_state_dict(snaps[7])
        ranked.load_mix_history(hist)  # the changes after step 8 are made again at their steps
        parts.append([keys(b) for _, b in zip(range(10), ranked)])
    assert [a + b for a, b in zip(*parts)] == out[8:18]


def test_the_state_stays_bounded_and_says_what_it_holds(mix):
    loader = fpipe.get_loader(dataset(mix))
    sizes = []
    for step, _ in zip(range(60), loader):
        loader.set_weights([1 + step % 3, 1, 2])
        sizes.append(len(loader.snapshot()))
    # the weights in force and those a lookahead has not reached yet: no growth with changes
    assert max(sizes[30:]) <= max(sizes[:30]) and len(set(sizes)) <= 3
    assert len(loader.mix_history()["changes"]) == 60
    from fpipe.loader.steering import state_mix

    mix_state = state_mix(loader.plan, loader._state.plan)
    assert mix_state.changes == 60 and mix_state.step == 60
    assert np.frombuffer(mix_state.current, "<f4").tolist() == [1 + 59 % 3, 1, 2]


def test_history_after_restore_and_wrong_histories(mix, steered):
    out, snaps, hist = steered()
    loader = fpipe.get_loader(dataset(mix))
    loader.load_state_dict(snaps[20])
    with pytest.raises(ConfigError, match="load_mix_history"):
        loader.mix_history()
    loader.load_mix_history(hist)
    assert loader.mix_history()["changes"] == hist["changes"][:2]
    other = dict(hist, changes=hist["changes"][1:])
    other.pop("digest")
    bad = fpipe.get_loader(dataset(mix))
    bad.load_state_dict(snaps[20])
    with pytest.raises(ConfigError, match="does not lead"):
        bad.load_mix_history(other)
    with pytest.raises(ConfigError, match="digest"):
        fpipe.get_loader(dataset(mix), mix_history=dict(hist, changes=hist["changes"][:1]))


def test_a_later_step_is_scheduled_and_the_past_refused(mix, steered):
    out, _, _ = steered()
    loader = fpipe.get_loader(dataset(mix))
    got = []
    for step, batch in zip(range(40), loader):
        got.append(keys(batch))
        if step == 2:
            for at, w in CHANGES.items():
                loader.set_weights(w, at_step=at)
    assert got == out
    with pytest.raises(ConfigError, match="already at step 40"):
        loader.set_weights([1, 1, 1], at_step=3)


def test_new_weights_give_steps_to_a_stream_ended_under_the_old(tmp_path):
    """A finite stream whose weighted dataset a filter empties has no step under its weights:
    set_weights at its end (at step 0, and at step 1 after a change to those weights there)
    gives it steps under the new ones; weights that give it no step either are refused."""
    for name in "abc":
        (tmp_path / f"{name}.jsonl").write_text(json.dumps({"text": name, "tokens": 9}) + "\n")
    (tmp_path / "c.jsonl").write_text(json.dumps({"text": "c", "tokens": 99}) + "\n")
    blend = "".join(f"      - {{weight: {w}, path: {n}}}\n" for n, w in zip(NAMES, (0, 0, 1)))
    (tmp_path / "mix.yaml").write_text("splits:\n  train:\n    blend:\n" + blend)
    ds = dataset(
        tmp_path, global_batch_size=1, shuffle_buffer_size=None, num_epochs=1,
        plan_stages=[fpipe.plan.filter_refs("tokens", "<", 50)],
    )  # fmt: skip
    assert [keys(b) for b in fpipe.get_loader(ds)] == []
    loader = fpipe.get_loader(ds)
    loader.set_weights([1, 0, 0])
    loader.set_weights([0, 0, 1], at_step=1)
    it = iter(loader)
    assert next(it).text == ["a"]
    loader.set_weights({"b.jsonl": 1})  # at step 1, where the stream would end
    assert [b.text for b in it] == [["b"], ["b"]]
    # weights that give it no step either are refused, changing nothing
    empty = fpipe.get_loader(ds)
    with pytest.raises(ConfigError, match="has ended at step 0, also with these weights"):
        empty.set_weights([0, 0, 1])
    assert empty.mix_history()["changes"] == [] and [keys(b) for b in empty] == []
    assert [c["step"] for c in loader.mix_history()["changes"]] == [0, 1, 1]


def test_refusals_name_the_problem(mix):
    loader = fpipe.get_loader(dataset(mix))
    with pytest.raises(ConfigError, match="unknown dataset 'x'"):
        loader.set_weights({"x": 1})
    with pytest.raises(ConfigError, match="not all 0"):
        loader.set_weights([0, 0, 0])
    with pytest.raises(ConfigError, match="2 weights for 3 datasets"):
        loader.set_weights([1, 1])
    with pytest.raises(ConfigError, match="epochized"):
        fpipe.get_loader(dataset(mix, "epochized.yaml")).set_weights([1, 1, 1])
    with pytest.raises(ConfigError, match="one dataset"):
        fpipe.get_loader(dataset(mix, "a.jsonl")).set_weights([1])
    with pytest.raises(ConfigError, match="packing_buffer_size"):
        ds = dataset(mix, global_batch_size=None, batch_size=4, packing_buffer_size=8)
        fpipe.get_loader(ds).seek(3)


def _bad_weight(name, value):
    return re.escape(f"the weight of {name!r} must be a finite number >= 0, got {value!r}")


@pytest.mark.parametrize(
    "weights, match",
    [
        ({"a.jsonl": "heavy"}, _bad_weight("a.jsonl", "heavy")),
        (["heavy", 1, 1], _bad_weight("a.jsonl", "heavy")),
        ({"b.jsonl": float("nan"), "a.jsonl": 1}, _bad_weight("b.jsonl", float("nan"))),
        ([1, float("inf"), 1], _bad_weight("b.jsonl", float("inf"))),
        ({"c.jsonl": -1, 0: 1}, _bad_weight("c.jsonl", -1)),
        ([1, 1, -1], _bad_weight("c.jsonl", -1)),
        ({"a.jsonl": None}, _bad_weight("a.jsonl", None)),
        ({"a.jsonl": 10**400}, _bad_weight("a.jsonl", 10**400)),
        ({"d.jsonl": 1}, "unknown dataset 'd.jsonl'"),
        ({"a.jsonl": 1, 0: 2}, "'a.jsonl' is given twice"),
        (5, "takes {dataset name: weight} or one weight per dataset"),
    ],
)
def test_both_forms_of_weights_are_checked_alike(mix, weights, match):
    loader = fpipe.get_loader(dataset(mix))
    before = loader.snapshot()
    with pytest.raises(ConfigError, match=match):
        loader.set_weights(weights)
    assert loader.snapshot() == before


def test_ranks_that_disagree_are_refused(mix, monkeypatch):
    import fpipe.loader.consistency as consistency

    loader = fpipe.get_loader(dataset(mix))
    before = loader.snapshot()

    def gathered(row, group):  # rank 1 asked for other weights
        other = row.copy()
        other[1] += 1
        return np.stack([row, other])

    monkeypatch.setattr(consistency, "consistency_enabled", lambda flag, group=None: True)
    monkeypatch.setattr(consistency, "_gather_rows", gathered)
    with pytest.raises(ConsistencyError, match="different weight changes"):
        loader.set_weights([1, 2, 3])
    assert loader.snapshot() == before  # nothing changed
    monkeypatch.setattr(consistency, "_gather_rows", lambda row, group: np.stack([row, row]))
    loader.set_weights([1, 2, 3])
    assert loader.snapshot() != before


def test_an_edited_online_record_is_a_snapshot_error(mix):
    import msgspec

    from fpipe.plan.online_mix import OnlineEntry, OnlineMix, decode_mix, encode_mix

    w = np.ones(3, "<f4").tobytes()
    good = OnlineMix(2, 9, bytes(8), (OnlineEntry(5, w), OnlineEntry(9, w)))
    assert decode_mix(encode_mix(good), 3) == good
    for bad in (
        msgspec.structs.replace(good, entries=good.entries[::-1]),  # out of order
        msgspec.structs.replace(good, entries=(OnlineEntry(5, w[:8]),)),  # 2 weights for 3
        msgspec.structs.replace(good, entries=(OnlineEntry(5, bytes(12)),)),  # all 0
    ):
        with pytest.raises(SnapshotError, match="not possible"):
            decode_mix(encode_mix(bad), 3)
    with pytest.raises(SnapshotError, match="malformed"):
        decode_mix(b"L\x00\x00\x00\x00", 3)


def test_each_sample_says_its_dataset(mix):
    loader = fpipe.get_loader(dataset(mix))
    batch = next(iter(loader))
    ids = [key[0] for key in batch.__restore_key__]
    names = [loader.dataset.datasets[i] for i in ids]
    assert [n.split(".")[0] for n in names] == [k.split("/")[0] for k in keys(batch)]


def test_megatron_step_batch_size_schedule(mix):
    def megatron_size(consumed, rows):  # StepBatchsizeNumMicroBatchesCalculator's rule
        size = rows[0][1]
        for threshold, bs in rows:
            if consumed >= threshold:
                size = bs
        return size

    text = "0:8 40:16, 0.1K:32"
    schedule = BatchSchedule.megatron(text)
    consumed = 0
    for step in range(30):
        assert schedule.size_at(step) == megatron_size(consumed, [(0, 8), (40, 16), (100, 32)])
        consumed += schedule.size_at(step)
    assert BatchSchedule.megatron("0:16 2.4B:320", seq_length=2048).size_at(10**6) == 320
    loader = fpipe.get_loader(dataset(mix, global_batch_size=text))
    sizes = [len(keys(b)) for _, b in zip(range(9), loader)]
    assert sizes == [8] * 5 + [16] * 4 == [schedule.size_at(s) for s in range(9)]
    for bad in ("8:8", "0:8 x:3", "0:8 5"):
        with pytest.raises(ConfigError, match="step batch size schedule"):
            BatchSchedule.megatron(bad)


def test_fpipe_plan_replays_the_mix_history(mix, steered, tmp_path):
    from fpipe.cli.main import main

    out, _, hist = steered()
    (tmp_path / "h.json").write_text(json.dumps(hist))
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        textwrap.dedent(
            f"""\
            path: {mix / "mix.yaml"}
            global_batch_size: 8
            seed: 3
            shuffle_buffer_size: 40
            columns: [tokens]
            sample_type: TextSample
            field_map: {{text: text}}
            """
        )
    )
    from fpipe.datasets.lineage import step_samples
    from fpipe.datasets.plan_config import load_plan_config

    cfg = load_plan_config(plan, {"mix_history": str(tmp_path / "h.json")})
    rows = list(step_samples(cfg, (10, 20)))
    assert [[r["key"] for r in rows if r["step"] == s] for s in range(10, 20)] == out[10:20]
    plain = list(step_samples(load_plan_config(plan), (10, 20)))
    assert [r["key"] for r in plain] != [r["key"] for r in rows]
    assert (
        main(
            ["plan", str(plan), "--step", "15", "--mix-history", str(tmp_path / "h.json"), "--json"]
        )
        == 0
    )


def test_a_pool_restarted_from_a_later_state_applies_each_change_once(mix):
    from fpipe.loader._steering import pending_changes
    from fpipe.loader.steering import seek_state

    loader = fpipe.get_loader(dataset(mix))
    loader.set_weights([1, 0, 0], at_step=3)
    loader.set_weights([0, 1, 0], at_step=6)
    assert [c.step for c in pending_changes(loader)] == [3, 6]
    later, *_ = seek_state(loader.plan, 4, (), loader._mix.changes)  # holds the change at 3
    assert [c.step for c in pending_changes(loader, later)] == [6]


def test_a_blend_inside_a_nested_metadataset(mix):
    (mix / "inner.yaml").write_text(
        "splits:\n  train:\n    blend:\n"
        "      - {weight: 1, path: a.jsonl}\n      - {weight: 1, path: b.jsonl}\n"
    )
    (mix / "outer.yaml").write_text(
        "splits:\n  train:\n    blend:\n"
        "      - {weight: 2, path: inner.yaml}\n      - {weight: 1, path: c.jsonl}\n"
    )
    loader = fpipe.get_loader(dataset(mix, "outer.yaml"))
    names = loader.dataset.datasets
    assert len(names) == 3 and any("/" in n for n in names)  # the inner leaves, flattened
    out, snaps = [], []
    for step, batch in zip(range(30), loader):
        out.append(keys(batch))
        if step == 4:
            loader.set_weights({names[2]: 1.0})  # c only
        snaps.append(loader.snapshot())
    assert all(k.startswith("c/") for batch in out[12:] for k in batch)
    at = fpipe.get_loader(
        dataset(mix, "outer.yaml"), start_step=20, mix_history=loader.mix_history()
    )
    assert at.snapshot() == snaps[19]


def test_a_hundred_dataset_state_stays_under_4_kb_with_online_weights(tmp_path):
    # a blend by tokens (its unit counters in the state), one change in force and one waiting
    # behind the shuffle window
    n, rng = 100, np.random.default_rng(0)
    for d in range(n):
        tokens = rng.integers(1, 500, 20).tolist()
        rows = (json.dumps({"text": f"{d} {i}", "tokens": t}) for i, t in enumerate(tokens))
        (tmp_path / f"ds{d:03d}.jsonl").write_text("\n".join(rows) + "\n")
    blend = "".join(f"      - {{weight: {1 + d % 7}, path: ds{d:03d}.jsonl}}\n" for d in range(n))
    head = "splits:\n  train:\n    blend_unit: tokens\n    blend:\n"
    (tmp_path / "mix.yaml").write_text(head + blend)
    loader = fpipe.get_loader(dataset(tmp_path, shuffle_buffer_size=1000), start_step=1)
    loader.set_weights([1 + d % 5 for d in range(n)])
    loader.seek(130, mix_history=loader.mix_history())  # the blend's window past the change
    loader.set_weights([1 + d % 3 for d in range(n)])
    from fpipe.loader.steering import state_mix

    assert len(state_mix(loader.plan, loader._state.plan).entries) == 2
    assert len(loader.snapshot()) <= 4096


@pytest.mark.parametrize(
    "how", ["get_loader", "load_mix_history", "set_weights", "at_step", "restore"]
)
def test_seek_replays_the_history_the_loader_has(mix, steered, how):
    # however the loader learnt its run's weight changes, seek(n) without a history goes to
    # that run's step n: its state, its history up to n, its batches from n on
    out, snaps, hist = steered()
    loader = fpipe.get_loader(dataset(mix), mix_history=hist if how == "get_loader" else None)
    if how == "load_mix_history":
        loader.load_state_dict(snaps[20])
        loader.load_mix_history(hist)
    elif how == "set_weights":  # the original run itself, changing its weights as it goes
        for step, _ in zip(range(35), loader):
            if step + 1 in CHANGES:
                loader.set_weights(CHANGES[step + 1])
    elif how == "at_step":
        for at, w in CHANGES.items():
            loader.set_weights(w, at_step=at)
    elif how == "restore":  # a state holding every change, by a loader that knew them
        loader = fpipe.get_loader(dataset(mix), mix_history=hist)
        loader.load_state_dict(snaps[34])
    for n, taken in ((8, 24), (3, 3)):  # a second seek keeps it too
        loader.seek(n)
        assert loader.snapshot() == snaps[n - 1]
        assert loader.mix_history()["changes"] == [c for c in hist["changes"] if c["step"] <= n]
        assert [keys(b) for _, b in zip(range(taken), loader)] == out[n : n + taken]
        if n == 8:  # past the changes at 12 and 30
            assert loader.mix_history() == hist


def test_seek_refuses_a_history_it_cannot_follow(mix, steered):
    out, snaps, hist = steered()
    # restored from a state with changes the loader does not know: seek needs their history
    loader = fpipe.get_loader(dataset(mix))
    loader.load_state_dict(snaps[20])
    with pytest.raises(ConfigError, match="mix_history="):
        loader.seek(8)
    first = {k: v for k, v in hist.items() if k != "digest"}
    with pytest.raises(ConfigError, match="does not lead"):
        loader.seek(8, mix_history=dict(first, changes=hist["changes"][:1]))
    loader.seek(8, mix_history=hist)
    assert loader.snapshot() == snaps[7]
    # a history that differs from the one the loader follows is refused, nothing changed
    other = copy.deepcopy(hist)
    other["changes"][1]["step"] = 13
    other.pop("digest")
    before = loader.snapshot()
    with pytest.raises(ConfigError, match="differs from the one this loader follows"):
        loader.seek(3, mix_history=other)
    assert loader.snapshot() == before
    # an earlier save of the same history agrees: the loader keeps the longer one
    earlier = dict(first, changes=hist["changes"][:2])
    loader.seek(31, mix_history=earlier)
    assert loader.snapshot() == snaps[30] and loader.mix_history() == hist
    short = fpipe.get_loader(dataset(mix), mix_history=earlier)
    short.seek(31, mix_history=hist)
    assert short.snapshot() == snaps[30]


def test_steering_refusals_say_what_is_wrong(mix, steered):
    out, snaps, hist = steered()
    loader = fpipe.get_loader(dataset(mix))
    for bad in (-1, 2.5, True, "3"):
        with pytest.raises(ConfigError) as e:
            loader.seek(bad)
        assert str(e.value) == f"seek: the step must be an integer >= 0, got {bad!r}"
    loader.seek(0)  # step 0 is a step: the fresh state
    assert loader.snapshot() == fpipe.get_loader(dataset(mix)).snapshot()
    for bad in (2.5, True):
        with pytest.raises(ConfigError) as e:
            loader.set_weights([1, 1, 1], at_step=bad)
        assert str(e.value) == f"set_weights: at_step must be a global step number, got {bad!r}"
    loader.seek(9)
    with pytest.raises(ConfigError) as e:
        loader.set_weights([1, 1, 1], at_step=3)
    assert str(e.value) == (
        "set_weights at step 3: the loader is already at step 9; restore a checkpoint from "
        "before it (or seek there) to change the weights of that step"
    )
    from fpipe.encode import DefaultTaskEncoder

    class Pairs(DefaultTaskEncoder):  # Energon's packing hooks
        def select_samples_to_pack(self, samples):
            return [samples[i : i + 2] for i in range(0, len(samples), 2)]

        def pack_selected_samples(self, samples):
            return samples[0]

    packed = fpipe.get_loader(
        dataset(mix, global_batch_size=None, batch_size=4, packing_buffer_size=8,
                task_encoder=Pairs())
    )  # fmt: skip
    calls = ((lambda: packed.seek(3), "seek"), (lambda: packed.set_weights([1, 1]), "set_weights"))
    for call, what in calls:
        with pytest.raises(ConfigError) as e:
            call()
        assert str(e.value) == (
            f"{what} needs batches the plan decides: with packing_buffer_size (the task "
            "encoder's packing hooks) a batch's packs are only known after reading its samples. "
            "Pack in the plan tier instead (plan_stages=[fpipe.plan.pack(...)], docs/packing.md)"
        )
    # a seek without the history of the changes a restored state holds
    restored = fpipe.get_loader(dataset(mix))
    restored.load_state_dict(snaps[20])
    with pytest.raises(ConfigError) as e:
        restored.mix_history()
    assert str(e.value) == (
        "this loader was restored from a state with 2 online weight change(s) it does not "
        "know: call loader.load_mix_history(history) with the history saved beside that "
        "checkpoint"
    )
    with pytest.raises(ConfigError) as e:
        restored.seek(8)
    assert str(e.value) == (
        "seek: this loader was restored from a state with 2 online weight change(s) it does not "
        "know, and a seek replays the run from step 0: pass the history saved beside that "
        "checkpoint, loader.seek(step, mix_history=history)"
    )
    # a history that differs from the loader's
    follows = fpipe.get_loader(dataset(mix), mix_history=hist)
    other = copy.deepcopy(hist)
    other["changes"][1]["step"] = 13
    other.pop("digest")
    with pytest.raises(ConfigError) as e:
        follows.seek(3, mix_history=other)
    assert str(e.value) == (
        "seek: this mix history differs from the one this loader follows at change 1 (step 13, "
        "weights [1.0, 0.0, 2.0]; the loader's: step 12, weights [1.0, 0.0, 2.0]). A loader "
        "replays one run's history: make a new loader (fpipe.get_loader(..., "
        "mix_history=history)) to seek in another run"
    )


def test_a_history_must_lead_to_the_state_and_name_its_datasets(mix, steered):
    from fpipe.loader.steering import MixHistory

    out, snaps, hist = steered()
    loader = fpipe.get_loader(dataset(mix))
    loader.load_state_dict(snaps[20])  # holds the changes at steps 5 and 12
    held = fpipe.get_loader(dataset(mix), mix_history=hist)
    held.seek(20)
    state_digest = held.mix_history()["digest"]
    # another run's history of three changes, whose first two give another digest
    other = {k: v for k, v in hist.items() if k != "digest"}
    other["changes"] = [*hist["changes"][1:], {"step": 35, "weights": {"a.jsonl": 1.0}}]
    first_two = MixHistory.of(dict(other, changes=other["changes"][:2])).digest().hex()
    with pytest.raises(ConfigError) as e:
        loader.load_mix_history(other)
    assert str(e.value) == (
        f"this mix history does not lead to the loader's state: the state holds 2 change(s) "
        f"with digest {state_digest}, the history's first 2 give {first_two} (a history of "
        "another run, or one saved before this checkpoint)"
    )
    # the run's history for datasets of other names (the digest does not hold names)
    renamed = copy.deepcopy(hist)
    renamed["datasets"] = ["x", "y", "z"]
    for c in renamed["changes"]:
        c["weights"] = {new: c["weights"][old] for old, new in zip(NAMES, "xyz")}
    named = re.escape(
        "mix history is for datasets ['x', 'y', 'z'], this loader blends "
        "['a.jsonl', 'b.jsonl', 'c.jsonl']"
    )
    with pytest.raises(ConfigError, match=named):
        loader.load_mix_history(renamed)
    with pytest.raises(ConfigError, match=named):
        fpipe.get_loader(dataset(mix)).seek(8, mix_history=renamed)


def test_a_history_loaded_before_its_first_change_puts_it_in_the_state(mix, steered):
    # a run without changes at step 5 (the state holds none) takes the history: the change at
    # step 5 is due now, so the state is the steered run's after step 4
    out, snaps, hist = steered()
    loader = fpipe.get_loader(dataset(mix))
    for _ in zip(range(5), loader):
        pass
    loader.load_mix_history(hist)
    assert loader.snapshot() == snaps[4]
    assert [keys(b) for _, b in zip(range(10), loader)] == out[5:15]


def test_a_restored_loader_that_knew_the_history_makes_its_changes_again(mix, steered):
    out, snaps, hist = steered()
    loader = fpipe.get_loader(dataset(mix), mix_history=hist)
    loader.load_state_dict(snaps[20])
    got = []
    for step, batch in zip(range(21, 40), loader):
        got.append(keys(batch))
        if step + 1 in CHANGES:
            loader.set_weights(CHANGES[step + 1])
    assert got == out[21:40] and loader.mix_history() == hist


def test_load_mix_history_and_seek_during_iteration_start_over_from_them(mix, steered):
    # as load_state_dict does; a skip range far ahead is set before, and one after each call
    out, snaps, hist = steered()
    for before, after in ((True, False), (False, True)):
        loader = fpipe.get_loader(dataset(mix))
        if before:
            loader.skip((1000, 1001))
        it = iter(loader)
        for _ in range(5):
            next(it)
        loader.load_mix_history(hist)
        if after:
            loader.skip((2000, 2001))
        assert [keys(next(it)) for _ in range(5)] == out[5:10]
        loader.seek(20)
        if after:
            loader.skip((3000, 3001))
        assert [keys(next(it)) for _ in range(5)] == out[20:25]


def test_seek_keeps_the_skip_ranges(mix):
    ranged = fpipe.get_loader(dataset(mix))
    ranged.skip((10, 12))
    whole = [keys(b) for _, b in zip(range(10), ranged)]  # steps 0..9, 12..13
    loader = fpipe.get_loader(dataset(mix))
    loader.skip((10, 12))
    loader.seek(8)
    assert [keys(b) for _, b in zip(range(4), loader)] == whole[8:10] + [
        keys(b) for _, b in zip(range(2), ranged)
    ]


def test_set_weights_compares_over_the_data_parallel_group(mix, monkeypatch):
    import fpipe.loader.consistency as consistency

    group = object()
    loader = fpipe.get_loader(
        dataset(mix, topology=Topology(rank=0, world_size=1, data_parallel_group=group))
    )
    seen = []
    monkeypatch.setattr(
        consistency, "consistency_enabled", lambda flag, group=None: seen.append(group) or True
    )
    monkeypatch.setattr(consistency, "_gather_rows", lambda row, group: np.stack([row, row]))
    loader.set_weights([1, 2, 3])
    assert seen == [group]


def test_seek_in_per_rank_mode_gives_the_runs_state(mix):
    # per-rank mode has no global position: the state's epoch is this rank's highest (past
    # the first epoch of the 650 samples at step 82)
    def ds():
        return dataset(mix, global_batch_size=None, batch_size=8, distribution="per_rank")

    run = fpipe.get_loader(ds())
    snaps = [run.snapshot() for _ in zip(range(90), run)]
    loader = fpipe.get_loader(ds())
    loader.seek(90)
    assert loader.snapshot() == snaps[89] and loader.stats().epoch == run.stats().epoch == 1


def test_changes_scheduled_on_a_restored_loader_apply_in_step_order(mix, steered):
    # restored from a state with changes it does not know: the run's change at step 30 made
    # again gives the run; one at step 35 scheduled before it still comes after it, as on a
    # loader that knew the history; of two changes at one step the later call holds
    out, snaps, hist = steered()

    def restored(known=False):
        loader = fpipe.get_loader(dataset(mix), mix_history=hist if known else None)
        loader.load_state_dict(snaps[20])
        return loader

    def run(loader):
        return [keys(b) for _, b in zip(range(19), loader)]

    again = restored()
    again.set_weights(CHANGES[30], at_step=30)
    assert run(again) == out[21:40]
    late, ordered = restored(), restored(known=True)
    late.set_weights([0, 1, 0], at_step=35)
    late.set_weights(CHANGES[30], at_step=30)
    ordered.set_weights(CHANGES[30], at_step=30)
    ordered.set_weights([0, 1, 0], at_step=35)
    assert run(late) == run(ordered) != out[21:40]
    twice, once = restored(), restored()
    twice.set_weights([1, 0, 0], at_step=25)
    twice.set_weights([0, 0, 1], at_step=25)
    once.set_weights([0, 0, 1], at_step=25)
    assert run(twice) == run(once)
    # and the history lists both, in the order they were made
    fresh = fpipe.get_loader(dataset(mix))
    fresh.set_weights([1, 0, 0], at_step=3)
    fresh.set_weights([0, 0, 1], at_step=3)
    for _ in zip(range(4), fresh):
        pass
    assert [(c["step"], c["weights"]["c.jsonl"]) for c in fresh.mix_history()["changes"]] == [
        (3, 0.0),
        (3, 1.0),
    ]


def test_set_weights_during_iteration_starts_over_from_the_last_batch(mix, steered):
    out, _, _ = steered()
    loader = fpipe.get_loader(dataset(mix))
    it = iter(loader)
    for _ in range(5):
        next(it)
    loader.set_weights(CHANGES[5])
    loader.skip((4000, 4001))  # one more call before the next batch
    assert [keys(next(it)) for _ in range(5)] == out[5:10]


def test_a_loader_without_online_weights_restores_and_seeks(mix):
    # no weighted blend, so no changes to know: a restored loader seeks from the config
    for name in ("a.jsonl", "epochized.yaml"):
        run = fpipe.get_loader(dataset(mix, name))
        snaps = [run.snapshot() for _ in zip(range(12), run)]
        loader = fpipe.get_loader(dataset(mix, name))
        loader.load_state_dict(snaps[10])
        loader.seek(6)
        assert loader.snapshot() == snaps[5]


def test_a_change_after_the_end_of_a_stream_is_refused(tmp_path):
    for name in "ab":
        (tmp_path / f"{name}.jsonl").write_text(json.dumps({"text": name, "tokens": 9}) + "\n")
    (tmp_path / "c.jsonl").write_text(json.dumps({"text": "c", "tokens": 99}) + "\n")
    blend = "".join(f"      - {{weight: {w}, path: {n}}}\n" for n, w in zip(NAMES, (0, 0, 1)))
    (tmp_path / "mix.yaml").write_text("splits:\n  train:\n    blend:\n" + blend)
    ds = dataset(
        tmp_path, global_batch_size=1, shuffle_buffer_size=None, num_epochs=1,
        plan_stages=[fpipe.plan.filter_refs("tokens", "<", 50)],
    )  # fmt: skip
    loader = fpipe.get_loader(ds)  # no step under its weights: the stream ends at step 0
    with pytest.raises(ConfigError) as e:
        loader.set_weights([1, 0, 0], at_step=3)
    assert str(e.value) == (
        "set_weights: the stream has ended at step 0; there is no later step to change"
    )
    before = loader.snapshot()
    loader.seek(0)  # step 0 of a stream with no step is its start
    assert loader.snapshot() == before


def test_datasets_blended_whole_restore_and_seek(mix):
    # a weighted blend inside datasets blended whole (blend_datasets) takes no online weights,
    # so a restored loader has no changes to know and seeks from the config
    from fpipe.datasets import blend_datasets

    def ds():
        return blend_datasets([(dataset(mix), 1.0), (dataset(mix, "a.jsonl"), 1.0)])

    run = fpipe.get_loader(ds())
    snaps = [run.snapshot() for _ in zip(range(12), run)]
    loader = fpipe.get_loader(ds())
    loader.load_state_dict(snaps[10])
    loader.seek(6)
    assert loader.snapshot() == snaps[5]


def test_a_mix_history_is_read_back_or_refused_naming_what_is_wrong(mix):
    from fpipe.loader.steering import MixChange, MixHistory

    h = MixHistory(NAMES, (MixChange(3, (1.0, 0.0, 2.0)), MixChange(3, (0.0, 1.0, 0.0))))
    data = h.to_dict()
    assert data["format"] == "fpipe-mix-history" and data["version"] == 1
    assert MixHistory.of(h) is h and MixHistory.of(data) == h  # two changes at one step
    plain = {k: v for k, v in data.items() if k != "digest"}
    W = {"a.jsonl": 1.0}
    for bad, message in (
        ([1, 2], "a mix history is the dict loader.mix_history() returns (format "
         "'fpipe-mix-history'), got list"),
        ({**data, "format": "other"}, "a mix history is the dict loader.mix_history() returns "
         "(format 'fpipe-mix-history'), got dict"),
        ({**plain, "changes": [{"weights": {}}]}, "mix history change 0 lacks 'step' or 'weights'"),
        ({**data, "digest": "00" * 8}, "mix history: its digest does not match its changes (the "
         "file was edited or truncated)"),
        ({**plain, "changes": [{"step": 5, "weights": W}, {"step": 3, "weights": W}]},
         "mix history: change steps must be >= 0 and in order: [5, 3]"),
        ({**plain, "changes": [{"step": -1, "weights": W}]},
         "mix history: change steps must be >= 0 and in order: [-1]"),
        ({**plain, "changes": [{"step": i, "weights": W} for i in (2, 5, 3)]},
         "mix history: change steps must be >= 0 and in order: [2, 5, 3]"),
    ):  # fmt: skip
        with pytest.raises(ConfigError) as e:
            MixHistory.of(bad)
        assert str(e.value) == message
    loader = fpipe.get_loader(dataset(mix))
    for index in (3, -1):
        with pytest.raises(ConfigError) as e:
            loader.set_weights({index: 1.0})
        assert str(e.value) == f"set_weights: unknown dataset {index}; blended: {list(NAMES)}"


def test_ranks_that_disagree_are_named_with_their_steps(mix, monkeypatch):
    import fpipe.loader.consistency as consistency

    group = object()
    loader = fpipe.get_loader(
        dataset(mix, topology=Topology(rank=0, world_size=1, data_parallel_group=group))
    )
    seen = []

    def gathered(row, group):  # rank 1 asked for step 7, rank 2 as rank 0
        seen.append((row.dtype, group))
        other = row.copy()
        other[0] = 7
        return np.stack([row, other, row])

    monkeypatch.setattr(consistency, "consistency_enabled", lambda flag, group=None: True)
    monkeypatch.setattr(consistency, "_gather_rows", gathered)
    with pytest.raises(ConsistencyError) as e:
        loader.set_weights([1, 2, 3])
    assert seen == [(np.int64, group)]
    assert str(e.value) == (
        "set_weights: the ranks asked for different weight changes (ranks [0, 2] step 0; "
        "ranks [1] step 7); every rank must call set_weights with the same weights and step "
        "(compute them on one rank and broadcast them, or from values all-reduced over the "
        "ranks). Nothing changed."
    )


def test_a_steered_plan_steps_and_advances_to_the_states_a_seek_reaches(mix):
    # SteeredPlan (what fpipe plan --mix-history steps through): each change before its step,
    # one recipe per next() by default, advance over runs of steps between changes
    from fpipe.loader.steering import MixChange, SteeredPlan, seek_state

    plan = fpipe.get_loader(dataset(mix)).plan
    changes = (MixChange(0, (0.0, 1.0, 0.0)), MixChange(3, (1.0, 0.0, 1.0)))
    steered = SteeredPlan(plan, changes)

    def at(step):
        return plan.snapshot(seek_state(plan, step, (), changes)[0])

    state = steered.init()
    assert plan.snapshot(state) == at(0)
    for step in range(1, 7):
        state, out = steered.next(state)
        assert len(out) == 1 and out[0].step == step - 1
        assert plan.snapshot(state) == at(step)
    for start, n in ((0, 1), (0, 6), (3, 2), (2, 3)):
        begin = seek_state(plan, start, (), changes)[0]
        state, passed = steered.advance(begin, n)
        assert plan.snapshot(state) == at(start + n) and passed.outputs == n


def test_the_quota_draw_steers_restores_and_seeks_exactly(mix):
    def make(**kw):
        return dataset(mix, blend_draw="quota", **kw)

    loader = fpipe.get_loader(make())
    out, snaps = [], []
    for step, batch in zip(range(40), loader):
        out.append(keys(batch))
        if step + 1 in CHANGES:
            loader.set_weights(CHANGES[step + 1])
        snaps.append(loader.snapshot())
    hist = loader.mix_history()
    assert all(k.startswith("c/") for batch in out[10:12] for k in batch)
    for n in (6, 13, 31):
        at = fpipe.get_loader(make(), start_step=n, mix_history=hist)
        assert at.snapshot() == snaps[n - 1]
        assert [keys(b) for _, b in zip(range(3), at)] == out[n : n + 3]
    restored = fpipe.get_loader(make())
    restored.load_state_dict(snaps[20])
    got = []
    for step, batch in zip(range(21, 40), restored):
        got.append(keys(batch))
        if step + 1 in CHANGES:
            restored.set_weights(CHANGES[step + 1])
    assert got == out[21:40]
    with pytest.raises(
        SnapshotError, match="field .draw. differs"
    ):  # not the draw it was saved with
        fpipe.get_loader(dataset(mix)).load_state_dict(snaps[20])
    with pytest.raises(ConfigError, match="blend_draw='quota' applies to a weighted"):
        dataset(mix, "epochized.yaml", blend_draw="quota")
