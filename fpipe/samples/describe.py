"""Short descriptions of values for reprs and printouts: shapes and dtypes, never the data.

>>> import numpy as np
>>> describe(np.zeros((8, 3), dtype=np.uint8))
'uint8[8, 3]'
>>> describe(["a red fox", "a cat"])
"list[2] of str ('a red fox', ...)"
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["concise_repr", "describe", "describe_fields"]

_TEXT = 40


def describe(value: Any) -> str:
    """``dtype[shape]`` for arrays and tensors, a cut repr for strings, ``list[n] of T`` for
    lists (with the first string when they hold strings), recursively for dicts."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"{str(dtype).removeprefix('torch.')}{list(shape)}"
    if isinstance(value, str):
        return repr(value if len(value) <= _TEXT else value[:_TEXT] + "…")
    if isinstance(value, (bytes, bytearray)):
        return f"bytes[{len(value)}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {describe(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        kind = "list" if isinstance(value, list) else "tuple"
        types = sorted({type(v).__name__ for v in value})
        if not value:
            return f"{kind}[0]"
        first = f" ({describe(value[0])}, ...)" if isinstance(value[0], str) else ""
        inner = types[0] if len(types) == 1 else " | ".join(types)
        if len(types) == 1 and getattr(value[0], "shape", None) is not None:
            inner = describe(value[0])
        return f"{kind}[{len(value)}] of {inner}{first}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return type(value).__name__
    text = repr(value)
    return text if len(text) <= _TEXT else text[:_TEXT] + "…"


def describe_fields(obj: Any) -> list[tuple[str, str]]:
    """``(field name, description)`` for every init field of a dataclass instance."""
    return [(f.name, describe(getattr(obj, f.name))) for f in dataclasses.fields(obj) if f.init]


def concise_repr(obj: Any) -> str:
    """``Name(field=description, ...)`` of a sample or batch: its key(s) first, then every
    field's shape and dtype (or a cut text); restore keys, sources and empty subflavors left out."""
    parts = []
    keys = getattr(obj, "__key__", None)
    if isinstance(keys, list):
        shown = ", ".join(repr(k) for k in keys[:2]) + (", ..." if len(keys) > 2 else "")
        parts.append(f"{len(keys)} samples, __key__=[{shown}]")
    elif keys:
        parts.append(f"__key__={keys!r}")
    for name, text in describe_fields(obj):
        if name in ("__key__", "__restore_key__", "__sources__") or (
            name == "__subflavors__" and not any(getattr(obj, name) or ())
        ):
            continue
        parts.append(f"{name}={text}")
    return f"{type(obj).__name__}({', '.join(parts)})"
