"""Ray actor workers (``worker_mode="ray"``) on a two-node local Ray cluster: the batches and the
state bytes of process mode for 1, 2 and 3 actors and every kind of plan; resume across modes;
a killed actor, a hung actor and a poison sample recovered as in process mode; typed errors.
Also ``prepare_on_ray`` (in this module so that Ray starts once for the suite)."""

from __future__ import annotations

import gc
import logging
import shutil
import sys
import time

import numpy as np
import pytest
import torch

from fpipe.core import ConfigError, MaterializeError
from fpipe.encode import batch_slots
from fpipe.loader import _ray_batches, _ray_pool, _ray_workers
from tests.loader.encoders import FaultEncoder
from tests.loader.helpers import build, digest
from tests.ray.datasets import Stamped, loader, make_all

KINDS = ("images", "video_buckets", "blend_pack_ramp_skip", "every_hook")
N = 6  # batches compared per run
#: three actors fit the two one-CPU nodes, spread over both; every test uses these options, so
#: the same three actors serve them all (a new actor takes seconds to start on a busy machine)
OPTIONS = {"num_cpus": 0.5, "scheduling_strategy": "SPREAD"}
#: a Ray cluster of two nodes, about a minute in all: opt-in with -m integration
pytestmark = [pytest.mark.slow, pytest.mark.integration]


def _run(ld, n=N):
    """(digest, snapshot bytes) of the first ``n`` batches. The loop is closed at once: left to
    the garbage collector, its Ray actors stay lent (their CPUs held) and the next test's new
    actors wait for them for a collection's time (seconds to half a minute here)."""
    out = []
    loop = iter(ld)
    try:
        for batch in loop:
            out.append((digest(batch), ld.snapshot()))
            if len(out) == n:
                break
    finally:
        loop.close()
    return out


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    return make_all(tmp_path_factory.mktemp("ray_data"))


@pytest.fixture(scope="module")
def reference(paths):
    """Each kind's batches and snapshots at num_workers=0 (the same as process workers: checked
    here for the images, elsewhere for the rest)."""
    return {kind: _run(loader(paths, kind)) for kind in KINDS}


def _same_as_process_mode(ray_cluster, paths, reference, runs):
    _, cluster = ray_cluster
    for kind, actors in runs:
        ld = loader(paths, kind, num_workers=actors, worker_mode="ray", ray_options=OPTIONS)
        it = iter(ld)
        got = [(digest(next(it)), ld.snapshot()) for _ in range(N)]
        nodes = {node for _, _, node in _ray_workers.actors_in_use()}
        it.close()
        assert got == reference[kind], (kind, actors)
        if actors == 3:  # at most two fit a node: the actors are on both nodes
            assert nodes == {n.node_id for n in cluster.list_all_nodes()}, nodes


def test_ray_mode_equals_process_mode_for_every_kind_and_actor_count(ray_cluster, paths, reference):
    """Every kind of plan on 1, 2 and 3 actors (three actors are spread over both nodes)."""
    assert _run(loader(paths, "images", num_workers=1)) == reference["images"]  # processes
    runs = [(kind, actors) for kind in KINDS for actors in (1, 2, 3)]
    _same_as_process_mode(ray_cluster, paths, reference, runs)


def test_resume_from_ray_into_process_mode_and_back(ray_cluster, paths, reference):
    ref = [d for d, _ in reference["images"]]
    ray_loader = loader(paths, "images", num_workers=2, worker_mode="ray", ray_options=OPTIONS)
    it = iter(ray_loader)
    got = [digest(next(it)) for _ in range(2)]
    it.close()
    procs = loader(paths, "images", num_workers=1)
    procs.load_state_dict(ray_loader.state_dict())
    it = iter(procs)
    got += [digest(next(it)) for _ in range(2)]
    it.close()
    again = loader(paths, "images", num_workers=3, worker_mode="ray", ray_options=OPTIONS)
    again.load_state_dict(procs.state_dict())
    got += [d for d, _ in _run(again, N - 4)]
    assert got == ref and again.snapshot() == reference["images"][-1][1]


