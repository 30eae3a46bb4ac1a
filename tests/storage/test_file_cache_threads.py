"""FileCache under threads: a descriptor a read is using is never closed under it.

Thread workers share one process, and so do a worker's reads and the read-ahead window's
``posix_fadvise`` calls. Each dataset has its own cache, but every cache of the process is
bounded together (``PROCESS_MAX_OPEN``): a thread opening a file may close another cache's
least recently used descriptor. If that one was being read, and the kernel handed its number
to the next file opened, the read returned the other file's bytes.
"""

from __future__ import annotations

import os
import threading

import pytest

from fpipe.storage.read import reader as reader_mod
from fpipe.storage.read.reader import FileCache
from tests.forking import forked_while_held


def _files(tmp_path):
    out = {}
    for name in "abc":
        p = tmp_path / name
        p.write_bytes(name.encode() * 64)
        out[name] = str(p)
    return out


def _evict_by_another_cache(cache_a, paths, monkeypatch):
    monkeypatch.setattr(reader_mod, "PROCESS_MAX_OPEN", 1)
    other = FileCache(4)
    other.pread(paths["b"], 0, 1)  # a's descriptor is the process's least recently used
    other.pread(paths["c"], 0, 1)  # the next file opened: the number a's descriptor had
    return other


def _evict_by_its_own_bound(cache_a, paths, monkeypatch):
    cache_a.pread(paths["b"], 0, 1)  # max_open=1: the file being read is closed first
    cache_a.pread(paths["c"], 0, 1)
    return cache_a


def _close_while_reading(cache_a, paths, monkeypatch):
    cache_a.close()
    other = FileCache(4)
    other.pread(paths["c"], 0, 1)
    return other


@pytest.mark.parametrize(
    "evict", [_evict_by_another_cache, _evict_by_its_own_bound, _close_while_reading]
)
def test_a_read_keeps_its_file_while_another_thread_evicts_it(tmp_path, monkeypatch, evict):
    paths = _files(tmp_path)
    cache_a = FileCache(1)
    cache_a.pread(paths["a"], 0, 1)  # open before the reading thread starts
    real_pread = os.pread
    has_fd, resume = threading.Event(), threading.Event()

    def pread_after_a_pause(fd, size, offset):
        if threading.current_thread() is reading and not has_fd.is_set():
            used.append(fd)
            has_fd.set()  # the descriptor is in hand; the bytes not read yet
            resume.wait(5)
        return real_pread(fd, size, offset)

    got: list = []
    used: list[int] = []

    def read_a():
        try:
            got.append(cache_a.pread(paths["a"], 0, 8))
        except OSError as e:
            got.append(e)

    monkeypatch.setattr(reader_mod.os, "pread", pread_after_a_pause)
    reading = threading.Thread(target=read_a)
    reading.start()
    try:
        assert has_fd.wait(5)
        other = evict(cache_a, paths, monkeypatch)
    finally:
        resume.set()
        reading.join(5)
    assert got == [b"aaaaaaaa"]
    assert other.pread(paths["c"], 0, 2) == b"cc"
    for cache in (cache_a, other):
        cache.close()
    with pytest.raises(OSError):  # closed once read, not leaked
        os.fstat(used[0])


def test_a_read_ahead_gives_its_descriptor_back(tmp_path):
    paths = _files(tmp_path)
    cache = FileCache(1)
    assert cache.read_ahead([(paths["a"], 0, 8)]) == [None]
    fd = cache._fds[paths["a"]]
    cache.close()  # not deferred: nothing is reading it
    with pytest.raises(OSError):
        os.fstat(fd)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_another_thread_held_the_lock_can_read(tmp_path):
    """The lock of the process's caches was held by a reading thread at the fork: the child
    has no such thread, and would wait for it forever."""
    paths = _files(tmp_path)
    got = forked_while_held(
        [reader_mod._LRU_LOCK], lambda: FileCache(1).pread(paths["a"], 0, 2)
    )  # held by another thread: the lock is reentrant, so the forking one would not do
    assert got == b"aa"
