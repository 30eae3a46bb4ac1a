"""Misspelt names get a "did you mean ...?": the closest valid name, found by difflib.

One mechanism for the entry points that take many keyword options (``get_train_dataset``,
``get_loader``: :func:`check_keywords`) and for the command line's flags (:func:`closest`): a
misspelt option is a mistake to report, not a setting to ignore.

Example:
    >>> closest("num_worker", ["num_workers", "timeout"])
    'num_workers'
    >>> closest("zzz", ["num_workers"]) is None
    True
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Iterable
from typing import ParamSpec, TypeVar

__all__ = ["check_keywords", "closest"]

_P = ParamSpec("_P")
_R = TypeVar("_R")


def closest(name: str, names: Iterable[str]) -> str | None:
    """The one of ``names`` closest to the misspelt ``name`` (None: none is close)."""
    found = difflib.get_close_matches(name, list(names), n=1)
    return found[0] if found else None


def check_keywords(
    fn: Callable[_P, _R], explain: Callable[[str, str], Exception | None] | None = None
) -> Callable[_P, _R]:
    """``fn`` with a clearer error for an unknown keyword argument: the TypeError names the
    closest valid one. ``explain(function name, keyword)``: an error to raise instead for a
    keyword it knows (an option of another library with a replacement), or None.

    The signature and docstring stay ``fn``'s, so ``help()`` and IDEs show the options. A
    function that takes ``**kwargs`` accepts any keyword and is returned as it is.
    """
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return fn
    names = tuple(p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
    known = frozenset(names)

    @functools.wraps(fn)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        for name in kwargs:
            if name in known:
                continue
            special = explain(fn.__name__, name) if explain is not None else None
            if special is not None:
                raise special
            close = closest(name, names)
            hint = f"; did you mean {close!r}?" if close else ""
            raise TypeError(f"{fn.__name__}() got an unexpected keyword argument {name!r}{hint}")
        return fn(*args, **kwargs)

    return call
