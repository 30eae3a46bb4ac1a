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
    into a typed one, for ``Cooker(fn)`` in a task encoder's ``cookers``. The cooker gets the
    metadataset's ``aux:`` file stores as keywords and, with ``need_primary=True``, its own
    dataset as ``primary`` (files by ``<sample key>.<member>``). ``need_cache`` (cache pools)
    is refused: fpipe has none."""
    if need_cache:
        raise ConfigError(
            "cooker(need_cache=True): fpipe has no cache pools; read the files a cooker needs "
            "from its file stores (`primary`, the metadataset's aux:) while cooking"
        )

    def mark(f: Any) -> Any:
        if need_primary:
            f.__cooker_need_primary__ = True
        return f

    if fn is None:
        return mark
    return mark(fn)
