"""A small prepared image-caption dataset shared by the loader tests; a lowered open-file
limit."""

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
        in_use = len(os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + headroom, hard))
        return headroom

    yield lower
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
