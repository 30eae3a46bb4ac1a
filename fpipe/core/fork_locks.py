"""Process-wide locks that a forked child gets free.

A thread of fpipe's (a thread worker, the read-ahead pool, a Ray actor's task) may hold one of
fpipe's process-wide locks at the moment another loader forks its worker processes. The child
has a copy of the lock, held, and no thread that will ever release it: its first use would wait
forever. A lock made here is a module global that each forked child replaces with a new one
(``os.register_at_fork``); code takes it by its global name at each use, so it finds the new
one.

Examples:
  >>> _cache_lock = fork_safe_lock(globals(), "_cache_lock")
  >>> with _cache_lock:
  ...     pass
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["fork_safe_lock", "registered"]

#: (module name, module globals, name, factory) of every lock made here, renewed in that order
#: in a child. The module's name is read when the lock is made: a namespace that is not a
#: module's (a doctest's globals) may be cleared afterwards.
_LOCKS: list[tuple[str, dict[str, Any], str, Callable[[], Any]]] = []


def fork_safe_lock(module_globals: dict[str, Any], name: str, reentrant: bool = False):
    """A new lock (``threading.RLock`` if ``reentrant``) that is global ``name`` of the
    module whose ``globals()`` are ``module_globals``, and is replaced by a free one in every
    child forked from now on. Returns it (assign it to that name)."""
    make: Callable[[], Any] = threading.RLock if reentrant else threading.Lock
    module_globals[name] = lock = make()
    _LOCKS.append((module_globals.get("__name__", "?"), module_globals, name, make))
    return lock


def registered() -> list[tuple[str, str]]:
    """``(module, name)`` of every lock made here that is a loaded module's global (for tests
    and the architecture check). A lock made in another namespace (a doctest's globals, which
    doctest clears when the example ends) is renewed in a child all the same but not listed:
    no module holds it."""
    return [
        (module, name)
        for module, g, name, _ in _LOCKS
        if getattr(sys.modules.get(module), "__dict__", None) is g
    ]


def _renew() -> None:
    for _, module_globals, name, make in _LOCKS:
        module_globals[name] = make()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew)
