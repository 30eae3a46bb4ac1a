"""A dataset that changes between building the loader and iterating it (its folder removed, its
index broken, its mount gone): iterating raises an fpipe error naming the path."""

from __future__ import annotations

import errno
import shutil

import pytest

import fpipe.storage.read.layouts
from fpipe.core import ConfigError
from tests.loader.helpers import build, prepared_images


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    return prepared_images(tmp_path_factory.mktemp("changed") / "base", shards=2, per_shard=4)


@pytest.fixture
def copy(prepared, tmp_path):
    return shutil.copytree(prepared, tmp_path / "ds")


def _first_batch_error(loader) -> str:
    with pytest.raises(ConfigError) as info:
        next(iter(loader))
    return str(info.value)


def test_a_removed_folder_is_named(copy):
    loader = build(str(copy))
    shutil.rmtree(copy)
    assert _first_batch_error(loader) == f"{copy}: no such dataset"


@pytest.mark.parametrize("broken", ["missing", "not npy"])
def test_a_broken_index_array_read_lazily_is_named(copy, broken):
    loader = build(str(copy))
    keys = copy / ".fpipe" / "keys.npy"  # loaded on the first key, not when opening
    if broken == "missing":
        keys.unlink()
    else:
        keys.write_bytes(b"garbage")
    message = _first_batch_error(loader)
    assert message.startswith(f"{keys}: ") and "re-run `fpipe prepare`" in message


def test_a_dataset_that_cannot_be_opened_is_named(copy, monkeypatch):
    loader = build(str(copy))

    def stale(path, **kwargs):  # what a dead network mount raises, not fpipe's own error
        raise OSError(errno.ESTALE, "Stale file handle", str(path))

    monkeypatch.setattr(fpipe.storage.read.layouts, "open_dataset", stale)
    message = _first_batch_error(loader)
    assert message.startswith(f"{copy}: cannot open the dataset (OSError: ")
    assert "Stale file handle" in message
