"""Energon's watchdog (``watchdog_timeout_seconds``, ``WatchdogDataset._watchdog_trigger``,
``fail_on_timeout``) over a loader with ``num_workers=0``, written as Energon's
``test_metadataset_v2.py::test_watchdog_dataset`` writes it, with a fraction of a second."""

from __future__ import annotations

import sys
import threading
import time
from unittest.mock import patch

import pytest

from fpipe.core.errors import WorkerError
from fpipe.energon import (
    DefaultTaskEncoder,
    WatchdogDataset,
    WorkerConfig,
    get_loader,
    get_train_dataset,
)
from tests.distributed.helpers import make_text_dataset

WC = WorkerConfig(rank=0, world_size=1, num_workers=0, seed_offset=42)
STUCK_S = 0.6  # how long encode_sample is stuck on one sample, once
TIMEOUT_S = 0.2


class StuckOnce(DefaultTaskEncoder):
    """Energon's test encoder: stuck once in encode_sample on one sample."""

    def __init__(self, key: str = "00007", stuck_s: float = STUCK_S):
        super().__init__()
        self.key, self.stuck_s, self.did_sleep = key, stuck_s, False

    def encode_sample(self, sample):
        if sample.__key__.endswith(self.key) and not self.did_sleep:
            time.sleep(self.stuck_s)
            self.did_sleep = True
        return sample


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    return str(make_text_dataset(tmp_path_factory.mktemp("text"), shards=2, per_shard=10))


def _dataset(text, encoder=None):
    return get_train_dataset(
        text, worker_config=WC, batch_size=2, shuffle_buffer_size=None,
        max_samples_per_sequence=None, task_encoder=encoder or StuckOnce(),
    )  # fmt: skip


def _keys(loader, n=12):
    out = []
    for batch in loader:
        out.append(list(batch.__key__))
        if len(out) == n:
            break
    return out


def test_a_stuck_encode_sample_calls_the_trigger_and_prints_its_stack(text, capsys):
    expected = _keys(get_loader(_dataset(text, DefaultTaskEncoder())))
    with patch.object(WatchdogDataset, "_watchdog_trigger") as trigger:
        loader = get_loader(
            _dataset(text), watchdog_timeout_seconds=TIMEOUT_S, fail_on_timeout=False
        )
        assert _keys(loader) == expected  # the watchdog changes no batch
    trigger.assert_called_once()
    err = capsys.readouterr().err
    assert "fpipe watchdog: step" in err and "more than 0.2 s" in err
    assert "in encode_sample" in err and "time.sleep(self.stuck_s)" in err  # where it is stuck


def test_the_trigger_warns_as_energons(text):
    loader = get_loader(_dataset(text), watchdog_timeout_seconds=TIMEOUT_S)
    with pytest.warns(RuntimeWarning, match="Watchdog triggered. Sample processing took longer"):
        _keys(loader)


def test_time_between_batches_and_fast_batches_do_not_count(text):
    with patch.object(WatchdogDataset, "_watchdog_trigger") as trigger:
        loader = get_loader(
            _dataset(text, DefaultTaskEncoder()), watchdog_timeout_seconds=TIMEOUT_S
        )
        for i, _ in enumerate(loader):
            if i == 1:
                time.sleep(STUCK_S)  # the consumer is slow: not the loader's time
            if i == 4:
                break
    trigger.assert_not_called()
    assert not [t for t in threading.enumerate() if t.name == "fpipe-watchdog"]  # stopped


def test_fail_on_timeout_stops_the_stuck_batch_and_resumes_exactly(text):
    expected = _keys(get_loader(_dataset(text, DefaultTaskEncoder())))
    # stuck for 3 s in Python code (a sleep is stopped when it returns): stopped at once
    loader = get_loader(_dataset(text, BusyOnce(stuck_s=3)), watchdog_timeout_seconds=TIMEOUT_S,
                        fail_on_timeout=True)  # fmt: skip
    got = []
    start = time.monotonic()
    with pytest.raises(WorkerError, match="took more than 0.2 s to build") as raised:
        for batch in loader:
            got.append(list(batch.__key__))
            if len(got) == len(expected):
                break
    assert time.monotonic() - start < 2
    assert raised.value.reason == "timed out" and raised.value.step == len(got)
    assert isinstance(raised.value.__cause__, TimeoutError)
    got += _keys(loader, len(expected) - len(got))  # the stuck sample goes through now
    assert got == expected


def test_energons_wrapper_and_initial_timeout(text):
    with patch.object(WatchdogDataset, "_watchdog_trigger") as trigger:
        wrapped = WatchdogDataset(_dataset(text, StuckOnce("00000")), WC, timeout_seconds=TIMEOUT_S,
                                  initial_timeout_seconds=5)  # fmt: skip
        assert len(wrapped) == len(wrapped.dataset)
        loader = get_loader(wrapped)
        assert loader.watchdog.dataset is wrapped.dataset and loader.watchdog.timeout_seconds == 0.2
        _keys(loader, 3)  # the first batch is stuck, within its own limit
    trigger.assert_not_called()


def test_worker_processes_watch_their_batches(text, capfd):
    expected = _keys(get_loader(_dataset(text, DefaultTaskEncoder())), 6)

    def trigger(self):  # called in the worker: it says so on the worker's stderr
        sys.stderr.write(f"trigger called after {self.timeout_seconds} s\n")

    with patch.object(WatchdogDataset, "_watchdog_trigger", trigger):
        loader = get_loader(_dataset(text), num_workers=1, watchdog_timeout_seconds=TIMEOUT_S)
        assert _keys(loader, 6) == expected
    err = capfd.readouterr().err
    assert "has taken more than 0.2 s to build in a DataLoader worker process" in err
    assert "in encode_sample" in err and "trigger called after 0.2 s" in err


class BusyOnce(StuckOnce):
    def encode_sample(self, sample):
        if sample.__key__.endswith(self.key) and not self.did_sleep:
            self.did_sleep = True
            end = time.monotonic() + self.stuck_s
            while time.monotonic() < end:
                pass
        return sample
