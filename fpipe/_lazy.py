"""Lazy exports: a package's names load from their modules on first use (PEP 562).

Kept outside :mod:`fpipe.core` and importing nothing of fpipe, so ``import fpipe`` (which uses
it) stays a few milliseconds and pulls in no numpy, torch or other package of fpipe.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    module_name: str, where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the package ``module_name``: ``where`` maps each lazily
    exported name to the module that defines it. A name is imported once, then kept in the
    package's namespace. Any other name that is a submodule of the package is imported on first
    use too, so that code which wrote only ``import fpipe`` may say ``fpipe.encode.X`` or
    ``fpipe.core.testing.check_stage``; an unknown name raises the usual AttributeError.

    Example (in a package's ``__init__.py``)::

        __getattr__, __dir__ = lazy_exports(__name__, {"Loader": "fpipe.loader.dataloader"})
    """

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is not None:
            value = getattr(importlib.import_module(module), name)
        else:
            value = _submodule(module_name, name)
        setattr(sys.modules[module_name], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[module_name])) | set(where))

    return __getattr__, __dir__


def _submodule(package: str, name: str) -> Any:
    """The submodule ``package.name``, imported; AttributeError when there is none. A submodule
    that exists but fails to import (a missing optional dependency) raises that ImportError."""
    missing = AttributeError(f"module {package!r} has no attribute {name!r}")
    if name.startswith("__") or not name.isidentifier():
        raise missing  # dunder probes (copy, inspect, pickle) never name a submodule
    full = f"{package}.{name}"
    try:
        return importlib.import_module(full)
    except ModuleNotFoundError as e:
        if e.name != full:
            raise
        raise missing from None
