"""Snapshot bytes with an intact checksum but impossible values are refused on restore.

A state record is walked to its integer fields; one is replaced by a hostile value and the state
re-encoded (so the checksum is valid). Restoring must raise SnapshotError for a negative value,
a changed key, a position outside an epoch, or a value past 2**62 (2**64 - 1 still fits the
snapshot's integers); any other value must either be refused the same way or restore to a state
the pipeline can run from (never another exception)."""

from __future__ import annotations

import contextlib
import re

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fpipe.core import SnapshotError
from tests.helpers import six_stage


def _int_paths(value, path=()):
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        yield path
    elif isinstance(value, msgspec.Struct):
        for f in value.__struct_fields__:
            yield from _int_paths(getattr(value, f), (*path, f))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _int_paths(v, (*path, i))


def _replace(value, path, new):
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, msgspec.Struct):
        return msgspec.structs.replace(value, **{head: _replace(getattr(value, head), rest, new)})
    items = list(value)
    items[head] = _replace(items[head], rest, new)
    return type(value)(items)


def _state(p, steps):
    state = p.init()
    for _ in range(steps):
        state, _ = p.next(state, 1)
    return state


PLAN = six_stage(num_samples=200, window=16, batch_size=4, slice_size=8, num_epochs=3)
STATE = _state(PLAN, 7)
PATHS = list(_int_paths(STATE))


def test_the_state_has_keys_positions_and_counters():
    names = {p[-1] for p in PATHS}
    assert {"key", "epoch", "position", "cur"} <= names


REPEAT = ("up",) * 4  # the repeat source's state inside the five lifted stages


@pytest.mark.parametrize("path", [p for p in PATHS if p[-1] == "key" or p[:-1] == REPEAT])
@pytest.mark.parametrize("bad", [-1, 2**40])
def test_bad_keys_and_positions_are_refused(path, bad):
    data = PLAN.snapshot(_replace(STATE, path, bad))
    with pytest.raises(SnapshotError):
        PLAN.restore(data)


def _field(path) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


@pytest.mark.parametrize("path", [p for p in PATHS if p[-1] != "key"])
@pytest.mark.parametrize("bad", [2**62, 2**63, 2**64 - 1])
def test_values_out_of_range_are_refused_naming_the_field(path, bad):
    data = PLAN.snapshot(_replace(STATE, path, bad))
    with pytest.raises(SnapshotError, match=re.escape(f"state{_field(path)} is {bad}: it must be")):
        PLAN.restore(data)


@settings(max_examples=60)
@given(i=st.integers(0, len(PATHS) - 1), new=st.integers(-(2**63), 2**64 - 1))
def test_any_integer_is_refused_or_runs(i, new):
    path = PATHS[i]
    data = PLAN.snapshot(_replace(STATE, path, new))
    try:
        state = PLAN.restore(data)
    except SnapshotError:
        return
    assert 0 <= new < 2**62 or path[-1] == "key", f"{path} = {new} was accepted"
    if path[-1] == "key":
        assert new == _replace_get(STATE, path)
    with contextlib.suppress(SnapshotError):  # a block cursor is checked with its block
        PLAN.next(state, 3)


def _replace_get(value, path):
    for p in path:
        value = getattr(value, p) if isinstance(p, str) else value[p]
    return value
