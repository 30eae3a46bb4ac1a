"""Self-healing workers (``recover_workers=True``, the default): a worker killed by SIGKILL, one
out of memory and one hung are replaced, the recipes in flight are materialized again, and the
consumer gets exactly the batches (and snapshots) of an uninterrupted run. A sample that kills
its worker twice follows the error policy; a recipe that kills it twice outside any sample
raises. (Recovery off: tests/loader/test_worker_faults.py.)"""

import logging

import pytest
import torch

from fpipe.core import BadSampleError, WorkerError
from tests.loader.encoders import FaultEncoder
from tests.loader.helpers import build, digest

N = 8  # batches compared
FAULT_BATCH = 3  # the faulting sample is in this batch of the reference stream


@pytest.fixture(scope="module")
def reference(image_dataset):
    loader = build(image_dataset)
    it = iter(loader)
    batches, states = [], []
    for _ in range(N):
        batches.append(next(it))
        states.append(loader.state_dict())
    return batches, states


def _run(path, mode, trigger, key, *, worker_mode="process", timeout=1.5, **kw):
    loader = build(
        path, num_workers=2, encoder=FaultEncoder(mode, trigger, key), timeout=timeout,
        worker_mode=worker_mode, **kw,
    )  # fmt: skip
    it = iter(loader)
    got, states = [], []
    for _ in range(N):
        got.append(next(it))
        states.append(loader.state_dict())
    return loader, got, states


@pytest.mark.parametrize(
    ("mode", "worker_mode", "reason"),
    [("kill-once", "process", "died"), ("oom-once", "process", "out of memory"),
     ("hang-once", "process", "timed out"), ("hang-once", "thread", "timed out"),
     ("memory-once", "thread", "out of memory")],
)  # fmt: skip
def test_a_failed_worker_is_replaced_and_the_output_is_unchanged(
    image_dataset, reference, tmp_path, caplog, mode, worker_mode, reason
):
    ref, ref_states = reference
    key = ref[FAULT_BATCH]["keys"][1]
    trigger = tmp_path / "trigger"
    trigger.write_text("on")
    timeout = 2.0 if worker_mode == "process" else 1.5
    with caplog.at_level(logging.WARNING, logger="fpipe.loader"):
        loader, got, states = _run(
            image_dataset, mode, trigger, key, worker_mode=worker_mode, timeout=timeout
        )
    trigger.unlink()  # ends an abandoned thread's hang
    assert (tmp_path / "trigger.fired").exists()  # the fault did happen
    assert [digest(b) for b in got] == [digest(b) for b in ref]
    assert states == ref_states  # the state never saw the fault
    stats = loader.stats()
    assert stats.recoveries == 1 and stats.recovered == {reason: 1} and stats.skipped == 0
    logged = caplog.text
    assert f"at step {FAULT_BATCH}" in logged and repr(key) in logged and reason in logged
    # the fault's own message: the signal, the time out, the allocation that failed
    told = {"died": "SIGKILL", "timed out": "(timeout)", "out of memory": "MemoryError"}[reason]
    assert "The fault: " in logged and told in logged.split("The fault: ", 1)[1]


@pytest.mark.parametrize(("mode", "worker_mode"), [("kill", "process"), ("hang", "thread")])
def test_a_sample_that_kills_its_worker_twice_is_skipped_under_policy_skip(
    image_dataset, reference, tmp_path, mode, worker_mode
):
    ref, _ = reference
    key = ref[FAULT_BATCH]["keys"][1]
    trigger = tmp_path / "trigger"
    trigger.write_text("on")
    timeout = 2.0 if worker_mode == "process" else 1.5
    loader, got, _ = _run(
        image_dataset, mode, trigger, key, worker_mode=worker_mode, timeout=timeout,
        error_policy="skip",
    )  # fmt: skip
    trigger.unlink()
    for i, (g, r) in enumerate(zip(got, ref)):
        if i != FAULT_BATCH:
            assert digest(g) == digest(r)
    g, r = got[FAULT_BATCH], ref[FAULT_BATCH]
    keep = [i for i, k in enumerate(r["keys"]) if k != key]
    assert list(g["keys"]) == [r["keys"][i] for i in keep]  # the others, as they were
    assert torch.equal(g["image"], r["image"][keep]) and torch.equal(g["noise"], r["noise"][keep])
    stats = loader.stats()
    assert stats.skipped == 1 and stats.recoveries == 2
    assert stats.samples == sum(len(b["keys"]) for b in ref) - 1


@pytest.mark.parametrize(("mode", "reason"), [("kill", "died"), ("oom", "out of memory")])
def test_a_sample_that_kills_its_worker_twice_is_raised_under_policy_raise(
    image_dataset, reference, tmp_path, mode, reason
):
    ref, ref_states = reference
    key = ref[FAULT_BATCH]["keys"][1]
    trigger = tmp_path / "trigger"
    trigger.write_text("on")
    loader = build(image_dataset, num_workers=2, encoder=FaultEncoder(mode, trigger, key))
    got = []
    with pytest.raises(BadSampleError) as info:
        for b in loader:
            got.append(digest(b))
    assert info.value.key == key and info.value.path == image_dataset
    assert f"killed its DataLoader worker 2 times ({reason})" in str(info.value)
    cause = str(info.value.__cause__)  # the second fault
    assert "SIGKILL" in cause if mode == "kill" else "MemoryError" in cause
    assert got == [digest(b) for b in ref[:FAULT_BATCH]]
    assert loader.state_dict() == ref_states[FAULT_BATCH - 1]  # resume exactly from here
    # the sample's two faults, each a restart (the batches before it came from a third pool);
    # a busy machine has once added a recovery of its own at an earlier step, counted apart
    stats = loader.stats()
    assert stats.recovered[reason] == 2 and stats.recoveries == sum(stats.recovered.values())


def test_a_recipe_that_kills_its_worker_twice_outside_a_sample_raises(
    image_dataset, reference, tmp_path
):
    """A worker killed in the batch hook names no sample: one retry, then its WorkerError."""
    ref, _ = reference
    key = ref[FAULT_BATCH]["keys"][1]
    trigger = tmp_path / "trigger"
    trigger.write_text("on")
    loader = build(
        image_dataset, num_workers=2, encoder=FaultEncoder("kill-batch", trigger, key),
        error_policy="skip",
    )  # fmt: skip
    with pytest.raises(WorkerError) as info:
        list(loader)
    err = info.value
    assert err.step == FAULT_BATCH and err.position is None and key in err.keys
    assert "failed 2 times" in str(err) and loader.stats().recoveries == 1
