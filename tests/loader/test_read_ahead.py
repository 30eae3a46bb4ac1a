"""Read-ahead along the plan: the same batches and state with it on or off in every worker mode
(blends, packing, buckets, skips, a restore mid-epoch), a budget that holds, failed reads that
surface where a direct read's would, and a worker killed with reads in flight.

``file://`` paths go through the object-storage reader (obstore's asynchronous range reads);
plain paths through local files (``posix_fadvise``).
"""

from __future__ import annotations

import concurrent.futures
import os
import random
import signal
import textwrap

import pytest

pytest.importorskip("obstore")

import fpipe  # noqa: E402
from fpipe.core.errors import BadSampleError  # noqa: E402
from fpipe.decode.image import ImageDecodeOptions  # noqa: E402
from fpipe.plan import pack  # noqa: E402
from fpipe.storage.read import read_ahead as windows  # noqa: E402
from fpipe.storage.read.remote import RemoteFiles  # noqa: E402
from tests.loader.helpers import digest, prepared_images  # noqa: E402
from tests.loader.test_plan_packing import CaptionPacker  # noqa: E402

DECODE = ImageDecodeOptions(target_size=8)
BUCKETS = {ratio: {4: {1: (1.0, 4)}} for ratio in ("3:4", "1:1", "4:3")}
ON = 1 << 20


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("read_ahead")
    a = prepared_images(root / "a", shards=3, per_shard=8)
    b = prepared_images(root / "b", shards=2, per_shard=6)
    (root / "blend.yaml").write_text(
        textwrap.dedent(
            f"""\
            __module__: megatron.energon
            __class__: MetadatasetV2
            splits:
              train:
                blend:
                  - {{weight: 2, path: "file://{a}"}}
                  - {{weight: 1, path: "{b}"}}
            """
        )
    )
    return root


def _dataset(data, kind: str, url: bool = True):
    a = ("file://" if url else "") + str(data / "a")
    args: dict = dict(batch_size=4, shuffle_buffer_size=8, max_samples_per_sequence=2, seed=5)
    if kind == "blend":
        return fpipe.get_train_dataset(str(data / "blend.yaml"), image_decode=DECODE, **args)
    if kind == "pack":
        args.update(
            task_encoder=CaptionPacker(),
            columns=["caption.chars"],
            plan_stages=[pack({"caption.chars": 60}, strategy="balanced", packing_buffer_size=6)],
            batch_size=2,
        )
    if kind == "buckets":
        del args["batch_size"]
        args.update(bucket_config=BUCKETS)
    return fpipe.get_train_dataset(a, image_decode=DECODE, **args)


def _run(data, kind, *, n=7, restore_at=3, url=True, **kw):
    """Batches (digests) with a restore after ``restore_at``, the states, the reads' counters."""
    loader = fpipe.get_loader(_dataset(data, kind, url), **kw)
    loader.skip((2, 4))
    it = iter(loader)
    first = [digest(next(it)) for _ in range(restore_at)]
    state = loader.state_dict()
    it.close()
    again = fpipe.get_loader(_dataset(data, kind, url), **kw)
    again.load_state_dict(state)
    it = iter(again)
    rest = [digest(next(it)) for _ in range(n - restore_at)]
    it.close()
    io = dict(loader.stats().io)
    for k, v in again.stats().io.items():
        io[k] = max(io.get(k, 0), v) if k.endswith("_peak_bytes") else io.get(k, 0) + v
    return (first + rest, state, again.state_dict()), io


_REFERENCE: dict = {}


def _reference(data, kind, url=True):
    if (kind, url) not in _REFERENCE:
        _REFERENCE[kind, url] = _run(data, kind, url=url, num_workers=0, read_ahead_bytes=0)[0]
    return _REFERENCE[kind, url]


@pytest.mark.parametrize("kind", ["plain", "blend", "pack", "buckets"])
@pytest.mark.parametrize(
    "mode", [dict(num_workers=0), dict(num_workers=2, worker_mode="thread")], ids=["nw0", "thread"]
)
def test_read_ahead_changes_no_batch_and_no_state(data, kind, mode):
    got, io = _run(data, kind, read_ahead_bytes=ON, **mode)
    assert got == _reference(data, kind)
    assert io["read_ahead_ranges"] > 0 and io["read_ahead_ready"] > 0  # it did read ahead
    # ranges taken from read-ahead are not fetched again (a few at the start of a thread pool
    # can be: a thread may reach its recipe before the task naming it has been read ahead)
    assert io["requests"] <= 1.05 * io["read_ahead_ranges"] + 8


@pytest.mark.slow
@pytest.mark.parametrize("url", [False, True], ids=["local", "file-url"])
def test_process_workers_read_ahead_the_same_batches(data, url):
    kind = "blend" if url else "plain"
    got, io = _run(data, kind, url=url, num_workers=2, read_ahead_bytes=ON)
    assert got == _reference(data, kind, url)
    assert io["read_ahead_ranges"] > 0  # counted in the workers, summed in the loader


def test_default_budget_is_on_for_object_storage_only(data):
    local = fpipe.get_loader(_dataset(data, "plain", url=False))
    assert local.read_ahead_bytes == 0
    s3 = fpipe.get_loader(_dataset(data, "plain"), read_ahead_bytes=None)
    assert s3.read_ahead_bytes == 0  # file:// is a local file too
    assert fpipe.get_loader(_dataset(data, "plain"), read_ahead_bytes=5).read_ahead_bytes == 5
    with pytest.raises(fpipe.core.ConfigError, match="read_ahead_bytes"):
        fpipe.get_loader(_dataset(data, "plain"), read_ahead_bytes=-1)


