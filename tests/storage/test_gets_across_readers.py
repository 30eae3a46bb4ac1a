"""A range one reader's GETs read ahead, answered through another reader's.

Thread workers each open their own datasets (one :class:`~fpipe.storage.read.remote.RemoteFiles`
and one :class:`Gets` each) but share their pool's read-ahead window: a thread takes what
another read ahead, and its own ``Gets`` hedges the read once it waits for it. When the hedge
answered first, the place the read held in the first ``Gets``'s lane of reads ahead was given
back to the second's: the first lost a place each time (its reads ahead ended up never
starting) and the second's limit grew past ``4 x concurrency``. That bookkeeping has no locks:
it relies on every reader's GETs running on the process's one I/O loop.
"""

from __future__ import annotations

import asyncio
import os
import threading

from fpipe.storage.read import remote
from fpipe.storage.read._gets import Get, Gets
from fpipe.storage.read._hedge import Hedger


def test_a_read_ahead_answered_by_another_reader_s_hedge_frees_its_own_lane():
    sent: dict[int, int] = {}

    def request(store, name, off, size):
        sent[off] = sent.get(off, 0) + 1
        first = sent[off] == 1

        async def answer():
            await asyncio.sleep(0.2 if first else 0.0)  # the first request is slow
            return b"x%d" % off

        return answer()

    loop = remote._io_loop()
    ahead = Gets(loop, request, remote._as_os_error, 1, None)  # 4 reads ahead in flight
    hedger = Hedger(quantile=0.5, max_fraction=1.0, min_delay_s=0.001, warmup=1)
    for _ in range(4):
        hedger.observed(0.001)  # a latency known, and four hedges' worth of tokens
    reading = Gets(loop, request, remote._as_os_error, 1, hedger)
    for off in range(4):  # each read ahead by one reader and waited for through the other
        get = Get(None, "x", "s3://b/x", off, 1, True)
        ahead.submit([get])
        reading.needed_now(get)
        assert get.future.result(timeout=5) == b"x%d" % off
    assert hedger.hedge_wins == 4
    later = Get(None, "x", "s3://b/x", 100, 1, True)
    ahead.submit([later])  # the lane has room again: it starts
    assert later.future.result(timeout=2) == b"x100"


def test_threads_reaching_the_io_loop_together_share_one(monkeypatch):
    """Every reader's GETs run on the process's one I/O loop (their bookkeeping has no locks):
    two threads making it at once made two, each running in a thread of its own for good."""
    made: list = []
    first_in, second_done = threading.Event(), threading.Event()

    class SlowLoop:
        def __init__(self):
            made.append(self)
            self.loop, self.pid = object(), os.getpid()
            if len(made) == 1:
                first_in.set()
                second_done.wait(0.2)  # the other thread asks meanwhile

    monkeypatch.setattr(remote, "_LOOP", None)
    monkeypatch.setattr(remote, "_IOLoop", SlowLoop)
    got: list = []
    first = threading.Thread(target=lambda: got.append(remote._io_loop()))
    first.start()
    assert first_in.wait(5)
    second = threading.Thread(target=lambda: (got.append(remote._io_loop()), second_done.set()))
    second.start()
    first.join(5)
    second.join(5)
    assert len(made) == 1 and got == [made[0].loop] * 2
