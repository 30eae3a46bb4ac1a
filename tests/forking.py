"""Forking while another thread holds locks, for the tests that a child is not left waiting on
a lock no thread of its own will release (``fpipe.core.fork_locks``)."""

from __future__ import annotations

import os
import select
import signal
import threading
from collections.abc import Callable
from typing import Any


def forked_while_held(locks: list[Any], child: Callable[[], bytes], timeout: float = 5.0) -> bytes:
    """Fork while another thread of this process holds each of ``locks``; ``child()`` runs in
    the child and its bytes come back here. b"" if the child did not answer within
    ``timeout`` seconds (it is killed then: a child waiting on a lock never answers)."""
    held, forked = threading.Event(), threading.Event()

    def holder():  # not the forking thread: the child has no such thread to release them
        for lock in locks:
            lock.acquire()
        held.set()
        forked.wait(timeout + 5)
        for lock in reversed(locks):
            lock.release()

    t = threading.Thread(target=holder)
    t.start()
    assert held.wait(timeout)
    r, w = os.pipe()
    try:
        pid = os.fork()
        if pid == 0:  # child
            try:
                os.write(w, child())
            finally:
                os._exit(0)
    finally:
        forked.set()
        t.join(timeout)
    os.close(w)
    ready, _, _ = select.select([r], [], [], timeout)
    if not ready:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    got = os.read(r, 1 << 16) if ready else b""
    os.close(r)
    return got
