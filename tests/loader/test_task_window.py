"""Worker processes take the next task as they free up, and the results come back in plan
order (fpipe.loader._task_window): a slow worker no longer holds the others to its pace, the
batches and their order are those without workers, and the results held for reordering stay
within the window even while a worker hangs."""

import pytest

from fpipe.loader._task_window import TaskWindow, takes_tasks_as_free
from tests.loader.encoders import SlowFirstWorkerEncoder
from tests.loader.helpers import build, digest

pytestmark = pytest.mark.skipif(
    not takes_tasks_as_free(), reason="torch's DataLoader has no in_order (torch < 2.6)"
)


def _without_worker(batch):
    return digest({k: v for k, v in batch.items() if k not in ("worker", "built_at")})


def test_a_slow_worker_does_not_hold_the_other_to_its_pace(image_dataset):
    n = 40
    reference = build(image_dataset, encoder=SlowFirstWorkerEncoder(0.0))
    expected = [_without_worker(b) for b, _ in zip(reference, range(n))]
    loader = build(image_dataset, num_workers=2, encoder=SlowFirstWorkerEncoder(0.1))
    batches = [b for b, _ in zip(loader, range(n))]
    assert [_without_worker(b) for b in batches] == expected  # the stream without workers
    by_fast = sum(b["worker"] == 1 for b in batches)
    # in turns (task k to worker k mod 2) each worker builds 20 of the 40; here the slow one
    # still has its 2 tasks (prefetch_factor) queued, and the fast one builds the other 3 of
    # each window of 5 tasks (fpipe.loader._task_window.window_size) while it waits: 24
    assert by_fast >= 22, [b["worker"] for b in batches]


def test_a_hung_worker_lets_the_other_run_only_a_window_ahead(image_dataset):
    loader = build(
        image_dataset, num_workers=2, prefetch_factor=2,
        encoder=SlowFirstWorkerEncoder(0.0, first_s=1.0),
    )  # fmt: skip
    batches = [b for b, _ in zip(loader, range(13))]
    first = batches[0]  # worker 0's first, after its 1 s
    assert first["worker"] == 0
    during_hang = [b["worker"] for b in batches[1:] if b["built_at"] < first["built_at"]]
    # the window: 2 workers x prefetch 2 + 1 = 5 tasks from the first undelivered; worker 0
    # holds two of them (the hung one and one queued), so worker 1 built the other three:
    # more than its two in turns, and not the dozens it could build in 1 s
    assert during_hang == [1, 1, 1], [(b["worker"], b["built_at"]) for b in batches]


def test_the_window_hands_out_in_order_and_stops_at_its_limit():
    window = TaskWindow(range(10), limit=3)
    tasks = iter(window)
    assert [next(tasks) for _ in range(3)] == [(0, 0), (1, 1), (2, 2)]
    assert next(tasks, None) is None  # full: nothing now
    window.delivered = 2
    assert [next(tasks, None) for _ in range(3)] == [(3, 3), (4, 4), None]
    window.delivered = 10
    assert [t for t in tasks] == [(k, k) for k in range(5, 10)]
    assert next(tasks, None) is None  # the end of the plan
