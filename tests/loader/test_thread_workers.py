"""Thread workers (``worker_mode="thread"``): the same batches and snapshots as worker processes
and as ``num_workers=0``, and a resume across the three."""

import threading

import pytest

import fpipe
from fpipe.core import ConfigError
from tests.loader.helpers import build, digest, take

N = 8


def _batches_and_states(loader, n=None):
    out = []
    for b in loader:
        out.append((digest(b), loader.snapshot()))
        if len(out) == n:
            break
    return out


def test_thread_mode_gives_the_batches_and_snapshots_of_nw0(image_dataset):
    nw0 = build(image_dataset, num_epochs=1)
    ref = _batches_and_states(nw0)
    threads = build(image_dataset, num_epochs=1, num_workers=2, worker_mode="thread")
    assert _batches_and_states(threads) == ref  # a whole epoch, the end of the stream included
    assert threads.snapshot() == nw0.snapshot() and threads.stats() == nw0.stats()


def test_resume_across_thread_process_and_nw0(image_dataset):
    ref = take(build(image_dataset), N)
    threads = build(image_dataset, num_workers=2, worker_mode="thread", prefetch_factor=3)
    it = iter(threads)
    got = [digest(next(it)) for _ in range(3)]
    sd = threads.state_dict()
    procs = build(image_dataset, num_workers=2)  # a thread-mode snapshot, resumed by processes
    procs.load_state_dict(sd)
    it = iter(procs)
    got += [digest(next(it)) for _ in range(2)]
    nw0 = build(image_dataset)  # a process-mode snapshot, resumed by nw=0 ...
    nw0.load_state_dict(procs.state_dict())
    got += take(nw0, 1)
    again = build(image_dataset, num_workers=1, worker_mode="thread")  # ... and by a thread
    again.load_state_dict(nw0.state_dict())
    got += take(again, N - len(got))
    assert got == ref


def test_unknown_worker_mode_is_a_config_error(image_dataset):
    ds = build(image_dataset).dataset
    with pytest.raises(ConfigError, match="worker_mode"):
        fpipe.get_loader(ds, num_workers=2, worker_mode="greenlet")


def test_closing_a_loop_waits_for_its_threads(image_dataset):
    """A closed loop leaves no materialize thread running: a daemon thread still inside torch
    or Pillow when the program ends is cut off mid-call, and the process aborted ("terminate
    called without an active exception") on some exits after a loop left open."""
    loader = build(image_dataset, num_workers=2, worker_mode="thread", prefetch_factor=4)
    for _ in range(3):
        loop = iter(loader)
        next(loop)  # the threads are busy with the recipes prefetched behind this one
        loop.close()
        alive = [t.name for t in threading.enumerate() if t.name.startswith("fpipe-materialize")]
        assert alive == []


def test_the_first_batch_waits_on_one_threads_dataset_opens(image_dataset, monkeypatch):
    """Each thread opens its datasets at its first recipe (Python work, under the GIL): the
    first recipe runs alone on one thread, the others start once the consumer has its batch."""
    from fpipe.loader import threads as threads_mod
    from fpipe.materialize import materializer as materializer_mod

    events: list[str] = []
    real_open, real_run = materializer_mod.open_source, threads_mod.run_task
    another = threading.Event()  # a thread other than the first opened a dataset

    def slow_open(src):
        events.append(threading.current_thread().name)
        if len({e for e in events if e != "done"}) > 1:
            another.set()
        threading.Event().wait(0.05)  # an open that takes a while
        return real_open(src)

    def run(*args):
        result = real_run(*args)
        events.append("done")
        return result

    monkeypatch.setattr(materializer_mod, "open_source", slow_open)
    monkeypatch.setattr(threads_mod, "run_task", run)
    loader = build(image_dataset, num_workers=4, worker_mode="thread")
    loop = iter(loader)
    for _ in range(2):  # the others start when the consumer asks for the second batch
        next(loop)
    # on a busy machine the first thread may make the next batches before the others open
    # anything: wait for one of them rather than count on it within a few batches
    assert another.wait(10), events
    loop.close()
    before_first = set(events[: events.index("done")])
    assert len(before_first) == 1, events
