"""Blends and concatenations of whole datasets (``fpipe.datasets.blend_datasets`` /
``concat_datasets``, Energon's ``BlendDataset`` / ``ConcatDataset``): each step is the next batch
of one dataset, built by that dataset's own materializer; weights followed, exact resume, the
same batches for any worker count or mode, and worker recovery re-running the right dataset."""

import collections
import itertools
import logging

import pytest

import fpipe
from fpipe.core import ConfigError
from fpipe.datasets import blend_datasets, concat_datasets
from fpipe.decode import ImageDecodeOptions
from fpipe.materialize.recipe_codec import decode_recipe, encode_recipe
from tests.loader.encoders import FaultEncoder, RandomCropEncoder
from tests.loader.helpers import digest

N = 12  # batches compared


def _ds(path, batch_size, seed, encoder=None, **kw):
    return fpipe.get_train_dataset(
        path,
        batch_size=batch_size,
        shuffle_buffer_size=16,
        max_samples_per_sequence=4,
        seed=seed,
        task_encoder=encoder if encoder is not None else RandomCropEncoder(),
        image_decode=ImageDecodeOptions(target_size=16),
        **kw,
    )


def _blend(path, encoder_b=None):
    return blend_datasets([(_ds(path, 2, 1), 2.0), (_ds(path, 3, 2, encoder_b), 8.0)])


def _take(loader, n=N):
    it = iter(loader)
    batches, states = [], []
    for _ in range(n):
        batches.append(next(it))
        states.append(loader.state_dict()["fpipe_snapshot"])
    return batches, states


@pytest.fixture(scope="module")
def reference(image_dataset):
    return _take(fpipe.get_loader(_blend(image_dataset), num_workers=0))


def test_the_blend_follows_its_weights(image_dataset):
    # Energon's test_blending: weights 2 and 8 over 1000 steps (the plan alone: no sample read)
    ds = blend_datasets(
        [(_ds(image_dataset, 10, 1), 2), (_ds(image_dataset, 20, 1), 8)]  # same seed: same order
    )
    state, recipes = ds.plan.init(), []
    while len(recipes) < 1000:
        state, out = ds.plan.next(state, 1000 - len(recipes))
        recipes += list(out)
    sizes = collections.Counter(len(r) for r in recipes)
    assert 150 <= sizes[10] <= 250 and 750 <= sizes[20] <= 850
    assert [r.step for r in recipes] == list(range(1000))
    assert all(len(r) == (10, 20)[r.part] for r in recipes)


def test_each_dataset_gives_its_own_batches_in_its_own_order(image_dataset, reference):
    batches, _ = reference
    a = [b for b in batches if len(b["keys"]) == 2]
    b = [b for b in batches if len(b["keys"]) == 3]
    assert a and b  # both datasets took part
    alone_a, _ = _take(fpipe.get_loader(_ds(image_dataset, 2, 1)), len(a))
    alone_b, _ = _take(fpipe.get_loader(_ds(image_dataset, 3, 2)), len(b))
    assert [digest(x) for x in a] == [digest(x) for x in alone_a]
    assert [digest(x) for x in b] == [digest(x) for x in alone_b]


def test_exact_resume_mid_stream(image_dataset, reference):
    batches, states = reference
    cut = 5
    loader = fpipe.get_loader(_blend(image_dataset), num_workers=0)
    loader.load_state_dict(states[cut - 1])
    rest, rest_states = _take(loader, N - cut)
    assert [digest(b) for b in rest] == [digest(b) for b in batches[cut:]]
    assert rest_states == states[cut:]
    assert len(states[-1]) < 1024  # the blend's counters and each dataset's own plan state


@pytest.mark.parametrize(("num_workers", "worker_mode"), [(2, "process"), (2, "thread")])
def test_the_same_batches_for_any_workers(image_dataset, reference, num_workers, worker_mode):
    batches, states = reference
    loader = fpipe.get_loader(
        _blend(image_dataset), num_workers=num_workers, worker_mode=worker_mode
    )
    got, got_states = _take(loader)
    assert [digest(b) for b in got] == [digest(b) for b in batches]
    assert got_states == states


def test_read_ahead_reads_each_recipe_from_its_own_dataset(image_dataset, reference):
    batches, _ = reference
    loader = fpipe.get_loader(_blend(image_dataset), num_workers=2, read_ahead_bytes=1 << 20)
    got, _ = _take(loader)
    assert [digest(b) for b in got] == [digest(b) for b in batches]
    io = loader.stats().io
    assert io.get("read_ahead_ranges", 0) > 0 and not io.get("read_ahead_errors")


