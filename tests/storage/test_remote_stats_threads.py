"""A :class:`~fpipe.storage.read.remote.RemoteFiles` read from several threads at once (thread
workers, the read-ahead pool): its statistics count every read. ``requests += n`` from two
threads lost one's count, and two threads making the reader's GETs at once each made their
own, so the GETs (and bytes, hedges) of one were counted nowhere."""

from __future__ import annotations

import contextlib
import os
import threading

from fpipe.storage.read import remote
from fpipe.storage.read._gets import Gets


class _FakeStoreFiles(remote.RemoteFiles):
    """Reads answered on the I/O loop without a store: range ``(path, offset, size)`` is
    ``size`` bytes ``x``."""

    def _store_name(self, path):
        return None, path

    def _request(self, store, name, off, size):
        async def answer():
            return b"x" * size

        return answer()


class _CountsMeanwhile(_FakeStoreFiles):
    """``requests`` read by one thread, then another thread's read counted too before it is
    written back (or, if that thread waits for this one, after 0.1 s)."""

    def __init__(self):
        self.gate = threading.Barrier(2, timeout=0.1)
        super().__init__("s3://bucket")

    @property
    def requests(self):
        value = self._requests
        # the other thread reads it too (unless it waits for this one's count)
        with contextlib.suppress(threading.BrokenBarrierError):
            self.gate.wait()
        return value

    @requests.setter
    def requests(self, value):
        self._requests = value


def _in_threads(*calls):
    got: list = [None] * len(calls)

    def run(i):
        got[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    return got


def test_reads_started_by_two_threads_at_once_are_both_counted():
    files = _CountsMeanwhile()
    files._gets()  # made beforehand: only the counting happens together
    got = _in_threads(
        lambda: files.read_ahead([("s3://bucket/a", 0, 3)]),
        lambda: files.read_ahead([("s3://bucket/b", 0, 4)]),
    )
    assert [f.result(timeout=5) for fs in got for f in fs] == [b"xxx", b"xxxx"]
    assert files.stats()["requests"] == 2


def test_threads_reading_first_at_once_share_the_reader_s_gets(monkeypatch):
    made: list = []
    first_in, second_done = threading.Event(), threading.Event()

    class SlowGets(Gets):
        def __init__(self, *args):
            super().__init__(*args)
            made.append(self)
            if len(made) == 1:
                first_in.set()
                second_done.wait(0.1)  # the other thread reads meanwhile

    monkeypatch.setattr(remote, "Gets", SlowGets)
    files = _FakeStoreFiles("s3://bucket")
    got: list = []
    first = threading.Thread(target=lambda: got.append(files.read_ahead([("s3://b/a", 0, 3)])))
    first.start()
    assert first_in.wait(5)
    second = threading.Thread(
        target=lambda: (got.append(files.read_ahead([("s3://b/b", 0, 4)])), second_done.set())
    )
    second.start()
    first.join(5)
    second.join(5)
    assert sorted(f.result(timeout=5) for fs in got for f in fs) == [b"xxx", b"xxxx"]
    assert len(made) == 1 and files._engine[0] == os.getpid()
    assert files.stats() == {"requests": 2, "bytes_read": 7, "hedges": 0, "hedge_wins": 0}