def test_passes_left_early_do_not_hold_up_the_next(ray_cluster, paths, reference):
    """Loops closed after one batch, recipes still queued on their actors: each next pass on
    the same actors starts at once. (Cancelling the queued tasks left gaps in the actors' task
    sequences, and Ray held their next tasks 30 s: within 20 such passes, in each of 3 runs.)"""
    passes = []
    for _ in range(30):
        start = time.perf_counter()
        ld = loader(paths, "images", num_workers=2, worker_mode="ray", ray_options=OPTIONS)
        passes.append((_run(ld, 1), time.perf_counter() - start))
    assert all(batches == reference["images"][:1] for batches, _ in passes)
    slowest = max(took for _, took in passes[1:])  # the first may start the actors
    assert slowest < 10, f"a pass waited {slowest:.1f} s for its actors"


#: bytes of a Stamped batch's storages (its uint8 images and their float copy)
STAMPED_BYTES = 4 * 3 * 128 * 128 * (1 + 4)


def _stamped(paths, **kw):
    return build(paths["images"], encoder=Stamped(), num_epochs=1, **kw)


@pytest.fixture(scope="module")
def stamped_reference(paths):
    """Digests of the Stamped batches from one worker process."""
    return [digest(b) for b in _stamped(paths, num_workers=1)]


def test_batches_are_read_where_they_lie_and_kept_ones_never_change(
    ray_cluster, paths, stamped_reference
):
    """Batches of about 1 MB arrive over the object store's memory, bit for bit those of a
    worker process, views kept as views; kept after their ObjectRefs are gone and the store has
    been refilled many times over, none changes; dropped, they pin nothing."""
    ray, _ = ray_cluster
    before = _ray_batches.pinned_bytes()[0]
    ld = _stamped(paths, num_workers=2, worker_mode="ray", ray_options=OPTIONS)
    kept = [(b, b["image"].clone()) for b in ld]
    assert [digest(b) for b, _ in kept] == stamped_reference and len(kept) > 5
    assert len({bytes(c.numpy()) for _, c in kept}) == len(kept)  # all different
    assert _ray_batches.pinned_bytes()[0] - before == len(kept) * STAMPED_BYTES
    assert all(b["half"].data_ptr() == b["image"].data_ptr() + 128 * 128 for b, _ in kept)
    for _ in range(4):  # 64 MB into an 80 MB store: what nothing pins is evicted or reused
        refs = [ray.put(np.full(8 << 20, 255, np.uint8)) for _ in range(8)]
        del refs
    assert all(torch.equal(b["image"], c) for b, c in kept)
    del kept
    gc.collect()
    assert _ray_batches.pinned_bytes()[0] == before


def test_kept_batches_pin_at_most_the_bound_and_the_rest_arrive_copied(
    ray_cluster, paths, stamped_reference, monkeypatch
):
    ray, _ = ray_cluster
    _ray_pool._POOL.size_store(ray)  # once per session: the bound set below stays
    before = _ray_batches.pinned_bytes()[0]
    monkeypatch.setattr(_ray_batches, "_bound", before + 3 * STAMPED_BYTES)
    ld = _stamped(paths, num_workers=2, worker_mode="ray", ray_options=OPTIONS)
    kept = list(ld)
    pinned, bound = _ray_batches.pinned_bytes()
    assert before + 2 * STAMPED_BYTES <= pinned <= bound
    assert [digest(b) for b in kept] == stamped_reference
    del kept
    gc.collect()
    assert _ray_batches.pinned_bytes()[0] == before


def _in_slot(t: torch.Tensor) -> bool:
    arenas = batch_slots._attached.values()
    return any(a.base <= t.data_ptr() < a.base + len(a.mm) for a in arenas)


