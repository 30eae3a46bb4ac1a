"""The credentials an ``msc://`` profile's provider gave, kept per reading of the MSC
configuration: a reading freed since must not lend its credentials to a later one."""

from __future__ import annotations

from fpipe.storage import msc


def _spec(access_key: str) -> dict:
    return {
        "credentials_provider": {
            "type": "S3Credentials",
            "options": {"access_key": access_key, "secret_key": "secret"},
        }
    }


def test_credentials_of_a_freed_reading_are_not_given_to_a_later_one(monkeypatch):
    # the cache was keyed by id(profiles): once a reading's profiles were freed, a later
    # mapping at the same address (CPython reuses it at once) got the old one's credentials
    monkeypatch.setattr(msc, "_CREDS", {})
    old, new = _spec("old-key"), _spec("new-key")
    first = {"emu": old}
    assert msc._credentials("emu", old, first)["access_key_id"] == "old-key"
    freed = id(first)
    del first
    kept = []  # later readings, kept alive: each is a new mapping
    for _ in range(100):
        later = {"emu": new}
        kept.append(later)
        reused = id(later) == freed
        assert msc._credentials("emu", new, later)["access_key_id"] == "new-key", reused
