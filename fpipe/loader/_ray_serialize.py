"""Sending the materializer to Ray actors, and naming what in it cannot be sent.

Ray serializes what it sends with its cloudpickle, in memory, within one job (fpipe itself
pickles nothing, see docs/design/no_pickle.md). An importable class travels by name; a class
of the training script (``__main__``) travels by value: its methods' code, and every global of
the script and closure variable they use. When one of those cannot be serialized (a lock, an
open file, a client connection), Ray's ``TypeError`` names the materializer, not the object;
:func:`put_materializer` finds the object and says how to keep it out of what is sent.
"""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any

from fpipe.core.errors import ConfigError

__all__ = ["find_unsendable", "put_materializer"]

#: How deep :func:`find_unsendable` looks: materializer, task encoder, its class, a hook, a
#: wrapper, the function, what the function uses (and a few levels more for nested objects).
DEPTH = 10
#: Attributes of a class that serializers rebuild, not copy.
_CLASS_SKIP = frozenset({"__dict__", "__weakref__", "__module__", "__doc__", "__qualname__"})


def put_materializer(ray: Any, materializer: Any) -> Any:
    """``ray.put(materializer)``; a ConfigError naming the object Ray cannot serialize."""
    try:
        return ray.put(materializer)
    except TypeError as err:
        try:
            found = find_unsendable(materializer, ray.cloudpickle.dumps)
        except Exception:  # noqa: BLE001 - looking for the culprit must not hide the error
            found = None
        if found is None:  # nothing in the materializer to name: Ray's own message
            raise
        path, obj, cause = found
        raise ConfigError(
            f'worker_mode="ray" sends the dataset and its task encoder to the Ray actors, and '
            f"{_where(path)} is {_what(obj)}, which Ray cannot serialize ({cause}). "
            "Ray sends a class defined in the training script by value, with the globals and "
            "closure variables its methods use. Create such an object where it is used (in the "
            "hook, or on first use, so that each actor makes its own), or define the task "
            "encoder in a module the actors can import (Ray then sends the class by name), or "
            'use worker_mode="process" or "thread".'
        ) from err


def find_unsendable(
    obj: Any, dumps: Any, depth: int = DEPTH
) -> tuple[list[str], Any, Exception] | None:
    """(path of names from ``obj``, the object, dumps's error) of the innermost part of
    ``obj`` that ``dumps`` refuses, or None when ``dumps(obj)`` succeeds. Only what fails is
    looked into, so this costs a few serializations of the failing branch."""
    seen: set[int] = set()

    def visit(part: Any, path: list[str], left: int):
        if id(part) in seen:
            return None
        seen.add(id(part))
        try:
            dumps(part)
            return None
        except Exception as err:  # noqa: BLE001 - whatever the serializer refuses
            error = err
        if left > 0:
            for name, inner in _parts(part):
                found = visit(inner, path if name is None else [*path, name], left - 1)
                if found is not None:
                    return found
        return path, part, error

    return visit(obj, [], depth)


def _parts(obj: Any):
    """(name, value) of what a serializer sends along with ``obj``; the function a wrapper
    wraps comes first, with no name (a user knows their hook, not fpipe's wrapper of it)."""
    wrapped = getattr(obj, "__wrapped__", None) if not isinstance(obj, type) else None
    if wrapped is not None:
        yield None, wrapped
    if isinstance(obj, staticmethod | classmethod):
        yield None, obj.__func__
    elif isinstance(obj, property):
        yield from ((None, f) for f in (obj.fget, obj.fset, obj.fdel) if f is not None)
    elif isinstance(obj, functools.partial):
        yield None, obj.func
        yield from _parts(obj.args)
        yield from obj.keywords.items()
    elif isinstance(obj, types.MethodType):
        yield obj.__func__.__name__, obj.__func__
        yield "self", obj.__self__
    elif isinstance(obj, types.FunctionType):
        yield from _function_parts(obj)
    elif isinstance(obj, type):
        for base in obj.__bases__:
            yield f"class {base.__name__}", base
        for name, value in vars(obj).items():
            if name not in _CLASS_SKIP:
                yield name, value
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield f"[{key!r}]", value
    elif isinstance(obj, list | tuple | set | frozenset):
        for i, value in enumerate(obj):
            yield f"[{i}]", value
    else:
        yield f"class {type(obj).__name__}", type(obj)
        yield from _state(obj).items()


def _function_parts(fn: types.FunctionType):
    code = fn.__code__
    for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=False):
        try:
            yield name, cell.cell_contents
        except ValueError:  # an empty cell
            continue
    for name in sorted(_global_names(code)):
        if name in fn.__globals__:
            yield f"{name} (a global of {fn.__module__})", fn.__globals__[name]
    yield from vars(fn).items()  # __wrapped__, marks
    for i, default in enumerate(fn.__defaults__ or ()):
        yield f"default {i}", default
    yield from (fn.__kwdefaults__ or {}).items()


def _global_names(code: types.CodeType) -> set[str]:
    """Names ``code`` (and the functions and classes it defines) may read as globals."""
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _global_names(const)
    return names


def _state(obj: Any) -> dict:
    """What pickling ``obj`` sends of it: its ``__getstate__`` (or ``__dict__`` and slots)."""
    try:
        state = obj.__getstate__()
    except Exception:  # noqa: BLE001 - not an object with a state
        state = getattr(obj, "__dict__", None)
    if isinstance(state, tuple) and len(state) == 2:  # (__dict__, slots)
        merged: dict = {}
        for part in state:
            if isinstance(part, dict):
                merged.update(part)
        return merged
    return state if isinstance(state, dict) else {}


def _where(path: list[str]) -> str:
    return f"what it refers to as {' -> '.join(path)!r}" if path else "the materializer"


def _what(obj: Any) -> str:
    kind = type(obj)
    if isinstance(obj, type):
        return f"the class {obj.__module__}.{obj.__qualname__}"
    return f"a {kind.__module__}.{kind.__qualname__}"