def test_a_failed_worker_is_recovered_in_its_own_dataset(
    image_dataset, reference, tmp_path, caplog
):
    batches, states = reference
    fault_at = next(i for i, b in enumerate(batches) if len(b["keys"]) == 3 and i >= 2)
    key = batches[fault_at]["keys"][1]
    trigger = tmp_path / "trigger"
    trigger.write_text("on")
    encoder = FaultEncoder("kill-once", trigger, key)  # in dataset b only
    loader = fpipe.get_loader(_blend(image_dataset, encoder), num_workers=2, timeout=2.0)
    with caplog.at_level(logging.WARNING, logger="fpipe.loader"):
        got, got_states = _take(loader)
    assert (tmp_path / "trigger.fired").exists()  # the fault did happen
    assert [digest(b) for b in got] == [digest(b) for b in batches]
    assert got_states == states
    assert loader.stats().recoveries == 1 and f"at step {fault_at}" in caplog.text


def test_a_poison_sample_follows_its_own_datasets_error_policy(image_dataset, reference, tmp_path):
    batches, _ = reference
    fault_at = next(i for i, b in enumerate(batches) if len(b["keys"]) == 3 and i >= 2)
    key = batches[fault_at]["keys"][1]
    trigger = tmp_path / "trigger"
    trigger.write_text("on")
    a = _ds(image_dataset, 2, 1)  # error_policy="raise"
    b = _ds(image_dataset, 3, 2, FaultEncoder("kill", trigger, key), error_policy="skip")
    loader = fpipe.get_loader(blend_datasets([(a, 2.0), (b, 8.0)]), num_workers=2, timeout=2.0)
    got, _ = _take(loader)
    trigger.unlink()
    assert list(got[fault_at]["keys"]) == [k for k in batches[fault_at]["keys"] if k != key]
    others = [i for i in range(N) if i != fault_at]
    assert [digest(got[i]) for i in others] == [digest(batches[i]) for i in others]
    assert loader.stats().skipped == 1


def test_a_weighted_blend_of_finite_datasets_gives_every_batch_once(image_dataset):
    a = _ds(image_dataset, 4, 1, num_epochs=1)
    b = _ds(image_dataset, 5, 2, num_epochs=1)
    ds = blend_datasets([(a, 1), (b, 3)])
    assert len(ds) == len(a) + len(b)
    got = [tuple(x["keys"]) for x in fpipe.get_loader(ds)]
    want_a = [tuple(x["keys"]) for x in fpipe.get_loader(a)]
    want_b = [tuple(x["keys"]) for x in fpipe.get_loader(b)]
    assert [k for k in got if len(k) == 4] == want_a
    assert [k for k in got if len(k) == 5] == want_b
    assert len(got) == len(ds)


def test_concat_gives_each_dataset_in_turn(image_dataset):
    opts = dict(task_encoder=RandomCropEncoder(), image_decode=ImageDecodeOptions(target_size=16))
    a = fpipe.get_val_dataset(image_dataset, batch_size=3, **opts)
    b = fpipe.get_val_dataset(image_dataset, batch_size=5, **opts)
    ds = concat_datasets([a, b])
    want = [digest(x) for x in fpipe.get_loader(a)] + [digest(x) for x in fpipe.get_loader(b)]
    loader = fpipe.get_loader(ds)
    assert len(ds) == len(want)
    assert [digest(x) for x in loader] == want
    assert [digest(x) for x in loader] == want  # the next loop is a new pass


def test_a_blend_of_blends_is_flattened(image_dataset, reference):
    batches, _ = reference
    inner = _blend(image_dataset)
    outer = blend_datasets([(inner, 1), (_ds(image_dataset, 5, 3), 1)])
    assert len(outer.materializer.parts) == 3
    state, parts = outer.plan.init(), []
    for _ in range(40):
        state, out = outer.plan.next(state, 1)
        parts.append((out[0].part, len(out[0])))
    assert {p for p, _ in parts} == {0, 1, 2}
    assert all(n == (2, 3, 5)[p] for p, n in parts)
    taken = itertools.islice(fpipe.get_loader(outer), 2 * N)
    got = [digest(b) for b in taken if len(b["keys"]) != 5][:N]
    assert got and got == [digest(b) for b in batches][: len(got)]  # the inner blend's stream


def test_the_recipe_codec_keeps_the_part(image_dataset):
    ds = _blend(image_dataset)
    state, recipes = ds.plan.next(ds.plan.init(), 20)
    for r in recipes:
        back = decode_recipe(encode_recipe(r))
        assert (back.part, back.step, back.refs.triples()) == (r.part, r.step, r.refs.triples())
    assert {r.part for r in recipes} == {0, 1}


def test_what_a_blend_cannot_hold_is_refused(image_dataset):
    from fpipe.loader import Topology

    a = _ds(image_dataset, 2, 1)
    other_rank = _ds(image_dataset, 2, 1, topology=Topology(rank=1, world_size=2))
    with pytest.raises(ConfigError, match="rank 1 of 2"):
        blend_datasets([(a, 1), (other_rank, 1)])
    virtual = _ds(image_dataset, 2, 1, virtual_epoch_length=3)
    with pytest.raises(ConfigError, match="virtual_epoch_length"):
        concat_datasets([a, virtual])
    with pytest.raises(ConfigError, match="weight"):
        blend_datasets([(a, 0), (a, 1)])
    with pytest.raises(ConfigError, match="get_train_dataset"):
        blend_datasets([(a, 1), ([], 1)])


