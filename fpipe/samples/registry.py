"""Allow-list of sample types by name, so dataset.yaml never imports arbitrary classes.

A name resolves only to a class that was registered: the built-ins, and user classes passed to
:func:`register_sample_type` (at import time of the user's module). Energon's dataset.yaml form
``{__module__: megatron.energon, __class__: CaptioningSample}`` resolves to fpipe's built-in of
that name; a user class is found by its name or by ``module.QualName``.

Joiners (a metadataset join's ``joiner:``) resolve the same way, and also, as Energon names them
(``{__module__: mypkg.joins, __function__: join_pair}`` or ``__class__:``), from a module of the
user's own code that this process has already imported: a sample type class, or a plain
function defined in that module. Nothing is imported for it, and a module of the standard
library, of an installed package or of fpipe is never a user module, so a data file cannot name
``os.system``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import sysconfig
import types as pytypes
from collections.abc import Mapping
from typing import Any, TypeVar

from fpipe.core.errors import ConfigError
from fpipe.core.fork_locks import fork_safe_lock
from fpipe.samples import _types as types
from fpipe.samples.base import Sample

__all__ = [
    "imported_joiner",
    "joiner_from_name",
    "register_joiner",
    "register_sample_type",
    "sample_type_from_name",
    "sample_type_name",
]

T = TypeVar("T", bound=type)

#: Module names whose classes are looked up among fpipe's built-in types by class name
#: (``fpipe.samples.types`` is where they were defined before the module became private).
_BUILTIN_MODULES = (
    "fpipe",
    "fpipe.samples",
    "fpipe.samples._types",
    "fpipe.samples.types",
    "megatron.energon",
)

_TYPES: dict[str, type[Sample]] = {}
_BUILTIN_NAMES: set[str] = set()
#: A user's module may register its types in one thread while another thread's loader looks
#: types up: registering (a check, then a write) holds it, and going through every registered
#: type does so on a copy taken while holding it (iterating the dict itself could raise
#: "dictionary changed size during iteration" in the middle of an error message).
_LOCK = fork_safe_lock(globals(), "_LOCK")


def _registered() -> list[tuple[str, type[Sample]]]:
    """``(name, class)`` of every registered sample type, as registered now."""
    with _LOCK:
        return list(_TYPES.items())


def register_sample_type(cls: T | None = None, *, name: str | None = None) -> Any:
    """Allow ``cls`` (a dataclass subclass of :class:`Sample`) to be named in dataset.yaml.

    Registers ``name`` (default: the class name) and ``module.QualName``. Usable as a plain
    call or as a decorator (``@register_sample_type`` or ``@register_sample_type(name=...)``).
    Registering a different class under a taken name raises :class:`ConfigError`.

    Examples:
      >>> from dataclasses import dataclass
      >>> @register_sample_type
      ... @dataclass
      ... class DocSample(Sample):
      ...     text: str
      >>> sample_type_from_name("DocSample") is DocSample
      True
    """
    if cls is None:
        return lambda c: register_sample_type(c, name=name)
    if not (isinstance(cls, type) and issubclass(cls, Sample) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"a sample type must be a dataclass subclass of Sample, got {cls!r}")
    with _LOCK:
        for n in {name or cls.__name__, f"{cls.__module__}.{cls.__qualname__}"}:
            old = _TYPES.get(n)
            if old is not None and old is not cls:
                raise ConfigError(
                    f"sample type name {n!r} is already registered for {old.__module__}."
                    f"{old.__qualname__}; pass another name= to register {cls.__qualname__}"
                )
            _TYPES[n] = cls
    return cls


def sample_type_from_name(name: str | Mapping[str, str] | type) -> type[Sample]:
    """Resolve a registered sample type from its name (or a class, returned if registered).

    Accepts ``"CaptioningSample"``, ``"fpipe.samples.CaptioningSample"``,
    ``"megatron.energon.CaptioningSample"``, a registered ``"mymodule.MySample"``, or a mapping
    ``{"__module__": ..., "__class__": ...}`` as Energon's dataset.yaml writes it.

    Raises:
      ConfigError: the name is not registered (the message lists the known names).

    Examples:
      >>> sample_type_from_name({"__module__": "megatron.energon", "__class__": "TextSample"})
      <class 'fpipe.samples._types.TextSample'>
    """
    if isinstance(name, type):
        if any(c is name for _, c in _registered()):
            return name
        raise ConfigError(
            f"sample type {name.__qualname__} is not registered; call "
            "fpipe.samples.register_sample_type on it"
        )
    if isinstance(name, Mapping):
        try:
            module, clsname = str(name["__module__"]), str(name["__class__"])
        except KeyError as e:
            raise ConfigError(f"sample_type mapping needs __module__ and __class__: {name}") from e
        full = f"{module}.{clsname}"
    else:
        full = str(name)
        module, _, clsname = full.rpartition(".")
    found = _TYPES.get(full)
    if found is None and module in _BUILTIN_MODULES and clsname in _BUILTIN_NAMES:
        found = _TYPES[clsname]
    if found is None:
        known = ", ".join(sorted(n for n, _ in _registered() if "." not in n))
        fix = (
            f"import {module} in your training code and register {clsname} there "
            "(@fpipe.samples.register_sample_type) before building the dataset"
            if module and module not in _BUILTIN_MODULES
            else "register a custom type with fpipe.samples.register_sample_type"
        )
        raise ConfigError(
            f"unknown sample type {full!r}; known: {known}. To use your own: {fix} (fpipe "
            "imports no class that a data file names)"
        )
    return found


def sample_type_name(cls: type) -> str:
    """The short name under which ``cls`` is registered (for writing dataset.yaml)."""
    for n, c in _registered():
        if c is cls and "." not in n:
            return n
    raise ConfigError(f"sample type {cls.__qualname__} is not registered")


for _name in types.__all__:
    register_sample_type(getattr(types, _name), name=_name)
    _BUILTIN_NAMES.add(_name)


_JOINERS: dict[str, Any] = {}


def register_joiner(fn: Any = None, *, name: str | None = None) -> Any:
    """Allow the function ``fn`` to be named as a join's ``joiner`` in a metadataset, as
    Energon's ``joiner: {__module__: mypkg.joins, __function__: join_pair}``.

    Registers ``name`` (default: the function's name) and ``module.QualName``; fpipe calls it
    as Energon does, ``fn(primary, *parts)`` (or ``fn(**named_parts)`` for a ``join:``
    mapping), and never imports a function that a data file names. Usable as a decorator.

    Examples:
      >>> @register_joiner
      ... def join_pair(a, b):
      ...     return a
      >>> joiner_from_name("join_pair") is join_pair
      True
    """
    if fn is None:
        return lambda f: register_joiner(f, name=name)
    if not callable(fn) or isinstance(fn, type):
        raise TypeError(f"a joiner function must be a function, got {fn!r}")
    for n in {name or fn.__name__, f"{fn.__module__}.{fn.__qualname__}"}:
        old = _JOINERS.get(n)
        if old is not None and old is not fn:
            raise ConfigError(
                f"joiner name {n!r} is already registered for {old!r}; pass another name="
            )
        _JOINERS[n] = fn
    return fn


def joiner_from_name(name: str) -> Any:
    """The joiner function registered as ``name`` (``module.function`` or its short name).

    Raises:
      ConfigError: not registered (the message says how to register it).
    """
    found = _JOINERS.get(name) or imported_joiner(name)
    if found is None:
        module, _, fname = name.rpartition(".")
        raise ConfigError(
            f"unknown joiner function {name!r}; import {module or 'its module'} in your "
            f"training code before building the dataset, or register {fname} "
            "(@fpipe.samples.register_joiner) (fpipe imports no module that a data file names, "
            "and takes no function of the standard library, an installed package or fpipe)"
        )
    return found


def imported_joiner(name: str, *, sample_type: bool = False) -> Any:
    """The joiner ``module.name`` from a module of the user's code that is already imported
    (None if there is none): a plain function defined in that module, or, with
    ``sample_type``, a dataclass subclass of :class:`Sample` defined there. Nothing is
    imported, and modules of the standard library, installed packages and fpipe are skipped."""
    module_name, _, attr = name.rpartition(".")
    module = sys.modules.get(module_name)
    if module is None or not _is_user_module(module):
        return None
    obj = getattr(module, attr, None)
    if getattr(obj, "__module__", None) != module_name:
        return None  # defined elsewhere (a re-export), not the user's own
    if sample_type:
        ok = isinstance(obj, type) and issubclass(obj, Sample) and dataclasses.is_dataclass(obj)
        return obj if ok else None
    return obj if isinstance(obj, pytypes.FunctionType) else None


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # fpipe itself
    return tuple(os.path.join(os.path.realpath(r), "") for r in roots)


def _is_user_module(module: pytypes.ModuleType) -> bool:
    """Whether ``module`` is the user's code: ``__main__``, or a module loaded from a file
    outside the standard library, site-packages and fpipe (built-in modules have no file)."""
    if module.__name__ == "__main__":
        return True
    if module.__name__.split(".")[0] in sys.stdlib_module_names:
        return False
    path = getattr(module, "__file__", None)
    if not path:
        return False
    return not os.path.realpath(path).startswith(_library_roots())
