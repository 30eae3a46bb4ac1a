"""An exception raised in the training process while it waits for a batch (a signal handler, a
watchdog, ``_thread.interrupt_main`` with a handler) is the user's, not a worker fault: it reaches
the ``for`` loop at once, unchanged, with worker recovery on and off, in process and thread mode,
and the loader goes on from the last batch taken when iterated again."""

import signal
import threading
import time

import pytest

from tests.loader.encoders import FaultEncoder
from tests.loader.helpers import build, digest

ALARM_S = 0.2  # the watchdog fires this long after the loop starts waiting for batch 2


class Watchdog(Exception):
    pass


@pytest.fixture(scope="module")
def reference(image_dataset):
    it = iter(build(image_dataset))
    return [next(it) for _ in range(4)]


def _wait_interrupted(path, ref, tmp_path, *, worker_mode, recover, exc_type):
    """Take batches 0 and 1; while batch 2 hangs in a worker, a SIGALRM handler raises
    ``exc_type``, which must reach the caller unchanged within a second of the alarm, with no
    recovery. Returns the loader."""
    key = ref[2]["keys"][0]
    trigger = tmp_path / "trigger"
    trigger.write_text("on")
    loader = build(
        path, num_workers=2, encoder=FaultEncoder("hang", trigger, key), timeout=60,
        worker_mode=worker_mode, recover_workers=recover,
    )  # fmt: skip
    it = iter(loader)
    assert [digest(next(it)) for _ in range(2)] == [digest(b) for b in ref[:2]]
    # Bounds a run that swallows the exception: the hang ends, and the loop gets batches.
    release = threading.Timer(4.0, lambda: trigger.unlink(missing_ok=True))
    release.start()

    def watchdog(signum, frame):
        raise exc_type("the user's watchdog fired")

    previous = signal.signal(signal.SIGALRM, watchdog)
    signal.setitimer(signal.ITIMER_REAL, ALARM_S)
    start = time.monotonic()
    try:
        with pytest.raises(BaseException) as raised:  # noqa: B017 - its type is checked below
            next(it)
        elapsed = time.monotonic() - start - ALARM_S
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        trigger.unlink(missing_ok=True)
        release.cancel()
    # the user's exception, unchanged and at once; no worker fault recovered
    assert type(raised.value) is exc_type and str(raised.value) == "the user's watchdog fired"
    assert elapsed < 1.0
    assert loader.stats().recoveries == 0
    return loader


@pytest.mark.slow
@pytest.mark.parametrize("worker_mode", ["process", "thread"])
@pytest.mark.parametrize("recover", [True, False])
def test_a_signal_handlers_exception_reaches_the_loop_at_once(
    image_dataset, reference, tmp_path, worker_mode, recover
):
    loader = _wait_interrupted(
        image_dataset, reference, tmp_path, worker_mode=worker_mode, recover=recover,
        exc_type=Watchdog,
    )  # fmt: skip
    # The loader is usable: iterating again continues after the last batch taken.
    state = loader.state_dict()
    it = iter(loader)
    try:
        assert [digest(next(it)) for _ in range(2)] == [digest(b) for b in reference[2:4]]
    finally:
        it.close()  # now, not whenever the garbage collector gets to it
    assert loader.state_dict() != state


@pytest.mark.slow
@pytest.mark.parametrize(
    ("worker_mode", "exc_type"),
    # the types the worker machinery raises for real faults, raised by the user instead
    [("process", RuntimeError), ("process", ConnectionResetError), ("process", EOFError),
     ("thread", TimeoutError)],
)  # fmt: skip
def test_a_users_exception_of_a_fault_type_is_still_the_users(
    image_dataset, reference, tmp_path, worker_mode, exc_type
):
    _wait_interrupted(
        image_dataset, reference, tmp_path, worker_mode=worker_mode, recover=True,
        exc_type=exc_type,
    )  # fmt: skip
