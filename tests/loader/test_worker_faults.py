"""Faults in DataLoader workers with recovery off (``recover_workers=False``): one typed fpipe
error, within the configured time, naming the sample or worker; then an exact resume from the
last state_dict. (Recovery: tests/loader/test_worker_recovery.py.)

Each test runs a 2-worker loader whose task encoder faults on one sample (only in a worker,
only while a trigger file exists), catches the one error, checks that nothing else is raised
afterwards (torch's SIGCHLD handler used to raise a second error inside the except block), then
removes the trigger and resumes from the last state_dict in a fresh loader with 2 workers.
"""

import functools
import os
import pickle
import signal
import sys
import threading
import time

import pytest
import torch.utils.data

import fpipe
from fpipe.core import BadSampleError, FpipeError, MaterializeError, WorkerError
from tests.loader.encoders import FaultEncoder
from tests.loader.helpers import build, digest

N = 10  # batches compared
FAULT_BATCH = 3  # the faulting sample is in this batch of the reference stream


@pytest.fixture(scope="module")
def reference(image_dataset):
    """The batches (digests) of the run without workers, and the key that faults."""
    it = iter(build(image_dataset))
    batches = [next(it) for _ in range(N)]
    return [digest(b) for b in batches], batches[FAULT_BATCH]["keys"][1]


def _run_until_fault(path, mode, trigger, key, *, timeout, expected, worker_mode):
    enc = FaultEncoder(mode, trigger, key)
    loader = build(
        path, num_workers=2, encoder=enc, timeout=timeout, worker_mode=worker_mode,
        recover_workers=False,
    )  # fmt: skip
    got, sd = [], loader.state_dict()
    t0 = time.monotonic()
    with pytest.raises(expected) as info:
        for b in loader:
            got.append(digest(b))
            sd = loader.state_dict()
            t0 = time.monotonic()
    elapsed = time.monotonic() - t0
    if worker_mode == "process":
        time.sleep(0.5)  # a second error (SIGCHLD) would be raised here
    return got, sd, info.value, elapsed


def _resume(path, sd, n, worker_mode):
    fresh = build(path, num_workers=2, worker_mode=worker_mode)
    fresh.load_state_dict(sd)
    it = iter(fresh)
    return [digest(next(it)) for _ in range(n)]


@pytest.mark.parametrize(
    ("mode", "worker_mode"),
    [("raise", "process"), ("kill", "process"), ("hang", "process"), ("raise", "thread"),
     ("hang", "thread")],
)  # fmt: skip
def test_worker_fault_is_one_fpipe_error_then_exact_resume(
    image_dataset, reference, tmp_path, mode, worker_mode
):
    """Thread workers cannot be killed from outside: "kill" is a process-mode fault only."""
    ref, key = reference
    trigger = tmp_path / "trigger"
    trigger.write_text("on")
    expected = MaterializeError if mode == "raise" else WorkerError
    timeout = 1.5 if worker_mode == "process" else 0.5  # (threads start at once)
    got, sd, err, elapsed = _run_until_fault(
        image_dataset, mode, trigger, key, timeout=timeout, expected=expected,
        worker_mode=worker_mode,
    )  # fmt: skip
    assert got == ref[: len(got)] and len(got) <= FAULT_BATCH
    assert elapsed < 10, f"the fault took {elapsed:.1f} s to surface"
    if mode == "raise":
        assert err.keys == (key,) and err.hook == "encode_sample" and err.original == "ValueError"
        assert err.step == FAULT_BATCH and key in str(err)
        assert "hook failed on purpose" in err.traceback and "encode_sample" in err.traceback
        assert "hook failed on purpose" in str(err.__cause__)  # the worker's traceback
    else:
        assert err.worker in (0, 1) and err.pid is not None
        assert err.reason == ("died" if mode == "kill" else "timed out")
        who = "worker" if worker_mode == "process" else "materialize thread"
        assert f"{who} {err.worker}" in str(err)
        assert "SIGKILL" in str(err) if mode == "kill" else "timeout" in str(err)
        if mode == "hang":
            assert err.step == FAULT_BATCH and key in err.keys
    trigger.unlink()
    rest = _resume(image_dataset, sd, N - len(got), worker_mode)
    assert got + rest == ref