def test_a_tiny_budget_is_never_exceeded(data):
    budget = 3000  # about two samples
    got, io = _run(data, "plain", read_ahead_bytes=budget)
    assert got == _reference(data, "plain")
    assert 0 < io["read_ahead_peak_bytes"] <= budget
    assert io["read_ahead_ranges"] > 0


class _Files:
    """A file layer whose reads ahead end when the test says."""

    def __init__(self):
        self.futures: list[concurrent.futures.Future] = []

    def read_ahead(self, ranges):
        out = [concurrent.futures.Future() for _ in ranges]
        self.futures += out
        return out


def test_window_holds_at_most_its_budget_whatever_the_order():
    rng = random.Random(0)
    files, budget = _Files(), 1000
    win = windows.Window(budget)
    wanted: list = []
    for step in range(200):
        ranges = [(f"s{rng.randrange(3)}", rng.randrange(10**6), rng.randrange(1, 400))]
        win.add(step, files, ranges)
        wanted += ranges
        assert 0 <= win.held <= budget
        for fut in files.futures:
            if not fut.done() and rng.random() < 0.3 and fut.set_running_or_notify_cancel():
                fut.set_result(b"x")
        if rng.random() < 0.5 and wanted:
            win.take(wanted.pop(rng.randrange(len(wanted))))
        if step % 17 == 0:
            win.let_go(step - 5)
        assert 0 <= win.held <= budget
    assert win.held > 0 and files.futures  # it did read ahead
    started = len(files.futures)
    win.let_go(1 << 30)
    win.add(1 << 30, files, [("big", 0, budget + 1)])  # larger than the whole budget
    assert len(files.futures) == started and win.held >= 0


def test_a_failed_read_ahead_is_read_again(data, monkeypatch):
    def failing(self, ranges):
        out = []
        for path, _, _ in ranges:
            fut: concurrent.futures.Future = concurrent.futures.Future()
            fut.read_ahead, fut.slow, fut.started = True, False, 0.0  # type: ignore[attr-defined]
            fut.set_result(OSError(f"{path}: connection reset"))
            out.append(fut)
        return out

    monkeypatch.setattr(RemoteFiles, "read_ahead", failing)
    got, io = _run(data, "plain", read_ahead_bytes=ON)
    assert got == _reference(data, "plain")
    assert io["read_ahead_failed"] > 0


def _until_error(loader, n=40):
    out = []
    it = iter(loader)
    try:
        for _ in range(n):
            out.append(digest(next(it)))
    except BadSampleError as e:
        return out, (type(e), str(e), loader.stats().batches)
    finally:
        it.close()
    return out, None


def test_a_read_that_fails_raises_at_its_step_as_without_read_ahead(tmp_path):
    copy = prepared_images(tmp_path / "c", shards=6, per_shard=4)
    os.remove(os.path.join(copy, "shard-0005.tar"))  # after prepare: its samples' reads fail
    results = []
    for budget in (0, ON):
        ds = fpipe.get_train_dataset(
            f"file://{copy}", batch_size=2, seed=5, image_decode=DECODE,
            shuffle_buffer_size=2, max_samples_per_sequence=4,
            open_kwargs={"shard_check": "off"},
        )  # fmt: skip
        results.append(_until_error(fpipe.get_loader(ds, read_ahead_bytes=budget)))
    (off, err_off), (on, err_on) = results
    assert err_off is not None and off  # some batches first, then the error
    assert (on, err_on) == (off, err_off)


def _worker_pids() -> list[int]:
    """The DataLoader workers: this process's fork server's children."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    kids.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(
                        int(entry)
                    )
            except OSError:
                continue
    return sorted(p for child in kids.get(os.getpid(), []) for p in kids.get(child, []))


@pytest.mark.slow
def test_a_worker_killed_with_reads_in_flight_loses_nothing(data):
    expected = _reference(data, "plain")[0]
    loader = fpipe.get_loader(
        _dataset(data, "plain"), num_workers=2, read_ahead_bytes=ON, timeout=20
    )
    loader.skip((2, 4))
    it = iter(loader)
    got = [digest(next(it)) for _ in range(2)]
    pids = _worker_pids()
    assert pids
    os.kill(pids[0], signal.SIGKILL)  # its reads ahead (all its horizon) die with it
    got += [digest(next(it)) for _ in range(5)]
    it.close()
    assert got == expected
    assert loader.stats().recoveries >= 1


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_each_recipe_is_named_once_to_the_worker_that_makes_it(workers):
    from fpipe.loader._read_ahead import Horizon

    horizon = Horizon(12, 100, workers)
    named: dict[int, int] = {}
    for k in range(60):
        upcoming = [b"%d" % (k + i) for i in range(horizon.reach + 1)]
        got = [int(r) for r in horizon.hint(k, upcoming).recipes]
        if k < workers:
            assert got[0] == k  # a worker's first task: its own recipe's ranges at once
        for r in got:
            assert r not in named and r % workers == k % workers  # once, to its own worker
            assert k <= r <= k + horizon.reach
            named[r] = k
    assert set(range(60)) <= set(named)  # every recipe before it is needed
    assert max(r - named[r] for r in named) == horizon.reach  # the horizon opened fully
