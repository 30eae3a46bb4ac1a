"""Energon's names for fpipe classes that have another name in fpipe."""

from __future__ import annotations

from typing import Any

from fpipe.loader.dataloader import Loader

__all__ = ["SavableDataLoader", "cooker"]

#: Energon's savable loader: fpipe's :class:`~fpipe.loader.Loader` (every fpipe loader saves).
SavableDataLoader = Loader


def cooker(fn: Any = None, *, need_cache: bool = False, need_primary: bool = False) -> Any:
    """Energon's ``@cooker`` (also ``@cooker()``): marks a function that turns a crude sample
    into a typed one, for ``Cooker(fn)`` in a task encoder's ``cookers``. The cooker gets the
    metadataset's ``aux:`` file stores as keywords, with ``need_primary=True`` its own
    dataset as ``primary`` (files by ``<sample key>.<member>``, or ``.<member>`` of the sample
    being cooked), and with ``need_cache=True`` a cache pool as ``cache``, whose
    ``cache.get_lazy(store, name)`` is a ``Lazy`` reference read later by ``lazy.get(sample)``
    (:mod:`fpipe.materialize.lazy`)."""

    def mark(f: Any) -> Any:
        if need_primary:
            f.__cooker_need_primary__ = True
        if need_cache:
            f.__cooker_need_cache__ = True
        return f

    if fn is None:
        return mark
    return mark(fn)
