"""Read-ahead along the plan: the same batches and state with it on or off in every worker mode
(blends, packing, buckets, skips, a restore mid-epoch), a budget that holds, failed reads that
surface where a direct read's would, and a worker killed with reads in flight.

``file://`` paths go through the object-storage reader (obstore's asynchronous range reads);
plain paths through local files (``posix_fadvise``).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

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

ROOT = str(Path(__file__).resolve().parents[2])
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
@pytest.mark.parametrize("kind", ["pack", "buckets"])
def test_process_workers_read_ahead_the_same_batches(data, kind):
    """Local paths (forked workers, posix_fadvise); obstore's reads in worker processes are
    checked in a process of their own (below)."""
    got, io = _run(data, kind, url=False, num_workers=2, read_ahead_bytes=ON)
    assert got == _reference(data, kind, url=False)
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


def test_a_window_in_use_is_kept_when_a_fifth_pool_starts():
    # one process, five loader pools (a training loader and four validation loaders at
    # num_workers=0, say): the one let go is the least recently used, not the oldest
    tokens = [("lru", i) for i in range(windows.MAX_WINDOWS + 1)]
    try:
        first = windows.window(tokens[0], 100)
        for t in tokens[1 : windows.MAX_WINDOWS]:
            windows.window(t, 100)
        assert windows.window(tokens[0], 100) is first  # the first pool takes a batch
        windows.window(tokens[-1], 100)  # a fifth pool starts
        assert windows.window(tokens[0], 100) is first  # its read-ahead is still there
    finally:
        for t in tokens:
            windows.close(t)


def test_a_failed_read_ahead_is_read_again(data, monkeypatch):
    def failing(self, ranges):
        out = []
        for path, _, _ in ranges:
            fut: concurrent.futures.Future = concurrent.futures.Future()
            fut.ahead, fut.slow, fut.started = True, False, 0.0  # type: ignore[attr-defined]
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
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            kids.setdefault(parent, []).append(int(entry))
    return sorted(p for child in kids.get(os.getpid(), []) for p in kids.get(child, []))


def _plain(got) -> list:
    """``_run``'s batches and states as JSON values."""
    batches, *states = got
    return [batches] + [s["fpipe_snapshot"].hex() for s in states]


def _in_own_process(root: str) -> dict:
    """Worker processes reading a ``file://`` blend through obstore (a fork server, started
    in this process: one started in the test session would keep that moment's environment
    for later tests' workers), and a worker SIGKILLed with its reads ahead in flight. The
    batches and states, for the test to compare with its own run without workers."""
    data = Path(root)
    got, io = _run(data, "blend", num_workers=2, read_ahead_bytes=ON)
    out = {"blend": _plain(got), "ranges": io.get("read_ahead_ranges", 0)}
    loader = fpipe.get_loader(
        _dataset(data, "plain"), num_workers=2, read_ahead_bytes=ON, timeout=20
    )
    loader.skip((2, 4))
    it = iter(loader)
    batches = [digest(next(it)) for _ in range(2)]
    pids = _worker_pids()
    os.kill(pids[0], signal.SIGKILL)  # its reads ahead (its whole horizon) die with it
    batches += [digest(next(it)) for _ in range(5)]
    it.close()
    out["killed"], out["workers"] = batches, len(pids)
    out["recoveries"] = loader.stats().recoveries
    return out


# run with -c: run with -m, each worker would import this module again (its main, pytest and all)
_OWN_PROCESS = """\
import json, sys
from tests.loader.test_read_ahead import _in_own_process
print(json.dumps(_in_own_process(sys.argv[1])))
"""


@pytest.mark.slow
def test_obstore_reads_in_worker_processes_and_a_killed_worker_lose_nothing(data):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run(
        [sys.executable, "-c", _OWN_PROCESS, str(data)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["blend"] == _plain(_reference(data, "blend")) and got["ranges"] > 0
    assert got["killed"] == _reference(data, "plain")[0][:7] and got["workers"] == 2
    assert got["recoveries"] >= 1


if __name__ == "__main__":
    print(json.dumps(_in_own_process(sys.argv[1])))
