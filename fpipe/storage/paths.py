"""Where a dataset lives: object-storage URLs, brace patterns of shard names, and the
containment of the paths data files name.

Both configuration files (dataset.yaml, split.yaml, metadatasets) and the readers name shards
and datasets this way, so these helpers sit below both.

**Containment.** Data files name paths: a shard in an index or in Energon's ``.info.yaml``, a
file in Hugging Face's ``state.json``, a Parquet row's ``{bytes, path}`` struct, a table's
media column, a file a cooker asks an auxiliary store for. A dataset downloaded from elsewhere
must not make the loader read ``/etc/passwd`` or ``~/.ssh/id_rsa``, so every reader resolves
such a name with :func:`contained` before it opens anything: the name must lead to a file
inside the root (no ``..`` segment, no URL, an absolute path only inside the root, no symbolic
link leading out), else :class:`PathEscapeError`, which each reader turns into its own refusal
(a :class:`~fpipe.core.errors.BadSampleError` for a sample's file, a problem counted by
``fpipe prepare``, a ``ConfigError`` for an index). Paths a user writes (a metadataset's
``path:``, ``--root``) are not data and are not confined.

A folder a data file names (a prepared table's media folder, recorded from ``--root`` in its
``info.yaml``) may lie outside the dataset only where the user allows it when opening:
:func:`contained_or_allowed` accepts it inside the root, or inside one of the folders the user
named (``media_root=``); what decides is never derived from the data alone.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any

from fpipe.core.errors import ConfigError

__all__ = [
    "PathEscapeError",
    "SCHEMES",
    "allowed_folders",
    "contained",
    "contained_or_allowed",
    "escape_reason",
    "expand_braces",
    "is_url",
    "join_url",
    "split_url",
]

#: ``msc`` is a multi-storage-client profile (``msc://PROFILE/path``, see :mod:`fpipe.storage.msc`)
SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "azure", "file", "msc")
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


class PathEscapeError(ConfigError):
    """A path a data file names leads out of its root (see :func:`contained`).

    Attributes:
      name: the path as the data file names it.
      reason: why it is refused, in words.
    """

    def __init__(self, message: str, name: str = "", reason: str = ""):
        super().__init__(message)
        self.name, self.reason = str(name), reason or message


@functools.lru_cache(maxsize=256)
def _real_root(root: str) -> str:
    """``os.path.realpath(root)``, once per root and process (a third of a check's cost)."""
    return os.path.realpath(root)


#: ``file://``, ``s3://``, ``file:/x``, ``C:\\x``, ``C:x``: a URL or a drive, never a path
#: relative to a root
_SCHEME_RE = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*:[/\\]|[A-Za-z]:)")


def escape_reason(
    root: str | os.PathLike, name: Any, folder: str = "the dataset folder"
) -> str | None:
    """Why ``name`` does not lead inside ``root``, or None when it does: a relative path
    without ``..`` segments (``\\`` counts as a separator), or an absolute one inside ``root``,
    whose real path (symbolic links resolved) lies inside the real path of ``root``. Under a
    URL root the test is on the text alone (no ``..``, not absolute). Nothing is opened; a
    missing file is not an escape (its read fails on its own).

    >>> escape_reason("/data/ds", "img/0.jpg") is None
    True
    >>> escape_reason("/data/ds", "../secret.jpg")
    "a '..' segment"
    """
    if not isinstance(name, str) or not name:
        return f"not a path (got {name!r})"
    if "\0" in name:
        return "a NUL byte in it"
    if _SCHEME_RE.match(name):
        return "a URL (or a drive), not a relative path"
    parts = name.replace("\\", "/").split("/")
    if ".." in parts:
        return "a '..' segment"
    absolute = parts[0] == "" or os.path.isabs(name)
    if is_url(root):
        return f"an absolute path, not one under {root}" if absolute else None
    base = _real_root(os.fspath(root))
    real = _real_path(root, base, name, absolute)
    if real == base or real.startswith(base.rstrip(os.sep) + os.sep):
        return None
    if absolute:
        return f"an absolute path outside {base}"
    return f"it resolves to {real}, outside {folder} {base} (a symbolic link leads out)"


def _real_path(root: str | os.PathLike, base: str, name: str, absolute: bool) -> str:
    """``os.path.realpath(os.path.join(root, name))`` for a ``name`` without ``..``, given
    ``base``, the real path of ``root``: an ``lstat`` per part of ``name`` (one for a shard
    of a flat folder), not per part of the whole path, unless a part is a symbolic link.
    Checking every shard of a 1,000-shard dataset at each open cost 4-5 ``lstat`` each."""
    if absolute or os.altsep:
        return os.path.realpath(os.path.join(root, name))
    real = base
    for part in name.split(os.sep):
        if part in ("", "."):
            continue
        real = os.path.join(real, part)
        if os.path.islink(real):
            return os.path.realpath(os.path.join(root, name))
    return real


def contained(
    root: str | os.PathLike,
    name: Any,
    *,
    where: str = "",
    what: str = "path",
    folder: str = "the dataset folder",
) -> str:
    """The path (or URL) of ``name`` under ``root``, to be opened; :class:`PathEscapeError`
    (``"<where>: <what> <name> leaves <folder>: <why>"``) when it leads out of ``root`` (see
    :func:`escape_reason`). Every reader of a path a data file names goes through here
    before it opens the file.

    >>> contained("/data/ds", "img/0.jpg")
    '/data/ds/img/0.jpg'
    """
    why = escape_reason(root, name, folder)
    if why is not None:
        reason = f"{what} {name!r} leaves {folder}: {why}"
        raise PathEscapeError(f"{where}: {reason}" if where else reason, name, reason)
    if is_url(root):
        return join_url(str(root), name)
    return os.path.join(os.fspath(root), name)


def allowed_folders(folders: Any) -> tuple[str, ...]:
    """The folders a user allows (None, one path, or a list of them) as absolute paths, so
    they mean the same in a worker and in a pickled dataset's arguments."""
    if folders is None:
        return ()
    items = [folders] if isinstance(folders, (str, os.PathLike)) else list(folders)
    for f in items:
        if not isinstance(f, (str, os.PathLike)) or is_url(f):
            raise ConfigError(f"an allowed folder must be a local folder, got {f!r}")
    return tuple(os.path.abspath(os.fspath(f)) for f in items)


def contained_or_allowed(
    root: str | os.PathLike,
    name: Any,
    allowed: tuple[str, ...] = (),
    *,
    where: str = "",
    what: str = "folder",
    folder: str = "the dataset folder",
) -> str:
    """The path of ``name`` under the local folder ``root`` when it stays inside (as
    :func:`contained`); else its real path when that lies inside one of ``allowed``, folders
    the user named (:func:`allowed_folders`). Otherwise :class:`PathEscapeError`:
    ``"<where>: the <what> <name> leads out of <folder>: <why>"`` (and that no allowed folder
    holds it). A URL, a drive or a name with a ``\\`` is never allowed."""
    why = escape_reason(root, name, folder)
    if why is None:
        return os.path.join(os.fspath(root), name)
    if isinstance(name, str) and not set(name) & {"\0", "\\"} and not _SCHEME_RE.match(name):
        real = os.path.realpath(os.path.join(root, name))
        if any(escape_reason(a, real) is None for a in allowed):
            return real
        held = f", not inside the allowed folders {list(allowed)}" if allowed else ""
        why += f" (it leads to {real}{held})"
    reason = f"the {what} {name!r} leads out of {folder}: {why}"
    raise PathEscapeError(f"{where}: {reason}" if where else reason, name, reason)
