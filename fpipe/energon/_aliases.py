"""Energon's names for fpipe classes that have another name in fpipe."""

from __future__ import annotations

from typing import Any

from fpipe.core.errors import ConfigError
from fpipe.loader.dataloader import Loader

__all__ = ["SavableDataLoader", "cooker"]

#: Energon's savable loader: fpipe's :class:`~fpipe.loader.Loader` (every fpipe loader saves).
SavableDataLoader = Loader


def cooker(fn: Any = None, *, need_cache: bool = False, need_primary: bool = False) -> Any:
    """Energon's ``@cooker`` (also ``@cooker()``): marks a function that turns a crude sample
    into a typed one, for ``Cooker(fn)`` in a task encoder's ``cookers``. ``need_cache`` and
    ``need_primary`` (auxiliary file stores and cache pools) are refused: fpipe has neither."""
    if need_cache or need_primary:
        raise ConfigError(
            "cooker(need_cache=/need_primary=): fpipe has no cache pools or auxiliary file "
            "stores; read every member a cooker needs from the sample (a metadataset join: "
            "combines datasets by key)"
        )
    if fn is None:
        return lambda f: f
    return fn
