"""remote.py without a server: ``file://`` objects, a missing obstore."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("obstore")

from fpipe.core.errors import ConfigError  # noqa: E402
from fpipe.storage import remote  # noqa: E402


def test_without_obstore_the_error_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "obstore", None)  # import obstore now raises ImportError
    monkeypatch.setitem(sys.modules, "obstore.store", None)
    monkeypatch.setattr(remote, "_STORES", {})
    with pytest.raises(ConfigError, match=r"pip install 'fpipe\[remote\]'"):
        remote.open_store(f"file://{tmp_path}/x.bin")
