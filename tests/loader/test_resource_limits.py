"""A process or system limit reached while loading (no descriptor left, the kernel refusing
memory) is one :class:`ResourceLimitError` naming the limit and how to raise it: never a bad
sample skipped or blamed, never a worker fault the loader restarts workers for."""

import errno
import gc
import multiprocessing
import os
import sys

import pytest

from fpipe.core import BadSampleError, ResourceLimitError
from fpipe.core.resource_limits import resource_limit_error
from fpipe.storage.read.reader import FileCache
from tests.loader.helpers import build


@pytest.mark.parametrize("num_workers", [0, 2])
def test_no_descriptor_left_to_open_a_shard_is_a_limit_not_a_bad_sample(
    image_dataset, monkeypatch, num_workers
):
    """Every shard open fails with EMFILE (in the worker processes too: they are forked with
    the patch). With error_policy="skip" every sample used to be skipped and counted."""

    def no_descriptor_left(self, path):
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), path)

    monkeypatch.setattr(FileCache, "_fd", no_descriptor_left)
    loader = build(image_dataset, num_workers=num_workers, error_policy="skip", num_epochs=1)
    with pytest.raises(ResourceLimitError) as info:
        next(iter(loader))
    err = info.value
    assert err.limit == "RLIMIT_NOFILE" and err.errno == errno.EMFILE
    assert "ulimit -n" in str(err) and "RLIMIT_NOFILE" in str(err)
    stats = loader.stats()
    assert stats.skipped == 0 and stats.recoveries == 0  # nothing skipped, no worker restart


def test_a_limit_is_found_behind_the_error_a_reader_made_of_it():
    """A reader's BadSampleError raised ``from None`` still has the OSError as its context;
    torch's own report of the main process out of descriptors carries no errno."""

    def reader_error(code):
        try:
            raise OSError(code, os.strerror(code))
        except OSError as e:
            try:
                raise BadSampleError("s.tar", "s/1", f"cannot open: {e}") from None
            except BadSampleError as bad:
                return bad

    for code, limit in [(errno.EMFILE, "RLIMIT_NOFILE"), (errno.ENFILE, "fs.file-max"),
                        (errno.ENOMEM, "memory")]:  # fmt: skip
        found = resource_limit_error(reader_error(code), "reading")
        assert found is not None and (found.limit, found.errno) == (limit, code)
    torch_report = RuntimeError("Too many open files. Communication with the workers is ...")
    assert resource_limit_error(torch_report, "receiving a batch").limit == "RLIMIT_NOFILE"
    assert resource_limit_error(reader_error(errno.ENOENT), "reading") is None
    assert resource_limit_error(ValueError("bad"), "reading") is None


def test_no_descriptor_left_to_start_workers_is_a_limit_and_leaves_nothing_behind(
    image_dataset, open_files_headroom, monkeypatch
):
    """Two descriptors left: starting the worker processes fails (a pipe for one of them).
    It used to be a raw OSError, then torch's half-built iterator printing an AttributeError
    when collected, its first worker left running."""
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    before = set(multiprocessing.active_children())
    loader = build(image_dataset, num_workers=2, num_epochs=1)
    open_files_headroom(2)
    with pytest.raises(ResourceLimitError) as info:
        next(iter(loader))
    assert info.value.limit == "RLIMIT_NOFILE" and "starting DataLoader workers" in str(info.value)
    info = None
    gc.collect()
    assert not unraisable and set(multiprocessing.active_children()) <= before
