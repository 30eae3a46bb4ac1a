"""Worker processes keep a batch's freed memory for the next batch (glibc's malloc thresholds)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fpipe.loader import _worker_memory
from fpipe.loader._worker_memory import keep_freed_memory, worker_started

pytestmark = pytest.mark.skipif(
    _worker_memory._mallopt() is None, reason="glibc's mallopt only (the thresholds are glibc's)"
)


#: A fresh interpreter (a heap with no large free blocks a test process's may hold): glibc's
#: thresholds as a process starts with them (128 KiB), then (with "tuned")
#: keep_freed_memory(), then 20 batches of 16 blocks of 200 KiB, each written and freed, as a
#: worker decodes images; prints the minor page faults taken.
_BATCHES = """
import ctypes, ctypes.util, resource, sys
from fpipe.loader import _worker_memory as wm
mallopt = wm._mallopt()
mallopt(wm._M_MMAP_THRESHOLD, 128 << 10)
mallopt(wm._M_TRIM_THRESHOLD, 128 << 10)
if sys.argv[1] == "tuned":
    assert wm.keep_freed_memory()
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    blocks = [libc.malloc(200 << 10) for _ in range(16)]
    for b in blocks:
        ctypes.memset(b, 1, 200 << 10)
    for b in blocks:
        libc.free(b)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(how: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _BATCHES, how], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


def test_a_worker_reuses_a_batch_s_freed_memory():
    pages = 20 * 16 * (200 << 10) // 4096  # 16,000 pages written in all
    untuned, tuned = _faults("untuned"), _faults("tuned")
    assert untuned > pages // 2  # each batch on fresh pages: what the tuning is for
    assert tuned < pages // 8  # the first batch's pages (800), then the same ones again


def test_the_loader_s_worker_processes_are_tuned(tmp_path):
    from fpipe.loader._iteration import torch_loader

    class _Loader:  # what torch_loader reads of a Loader with worker processes
        num_workers, prefetch_factor, timeout = 1, 2, 0
        multiprocessing_context = None
        worker_mode = "process"
        read_ahead_bytes = 0
        watchdog_s = 0

    class _Dataset:
        class materializer:
            sources = ()

    loader = _Loader()
    loader.dataset = _Dataset()
    dl = torch_loader(loader, sampler=[])
    assert dl.worker_init_fn is worker_started


def test_opting_out_leaves_the_allocator_alone(monkeypatch):
    monkeypatch.setattr(_worker_memory, "_done", False)
    monkeypatch.setenv("FPIPE_WORKER_MALLOC", "default")
    called = []
    monkeypatch.setattr(_worker_memory, "_mallopt", lambda: called.append(1))
    assert keep_freed_memory() is False and not called
