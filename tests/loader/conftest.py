"""A small prepared image-caption dataset shared by the loader tests; a lowered open-file
limit."""

import gc
import os
import resource

import pytest

from tests.loader.helpers import prepared_images


@pytest.fixture(scope="session")
def image_dataset(tmp_path_factory):
    return prepared_images(
        tmp_path_factory.mktemp("images"), shards=10, per_shard=12, split="8,1,1"
    )


@pytest.fixture
def open_files_headroom():
    """``lower(n)``: this process's open-file soft limit set to the files it has open now plus
    ``n`` (the worker processes it forks inherit it); restored after the test."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)

    def lower(headroom: int) -> int:
        # Garbage an earlier test left in a reference cycle may hold descriptors: collected
        # later (during the worker start, say), it would free numbers under the limit.
        gc.collect()
        # The limit caps descriptor numbers, not their count: a process with holes below its
        # highest descriptor (left by earlier tests in the same xdist worker) could open more
        # than ``headroom`` under "open count + headroom". Count free numbers instead (fstat
        # opens nothing, unlike listing /proc/self/fd).
        top = max(int(fd) for fd in os.listdir("/proc/self/fd")) + 1
        used = set()
        for fd in range(top):
            try:
                os.fstat(fd)
            except OSError:
                continue
            used.add(fd)
        free, limit = 0, 0
        while free < headroom:
            free += limit not in used
            limit += 1
        while limit in used:  # descriptors in use just below the limit stay usable
            limit += 1
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
        return headroom

    yield lower
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