def test_an_actor_on_this_node_hands_batches_over_in_slots_kept_ones_never_change(
    ray_cluster, paths
):
    """fpipe's own batch hooks: an actor on the driver's node collates into shared-memory
    slots and the batch is handed over where it lies, the actor on the other node sends through
    the object store. Bit for bit process mode's. Every batch is kept: the actor's slots (2
    prefetched + 2) are all held after four, and its next batches come through the object
    store; kept batches never change while the actors go on."""
    reference = [digest(b) for b in build(paths["images"], encoder=None, num_epochs=1)]
    ld = build(paths["images"], encoder=None, num_epochs=1, num_workers=2, worker_mode="ray",
               ray_options=OPTIONS)  # fmt: skip
    loop = iter(ld)
    kept = [next(loop), next(loop)]  # one from each actor: both have said where they run
    here = ray_cluster[0].get_runtime_context().get_node_id()
    on_this_node = sum(node == here for _, _, node in _ray_workers.actors_in_use())
    kept += list(loop)
    kept = [(b, b.image.clone(), _in_slot(b.image)) for b in kept]
    assert [digest(b) for b, _, _ in kept] == reference and len(kept) > 10
    # batch i came from actor i % 2
    in_slots = sorted(sum(slot for _, _, slot in kept[k::2]) for k in (0, 1))
    assert in_slots == [0] * (2 - on_this_node) + [4] * on_this_node, (in_slots, on_this_node)
    for _ in range(2):  # the actors go on with other passes
        assert len(_run(build(paths["images"], encoder=None, num_workers=2, worker_mode="ray",
                              ray_options=OPTIONS), 8)) == 8  # fmt: skip
    assert all(torch.equal(b.image, c) for b, c, _ in kept)

    # the actor on this node killed mid-run, with recipes in flight and batches in its slots
    ld = build(paths["images"], encoder=None, num_epochs=1, num_workers=2, worker_mode="ray",
               ray_options=OPTIONS)  # fmt: skip
    loop = iter(ld)
    got = [next(loop) for _ in range(3)]
    victims = [h for h, _, node in _ray_workers.actors_in_use() if node == here]
    ray_cluster[0].kill(victims[0] if victims else _ray_workers.actors_in_use()[0][0])
    got += list(loop)
    assert [digest(b) for b in got] == reference and ld.stats().recoveries == 1
    assert all(torch.equal(b.image, c) for b, c, _ in kept)


