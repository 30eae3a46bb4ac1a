"""What fpipe wraps task-encoder hooks in: objects of an importable class, not closures.

A wrapper written as a closure (``def hook(...)`` inside a decorator) is a local function,
which no serializer can name: cloudpickle copies it by value, with the globals of its module
that it uses (fpipe's context variables, a lock), which cannot be copied. That happens when
the class the wrapper was set on is itself copied by value, which is what Ray does with a class
defined in the training script (``__main__``): a script's task encoder with an
``encode_sample`` would not reach Ray actors (``worker_mode="ray"``). A :class:`HookWrapper` is
serialized as the name of its class and what it holds (the user's function), like any object.
"""

from __future__ import annotations

import functools
import types
from typing import Any

__all__ = ["HookWrapper"]


class HookWrapper:
    """Base of a wrapper around the hook ``fn`` that binds like a function (as a method when
    set on a class); subclasses define ``__call__`` and keep their settings as attributes."""

    def __init__(self, fn: Any) -> None:
        functools.update_wrapper(self, fn)  # name, docstring, __wrapped__, fn's own marks
        self.fn = fn

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else types.MethodType(self, obj)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {getattr(self.fn, '__qualname__', self.fn)!r}>"
