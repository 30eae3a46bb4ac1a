"""The sample-type registry read while another thread registers a type: the lookups that go
through every registered type (to check a class, to list the known names in an error, to find
a class's name) gave ``RuntimeError: dictionary changed size during iteration`` instead of
fpipe's own error."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

from fpipe.core.errors import ConfigError
from fpipe.samples import Sample, registry


@dataclass
class _LateSample(Sample):
    text: str = ""


@dataclass
class _Unregistered(Sample):
    text: str = ""


class _RegisteringMeanwhile(dict):
    """The registry's types; going through them, after the first, another thread registers a
    type, and this one goes on once it did (or, if it waits for the registry, after 0.1 s)."""

    threads: list[threading.Thread]

    def _meanwhile(self, items):
        it = iter(items)
        yield next(it)
        done = threading.Event()

        def register():
            registry.register_sample_type(_LateSample)
            done.set()

        thread = threading.Thread(target=register)
        self.threads.append(thread)
        thread.start()
        done.wait(0.1)
        yield from it

    def __iter__(self):
        return self._meanwhile(super().__iter__())

    def keys(self):
        return self._meanwhile(super().keys())

    def values(self):
        return self._meanwhile(super().values())

    def items(self):
        return self._meanwhile(super().items())


@pytest.mark.parametrize(
    ("lookup", "error"),
    [
        (lambda: registry.sample_type_from_name(_Unregistered), "is not registered"),
        (lambda: registry.sample_type_from_name("NoSuchSample"), "unknown sample type"),
        (lambda: registry.sample_type_name(_Unregistered), "is not registered"),
    ],
    ids=["class", "unknown-name", "name-of-class"],
)
def test_a_type_registered_meanwhile_leaves_fpipe_s_own_error(monkeypatch, lookup, error):
    types = _RegisteringMeanwhile(registry._TYPES)
    types.threads = []
    monkeypatch.setattr(registry, "_TYPES", types)
    with pytest.raises(ConfigError, match=error):
        lookup()
    for thread in types.threads:
        thread.join(5)
    assert types.threads and types["_LateSample"] is _LateSample  # it was registered meanwhile
