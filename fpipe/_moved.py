"""Former module paths that the documentation once named, still importable.

The package was laid out by job (``fpipe.plan.packing``, ``fpipe.storage.read``,
``fpipe.decode.av``); code written against a documented earlier path keeps working: importing
``fpipe.plan.pack_algorithms`` gives the module ``fpipe.plan.packing.algorithms`` itself (the
same objects, not copies), with a ``DeprecationWarning`` naming the path to use. Only the paths
in :data:`MOVED` are aliased; other module paths are not a stable interface
(docs/design/layout.md).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

__all__ = ["MOVED", "install"]

#: former module path -> where it lives now
MOVED: dict[str, str] = {
    "fpipe.decode.av_audio": "fpipe.decode.av.audio",
    "fpipe.decode.av_probe": "fpipe.decode.av.probe",
    "fpipe.decode.av_ranges": "fpipe.decode.av.ranges",
    "fpipe.decode.av_records": "fpipe.decode.av.records",
    "fpipe.decode.av_video": "fpipe.decode.av.video",
    "fpipe.plan.pack_algorithms": "fpipe.plan.packing.algorithms",
    "fpipe.storage.av_meta": "fpipe.storage.read.av_meta",
    "fpipe.storage.prepare_shards": "fpipe.storage.prepare.shards",
    "fpipe.storage.remote": "fpipe.storage.read.remote",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds a former path and loads it as the module that now lives elsewhere."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}; import it from there", DeprecationWarning, stacklevel=2
        )
        return importlib.import_module(new)

    def exec_module(self, module):
        pass  # the module is the one already imported under its new name


_FINDER = _Alias()


def install() -> None:
    """Make the former paths importable (once; done by ``import fpipe``)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