def _storage_of(nbytes: int):
    """In a Ray worker: a tensor of ``nbytes`` sent the way actors send batches."""
    _ray_batches.register()
    return torch.arange(nbytes // 4, dtype=torch.int32)


def test_a_storage_of_several_chunks_arrives_whole_where_it_lies(ray_cluster):
    """A storage of more than CHUNK bytes goes as several buffers, which the object store lays
    out back to back: it arrives as one storage over the store's memory (every byte pinned,
    none copied), bit for bit."""
    ray, _ = ray_cluster
    nbytes = 3 * _ray_batches.CHUNK + 4096
    before = _ray_batches.pinned_bytes()[0]
    make = ray.remote(_storage_of).options(num_cpus=0)
    got = ray.get(make.remote(nbytes))
    assert torch.equal(got, torch.arange(nbytes // 4, dtype=torch.int32))
    assert _ray_batches.pinned_bytes()[0] - before == nbytes
    del got
    gc.collect()
    assert _ray_batches.pinned_bytes()[0] == before


def _fault_loader(paths, tmp_path, mode, key, **kw):
    trigger = tmp_path / "trigger"
    trigger.write_text("on")
    return build(
        paths["images"], num_workers=2, encoder=FaultEncoder(mode, trigger, key),
        worker_mode="ray", ray_options=OPTIONS, **kw,
    )  # fmt: skip


def _key_of_batch(reference_loader, i):
    it = iter(reference_loader)
    batches = [next(it) for _ in range(i + 1)]
    return batches[i]["keys"][1]


def test_killed_and_hung_actors_are_replaced_and_the_output_is_unchanged(
    ray_cluster, paths, reference, tmp_path, caplog
):
    ray, _ = ray_cluster
    long = _run(build(paths["images"]), 12)  # past what the actors had made before the kill
    ld = build(paths["images"], num_workers=2, worker_mode="ray", ray_options=OPTIONS)
    it = iter(ld)
    got = [(digest(next(it)), ld.snapshot())]
    victim = _ray_workers.actors_in_use()[0][0]
    ray.kill(victim)  # mid-run, with recipes in flight on it
    got += [(digest(next(it)), ld.snapshot()) for _ in range(len(long) - 1)]
    it.close()
    assert got == long
    assert ld.stats().recoveries == 1 and ld.stats().recovered == {"died": 1}

    ref = reference["images"]

    key = _key_of_batch(build(paths["images"]), 3)
    hung = _fault_loader(paths, tmp_path, "hang-once", key, timeout=1.5)
    with caplog.at_level(logging.WARNING, logger="fpipe.loader"):
        assert _run(hung) == ref
    assert hung.stats().recovered == {"timed out": 1}
    assert "worker fault (timed out) at step 3" in caplog.text


def test_a_sample_that_kills_its_actor_follows_the_error_policy(ray_cluster, paths, tmp_path):
    key = _key_of_batch(build(paths["images"]), 2)
    ld = _fault_loader(paths, tmp_path, "kill", key, error_policy="skip")
    got = _run(ld, 4)
    assert len(got) == 4
    stats = ld.stats()
    # unnamed the first time (a dead actor says nothing), named by the two marked runs after;
    # the first fault may be taken at the step before (the dead actor's reply for the recipe
    # it had just finished can be lost with it), which adds one unnamed recovery
    assert stats.skipped == 1 and stats.recoveries in (3, 4)
    assert stats.recovered == {"died": stats.recoveries}
    ref = _run(build(paths["images"], error_policy="skip"), 4)
    assert [d for d, _ in got[:2]] == [d for d, _ in ref[:2]] and got[3][0] == ref[3][0]


def test_an_error_in_an_actor_keeps_its_type_and_names_hook_key_and_step(
    ray_cluster, paths, tmp_path
):
    key = _key_of_batch(build(paths["images"]), 1)
    ld = _fault_loader(paths, tmp_path, "raise", key)
    with pytest.raises(MaterializeError) as info:
        _run(ld)
    err = info.value
    assert err.hook == "encode_sample" and err.step == 1 and key in err.keys
    assert "hook failed on purpose" in str(err) and ld.stats().batches == 1


def test_prepare_on_ray_writes_the_index_of_a_single_process_prepare(ray_cluster, tmp_path):
    from fpipe.cli.main import main
    from fpipe.storage import prepare_dataset
    from fpipe.storage.prepare.ray_prepare import prepare_on_ray
    from tests.storage.helpers import make_image_caption_dataset

    options = dict(fields={"image": "jpg", "caption": "txt"}, split="2,1")
    one, api, cli = tmp_path / "one", tmp_path / "api", tmp_path / "cli"
    make_image_caption_dataset(one, shards=5, per_shard=4, with_json=False)
    shutil.copytree(one, api)
    shutil.copytree(one, cli)
    single = prepare_dataset(one, **options)
    _ray_workers.release_ray_actors()  # the CLI's tasks take a whole CPU each
    report = prepare_on_ray(api, parts=3, num_cpus=0.5, **options)
    assert report.num_samples == single.num_samples == 20 and report.num_shards == 5
    argv = ["prepare", str(cli), "--ray", "--ray-parts", "2", "--split", "2,1", "--no-progress"]
    assert main([*argv, "--field", "image=jpg", "--field", "caption=txt"]) == 0
    assert report.source == single.source == "webdataset"
    info = ".fpipe/info.yaml"
    assert _index(api)[info] == _index(cli)[info] == _index(one)[info]
    assert _index(api) == _index(cli) == _index(one)


def test_prepare_on_ray_resumes_a_run_stopped_with_another_number_of_parts(ray_cluster, tmp_path):
    """A run stopped after part 0 of 3 (its part written, its journal kept) is started again
    with 2 parts: the stale part is dropped and the index is the single-process one."""
    from fpipe.storage import prepare_dataset
    from fpipe.storage.prepare.ray_prepare import prepare_on_ray
    from tests.storage.helpers import make_image_caption_dataset

    options = dict(fields={"image": "jpg", "caption": "txt"})
    one, stopped = tmp_path / "one", tmp_path / "stopped"
    make_image_caption_dataset(one, shards=5, per_shard=2, with_json=False)
    shutil.copytree(one, stopped)
    prepare_dataset(one, **options)
    prepare_dataset(stopped, part=(0, 3), **options)
    _ray_workers.release_ray_actors()
    prepare_on_ray(stopped, parts=2, num_cpus=0.5, **options)
    assert _index(stopped) == _index(one)
    assert not (stopped / ".fpipe-parts").exists()


def _index(root):
    """Every file of the index by path: its bytes."""
    return {
        str(f.relative_to(root)): f.read_bytes()
        for f in sorted((root / ".fpipe").rglob("*"))
        if f.is_file()
    }


def test_ray_mode_without_ray_installed_is_a_config_error(monkeypatch, paths):
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` does when it is missing
    with pytest.raises(ConfigError, match=r'pip install "fpipe\[ray\]"'):
        loader(paths, "images", num_workers=2, worker_mode="ray")