def test_fpipe_errors_survive_torch_reraise_and_pickle():
    """torch re-raises a worker exception as ``type(err)(message)``; pickling keeps fields."""
    err = BadSampleError("shard.tar", "s/1", "broken")
    again = type(err)(f"Caught BadSampleError in DataLoader worker process 0.\n{err}")
    assert isinstance(again, BadSampleError) and "broken" in str(again)
    for e in (
        err,
        MaterializeError("m", hook="batch", keys=("a", "b"), step=4),
        WorkerError("w", worker=1, pid=7, reason="died", step=2, keys=("k",)),
    ):
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and back.__dict__ == e.__dict__ and str(back) == str(e)
        assert isinstance(type(e)(str(e)), FpipeError)


def test_bad_sample_keeps_its_type_and_fields_across_workers(tmp_path):
    """A BadSampleError raised in a worker arrives as a BadSampleError with path and key."""
    from fpipe.decode.image import ImageDecodeOptions
    from tests.storage.helpers import jpeg_bytes, write_tar

    good = jpeg_bytes(16, 16)
    broken = good[:200] + b"\x00" * 50  # header intact (prepare accepts it), body corrupt
    samples = [(f"{i:04d}", {"jpg": broken if i == 3 else good, "txt": b"c"}) for i in range(8)]
    write_tar(tmp_path / "s.tar", samples)
    fpipe.prepare_dataset(
        tmp_path, fields={"image": "jpg", "caption": "txt"}, sample_type="CaptioningSample"
    )
    ds = fpipe.get_val_dataset(
        tmp_path, batch_size=4, split="train", image_decode=ImageDecodeOptions(target_size=8)
    )
    with pytest.raises(BadSampleError) as info:
        list(fpipe.get_loader(ds, num_workers=2))
    assert info.value.key == "s/0003" and info.value.path.startswith(str(tmp_path))
    assert "cannot decode" in info.value.reason


class _Unreceivable:
    """A stand-in for torch's iterator over live workers whose next batch cannot be received:
    ``next()`` fails inside library code (``os.read`` of a closed descriptor, as a broken
    queue or shared-memory handle fails), with no worker dead and none late."""

    num_workers = 2
    dataset = None

    def __iter__(self):
        return iter(functools.partial(os.read, -1, 1), None)


def test_a_batch_that_cannot_be_received_is_a_failure_not_a_timeout():
    from fpipe.loader._workers import iterate

    results = iterate(
        _Unreceivable(), timeout=300, recipe_at=lambda ahead: None, describe=lambda r: (None, ())
    )
    with pytest.raises(WorkerError) as info:
        next(results)
    assert info.value.reason == "failed"  # it was called "timed out", with no time out
    assert "failed while materializing" in str(info.value) and "OSError" in str(info.value)


class _DiesHoldingTheDoneEvent(torch.utils.data.Dataset):
    """Item 2 kills its worker while the worker holds the lock of torch's shared done-event
    (workers take it in ``done_event.is_set()`` between tasks: a worker killed there leaves it
    held for good)."""

    def __len__(self):
        return 64

    def __getitem__(self, index):
        if index == 2:
            frame = sys._getframe()
            while frame is not None and frame.f_code.co_name != "_worker_loop":
                frame = frame.f_back
            frame.f_locals["done_event"]._cond.acquire()
            os.kill(os.getpid(), signal.SIGKILL)
        return index


def test_a_worker_killed_holding_the_done_event_lock_does_not_hang_the_shutdown():
    # torch's own shutdown sets the done-event, which waits for that lock forever; torch relies
    # on its SIGCHLD handler to raise out of the wait, and the loader takes its workers off it
    from fpipe.loader._workers import POLL_S, iterate

    loader = torch.utils.data.DataLoader(
        _DiesHoldingTheDoneEvent(),
        batch_size=None,
        num_workers=2,
        timeout=POLL_S,
        multiprocessing_context="fork",
    )
    outcome: list = []

    def consume():
        try:
            outcome.extend(
                iterate(
                    loader, timeout=60, recipe_at=lambda ahead: None, describe=lambda r: (None, ())
                )
            )
        except WorkerError as err:
            outcome.append(err)

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    thread.join(timeout=20)
    assert not thread.is_alive(), "the shutdown after a worker died hung"
    assert isinstance(outcome[-1], WorkerError) and outcome[-1].reason == "died"
    assert "killed by signal SIGKILL" in str(outcome[-1])
