"""Energon's ``EPath`` on fpipe: a path that is absolute and normalized when it is made.

Local paths are complete (open, read, write, glob, walk, ...). Energon's object-storage forms
(``msc://profile/...``, ``s3://...``) are kept as their URL, can be joined, compared and passed
to :func:`fpipe.energon.get_train_dataset` (fpipe reads datasets on object storage itself); file
operations on them raise a :class:`~fpipe.core.errors.ConfigError` naming that way. A
``dss://NAME@VERSION/path`` (NVIDIA's dataset-service cache) is resolved where it is made, as
Energon resolves it: ``$NVDATASET_CACHE_DIR/NAME/VERSION/path`` (refused when that is unset).

An ``EPath`` equals the string of the same absolute path (``fpipe.SourceInfo.dataset_path`` is
a string), and hashes as that string.

Energon users import it as ``megatron.energon.epathlib.EPath`` or
``megatron.energon.epathlib.epath.EPath``; both paths exist under ``fpipe.energon`` too.
``NVDATASET_CACHE_DIR`` is, as in Energon, the cache folder named by the environment variable
when this module was imported (None: unset); ``dss://`` paths are resolved through the
environment variable itself, so set that to change the cache.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any

from fpipe.core.errors import ConfigError

__all__ = ["DEFAULT_PROFILE_NAME", "EPath", "NVDATASET_CACHE_DIR"]

#: The profile of local paths (Energon's name).
DEFAULT_PROFILE_NAME = "default"


def _normalized(path: str) -> str:
    """``path`` made absolute (from the working folder) with ``.`` and ``..`` removed as text,
    without following links (Energon's resolution)."""
    return os.path.normpath(os.path.join(os.getcwd(), path)).replace("//", "/")


class EPath:
    """A local path, or an object-storage URL (see the module docstring)."""

    __slots__ = ("_path", "_url")

    def __init__(self, initial_path: str | os.PathLike | EPath):
        if isinstance(initial_path, EPath):
            self._path, self._url = initial_path._path, initial_path._url
            return
        text = os.fspath(initial_path)
        if not isinstance(text, str):
            text = os.fsdecode(text)
        if text.startswith("file://"):
            text = text[len("file://") :]
        if "://" in text:
            scheme, rest = text.split("://", 1)
            if scheme == "dss":  # $NVDATASET_CACHE_DIR/NAME/VERSION/...: a folder or a URL
                from fpipe.storage.msc import resolve_dss

                resolved = EPath(resolve_dss(text))
                self._path, self._url = resolved._path, resolved._url
                return
            self._url, self._path = scheme, "/" + os.path.normpath("/" + rest).lstrip("/")
        else:
            self._url, self._path = None, _normalized(text)

    # -- what it names ----------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The path (local) or the URL it was made from."""
        if self._url is None:
            return self._path
        return f"{self._url}:/{self._path}"

    @property
    def profile(self) -> str:
        """``default`` for local paths, else the URL's first part (Energon's MSC profile)."""
        return DEFAULT_PROFILE_NAME if self._url is None else self._path.split("/")[1]

    @property
    def name(self) -> str:
        return PurePosixPath(self._path).name

    @property
    def parent(self) -> EPath:
        return self._with(str(PurePosixPath(self._path).parent))

    @property
    def display_name(self) -> str:
        return self.name

    def is_local(self) -> bool:
        return self._url is None

    def local_path(self) -> Path:
        """The ``pathlib.Path`` of a local path."""
        return Path(self._local())

    def with_suffix(self, suffix: str) -> EPath:
        return self._with(str(PurePosixPath(self._path).with_suffix(suffix)))

    def relative_to(self, other: EPath) -> str:
        return str(PurePosixPath(self._path).relative_to(EPath(other)._path))

    # -- the file system --------------------------------------------------------------------

    def open(
        self, mode: str = "r", block_size: int | None = None, prefetch_file: bool = False
    ) -> IO[Any]:
        """The file, opened (``r``, ``rb``, ``w``, ``wb``); writing creates missing folders."""
        del block_size, prefetch_file
        path = self._local()
        if "w" in mode or "a" in mode:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        return open(path, mode)  # noqa: SIM115 - returned to the caller, as pathlib's open

    def read_text(self) -> str:
        with self.open("r") as f:
            return f.read()

    def read_bytes(self) -> bytes:
        with self.open("rb") as f:
            return f.read()

    def write_text(self, text: str) -> None:
        with self.open("w") as f:
            f.write(text)

    def write_bytes(self, data: bytes) -> None:
        with self.open("wb") as f:
            f.write(data)

    def is_file(self) -> bool:
        return self._url is None and os.path.isfile(self._path)

    def is_dir(self) -> bool:
        return self._url is None and os.path.isdir(self._path)

    def exists(self) -> bool:
        return self._url is None and os.path.exists(self._path)

    def size(self) -> int:
        return os.path.getsize(self._local())

    def stat(self) -> os.stat_result:
        return os.stat(self._local())

    def mkdir(self, exist_ok: bool = True, parents: bool = False) -> None:
        Path(self._local()).mkdir(exist_ok=exist_ok, parents=parents)

    def unlink(self) -> None:
        os.unlink(self._local())

    def walk(self) -> Iterator[EPath]:
        """Every file below this folder (following links), folders left out."""
        root = self._local()
        for folder, _dirs, files in os.walk(root, followlinks=True):
            for name in files:
                yield EPath(os.path.join(folder, name))

    def glob(self, pattern: str) -> Iterator[EPath]:
        """The files below this folder whose path relative to it matches ``pattern``
        (``**`` spans folders)."""
        root = self._local()
        regex = _glob_regex(pattern)
        for path in self.walk():
            rel = os.path.relpath(path._path, root)
            if regex.fullmatch(rel):
                yield path

    def copy(self, target: EPath) -> None:
        """Copy this file, or every file below this folder, to ``target``."""
        target = EPath(target)
        if self.is_file():
            target.write_bytes(self.read_bytes())
            return
        for path in self.walk():
            path.copy(target / path.relative_to(self))

    def move(self, target: EPath) -> None:
        self.copy(target)
        self.unlink()

    # -- operators --------------------------------------------------------------------------

    def __truediv__(self, other: str | os.PathLike | EPath) -> EPath:
        if isinstance(other, EPath):
            return other  # always absolute, as in Energon
        text = os.fspath(other)
        if text.startswith("/") or "://" in text:
            return EPath(text)
        return self._with(os.path.normpath(f"{self._path}/{text}"))

    def __fspath__(self) -> str:
        return self._local()

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"EPath({self.url!r})"

    def __hash__(self) -> int:
        return hash(self.url)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EPath):
            return self.url == other.url
        if isinstance(other, (str, Path)):
            return self.url == str(other)
        return NotImplemented

    def __lt__(self, other: EPath) -> bool:
        return self.url < EPath(other).url

    def __getstate__(self) -> dict:
        return {"path": self._path, "url": self._url}

    def __setstate__(self, state: dict) -> None:
        self._path, self._url = state["path"], state["url"]

    # -- helpers ----------------------------------------------------------------------------

    def _with(self, path: str) -> EPath:
        out = EPath.__new__(EPath)
        out._path, out._url = path, self._url
        return out

    def _local(self) -> str:
        if self._url is not None:
            raise ConfigError(
                f"EPath({self.url!r}): fpipe's EPath reads and writes local files only; pass "
                "object-storage URLs to get_train_dataset / get_val_dataset (or "
                "fpipe.open_dataset), which read them"
            )
        return self._path


def path_text(path: str | os.PathLike | EPath) -> str:
    """The string fpipe reads ``path`` as: an ``EPath``'s URL, or its local path (an
    ``EPath`` of a URL has no ``os.fspath``, which names local files only); any other path
    as ``os.fspath`` gives it. Every ``fpipe.energon`` function taking a dataset or
    metadataset path passes it through this, so Energon's ``EPath`` objects work there."""
    if isinstance(path, EPath):
        return path.url
    return os.fsdecode(path)


#: The dataset-service cache folder at import (Energon's module variable; see the docstring).
NVDATASET_CACHE_DIR: EPath | None = (
    EPath(os.environ["NVDATASET_CACHE_DIR"]) if os.environ.get("NVDATASET_CACHE_DIR") else None
)


def _glob_regex(pattern: str) -> re.Pattern:
    """A regular expression for a relative glob pattern: ``*`` and ``?`` within one name,
    ``[...]`` a character class, ``**/`` any folders (none included), a final ``**`` anything."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))