def test_a_blend_of_metadatasets_resumes_and_refuses_online_weights(tmp_path):
    for name, n in (("a", 40), ("b", 30)):
        rows = "".join(f'{{"text": "{name} {i}"}}\n' for i in range(n))
        (tmp_path / f"{name}.jsonl").write_text(rows)
    blend = "".join(f"      - {{weight: 1, path: {n}.jsonl}}\n" for n in ("a", "b"))
    (tmp_path / "mix.yaml").write_text("splits:\n  train:\n    blend:\n" + blend)
    opts = dict(sample_type="TextSample", field_map={"text": "text"}, seed=5)

    def build():
        mix = fpipe.get_train_dataset(str(tmp_path / "mix.yaml"), batch_size=4, **opts)
        plain = fpipe.get_train_dataset(str(tmp_path / "b.jsonl"), batch_size=2, **opts)
        return fpipe.get_loader(blend_datasets([(mix, 1), (plain, 1)]))

    loader = build()
    loop = iter(loader)
    texts = [list(b.text) for b in itertools.islice(loop, 4)]
    state = loader.state_dict()  # taken after 4 batches of the uninterrupted run
    texts += [list(b.text) for b in itertools.islice(loop, 6)]
    assert {len(t) for t in texts} == {2, 4}
    resumed = build()
    resumed.load_state_dict(state)
    assert [list(b.text) for b in itertools.islice(resumed, 6)] == texts[4:]
    with pytest.raises(ConfigError, match="head of the plan"):
        resumed.set_weights([1, 2])


def test_a_snapshot_restores_on_another_world_size(tmp_path):
    from fpipe.loader import Topology

    (tmp_path / "a.jsonl").write_text("".join(f'{{"text": "a{i}"}}\n' for i in range(90)))
    opts = dict(sample_type="TextSample", field_map={"text": "text"}, seed=5)

    def loader(world, rank):
        def ds(per_rank, seed):
            return fpipe.get_train_dataset(
                str(tmp_path / "a.jsonl"), batch_size=per_rank // world,
                topology=Topology(rank=rank, world_size=world), **{**opts, "seed": seed},
            )  # fmt: skip

        return fpipe.get_loader(blend_datasets([(ds(4, 1), 1), (ds(6, 2), 3)]))

    whole = [list(b.text) for b in itertools.islice(loader(1, 0), 8)]
    ranks = [loader(2, r) for r in (0, 1)]
    halves = [[list(b.text) for b in itertools.islice(r, 3)] for r in ranks]
    assert [a + b for a, b in zip(*halves)] == whole[:3]  # each rank its slice of a global batch
    resumed = loader(1, 0)
    resumed.load_state_dict(ranks[0].state_dict())
    assert [list(b.text) for b in itertools.islice(resumed, 5)] == whole[3:]


@pytest.mark.parametrize("combine", ["blend", "concat"])
def test_seek_lands_on_the_same_step_on_every_rank_past_a_short_last_batch(tmp_path, combine):
    # 4 ranks, global batches of 4, drop_last=False: each dataset's last global batch is short,
    # so some ranks have a step with nothing at it; a seek to step t on every rank is where
    # stepping that rank t steps lands (its batches and samples before t), at step t
    from fpipe.loader import Topology
    from fpipe.loader.steering import seek_state

    for name, n in (("a", 10), ("b", 14)):
        (tmp_path / f"{name}.jsonl").write_text(
            "".join(f'{{"text": "{name}{i}"}}\n' for i in range(n))
        )

    def plan(rank):
        def ds(name, seed):
            return fpipe.get_train_dataset(
                str(tmp_path / f"{name}.jsonl"), batch_size=1, seed=seed, num_epochs=1,
                drop_last=False, topology=Topology(rank=rank, world_size=4),
                sample_type="TextSample", field_map={"text": "text"},
            )  # fmt: skip

        parts = [ds("a", 1), ds("b", 2)]
        if combine == "concat":
            return concat_datasets(parts).plan
        return blend_datasets([(parts[0], 1), (parts[1], 1)]).plan

    nothing = 0
    for rank in range(4):
        p = plan(rank)
        state, batches, samples, step = p.init(), 0, 0, 0
        while True:
            assert seek_state(p, step, (), ())[:3] == (state, batches, samples), (rank, step)
            assert seek_state(p, step, (), (), fast=False)[:3] == (state, batches, samples)
            assert p.next_step(state) == step
            state, got = p.source.next_steps(state, 1)
            if not got:
                break
            nothing += got[0] is None
            batches += got[0] is not None
            samples += 0 if got[0] is None else len(got[0].refs)
            step += 1
        assert step == 7  # 3 + 4 global batches, the same on every rank
        with pytest.raises(ConfigError, match="past the end"):
            seek_state(p, 8, (), ())
    assert nothing  # some rank had a step with nothing for it
