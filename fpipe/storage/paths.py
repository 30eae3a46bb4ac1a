"""Where a dataset lives: object-storage URLs and brace patterns of shard names.

Both configuration files (dataset.yaml, split.yaml, metadatasets) and the readers name shards
and datasets this way, so these helpers sit below both.
"""

from __future__ import annotations

import re
from typing import Any

from fpipe.core.errors import ConfigError

__all__ = ["SCHEMES", "expand_braces", "is_url", "join_url", "split_url"]

SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "azure", "file")
_RANGE_RE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?$")


def is_url(path: Any) -> bool:
    """Whether ``path`` is an object-storage URL (``s3://bucket/prefix`` and the like)."""
    if not isinstance(path, str) or "://" not in path:
        return False
    return path.split("://", 1)[0].lower() in SCHEMES


def split_url(url: str) -> tuple[str, str]:
    """``(scheme://bucket, prefix)``: ``"s3://b/data/x"`` -> ``("s3://b", "data/x")``."""
    scheme, rest = url.split("://", 1)
    if scheme == "file":
        return "file:///", rest.lstrip("/")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ConfigError(f"{url}: no bucket in the URL")
    return f"{scheme}://{bucket}", prefix.strip("/")


def join_url(base: str, *names: str) -> str:
    """``base/name/...`` with single slashes."""
    out = base.rstrip("/")
    for n in names:
        out += "/" + n.strip("/")
    return out


def expand_braces(pattern: str) -> list[str]:
    """Expand ``{a,b}`` alternatives and ``{000..099}`` ranges (zero padding kept), nested.

    >>> expand_braces("s-{00..02}.tar")
    ['s-00.tar', 's-01.tar', 's-02.tar']
    """
    start = pattern.find("{")
    if start < 0:
        return [pattern]
    depth = 0
    for end in range(start, len(pattern)):
        depth += {"{": 1, "}": -1}.get(pattern[end], 0)
        if depth == 0:
            break
    else:
        return [pattern]
    body, head, tail = pattern[start + 1 : end], pattern[:start], pattern[end + 1 :]
    m = _RANGE_RE.match(body)
    if m:
        a, b = int(m.group(1)), int(m.group(2))
        step = abs(int(m.group(3) or 1)) or 1
        bounds = (m.group(1).lstrip("-"), m.group(2).lstrip("-"))
        padded = any(len(x) > 1 and x.startswith("0") for x in bounds)
        width = max(len(m.group(1)), len(m.group(2))) if padded else 0
        values = range(a, b + 1, step) if b >= a else range(a, b - 1, -step)
        options = [str(v).zfill(width) for v in values]
    else:
        options, depth, cur = [], 0, ""
        for ch in body:
            if ch == "," and depth == 0:
                options.append(cur)
                cur = ""
                continue
            depth += {"{": 1, "}": -1}.get(ch, 0)
            cur += ch
        options.append(cur)
    return [r for opt in options for r in expand_braces(head + opt + tail)]
