"""remote.py without a server: ``file://`` objects, a missing obstore, failing range fetches."""

from __future__ import annotations

import sys
import threading

import pytest

pytest.importorskip("obstore")

from fpipe.core.errors import ConfigError  # noqa: E402
from fpipe.storage import objects, paths  # noqa: E402
from fpipe.storage.read import remote  # noqa: E402


def test_without_obstore_the_error_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "obstore", None)  # import obstore now raises ImportError
    monkeypatch.setitem(sys.modules, "obstore.store", None)
    monkeypatch.setattr(objects, "_STORES", {})
    with pytest.raises(ConfigError, match=r"pip install 'fpipe\[remote\]'"):
        remote.open_store(f"file://{tmp_path}/x.bin")


class _Unreadable:
    def __bytes__(self):
        raise MemoryError("no room for the range")


class _FetchedButUnreadable:
    """An obstore whose ranged GET succeeds and whose bytes cannot be taken."""

    async def get_range_async(self, store, name, *, start, length):
        return _Unreadable()


def test_a_range_read_that_fails_after_its_get_raises_instead_of_hanging(monkeypatch, tmp_path):
    (tmp_path / "x.bin").write_bytes(b"0123456789")
    url = f"file://{tmp_path}/x.bin"
    files = remote.RemoteFiles(f"file://{tmp_path}")
    assert files.pread(url, 2, 4) == b"2345"
    monkeypatch.setattr(remote, "import_obstore", _FetchedButUnreadable)
    raised: list[BaseException] = []

    def read():
        try:
            files.pread(url, 0, 4)
        except BaseException as e:  # noqa: BLE001 - recorded for the assertions
            raised.append(e)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "pread still waits for a range whose fetch failed"
    assert isinstance(raised[0], OSError) and "x.bin: no room for the range" in str(raised[0])


def test_memory_is_not_a_url_scheme(tmp_path):
    # obstore's memory store has no bucket (memory://b is refused) and is empty in each process
    assert not paths.is_url("memory://x") and not paths.is_url("memory:///x")
    assert paths.is_url(f"file://{tmp_path}") and paths.is_url("s3://b/x")
