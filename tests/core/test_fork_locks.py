"""Every process-wide lock of fpipe's is free in a forked child, whichever thread of the
parent held it at the fork (``fpipe.core.fork_locks``), and none is made another way."""

from __future__ import annotations

import importlib
import os
import re
import sys
from pathlib import Path

import pytest

from fpipe.core import fork_locks
from tests.forking import forked_while_held

ROOT = Path(fork_locks.__file__).resolve().parents[1]
#: a lock made at module level (column 0), the way fork_safe_lock replaces
MODULE_LOCK = re.compile(r"^\w+\s*(:[^=]+)?=\s*threading\.R?Lock\(\)", re.M)


def _modules_with_locks() -> list[str]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.name != "fork_locks.py" and "fork_safe_lock(globals()" in path.read_text(
            encoding="utf-8"
        ):
            rel = path.relative_to(ROOT.parent).with_suffix("")
            out.append(".".join(rel.parts))
    return out


def test_no_module_level_lock_is_made_another_way():
    made = [
        str(p.relative_to(ROOT.parent))
        for p in sorted(ROOT.rglob("*.py"))
        if MODULE_LOCK.search(p.read_text(encoding="utf-8"))
    ]
    assert made == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_another_thread_held_every_lock_can_take_them():
    names = _modules_with_locks()
    assert len(names) >= 10, names  # the module-level locks fpipe has
    for name in names:
        importlib.import_module(name)
    locks = fork_locks.registered()
    assert {m for m, _ in locks} >= set(names)

    def child() -> bytes:  # each lock, by its global name, must be free
        free = all(getattr(sys.modules[m], n).acquire(timeout=1) for m, n in locks)
        return b"1" if free else b"0"

    got = forked_while_held([getattr(sys.modules[m], n) for m, n in locks], child, 30)
    assert got == b"1", f"a lock held at the fork stayed held in the child: {locks}"


def test_a_lock_made_in_a_doctest_does_not_break_the_list_of_module_locks():
    # the module's own doctest makes a lock in a copy of its globals, which doctest clears when
    # the example ends: listing the locks read that namespace's __name__ and raised KeyError
    import doctest

    before = fork_locks.registered()
    result = doctest.testmod(fork_locks, verbose=False, report=False)
    assert result.attempted > 0 and result.failed == 0
    assert fork_locks.registered() == before
