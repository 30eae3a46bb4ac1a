"""Exception types and the named policy for bad samples.

Every fpipe error derives from :class:`FpipeError`, so callers can catch the library's errors
without catching programming errors. Messages name what is wrong and, where there is one, the
file, the sample key and what to change.
"""

from __future__ import annotations

import enum
import re

__all__ = [
    "BadSampleError",
    "ConfigError",
    "ErrorPolicy",
    "FpipeError",
    "SnapshotError",
    "SnapshotMismatchError",
    "error_text",
]


class FpipeError(Exception):
    """Base class of every error fpipe raises on purpose."""


class ConfigError(FpipeError, ValueError):
    """A pipeline or dataset configuration is invalid; raised when it is built, not on use."""


class SnapshotError(FpipeError, ValueError):
    """Snapshot bytes are truncated, corrupted, of another format version or not fpipe's."""


class SnapshotMismatchError(SnapshotError):
    """Snapshot bytes are intact but were taken from a different pipeline configuration."""


class BadSampleError(FpipeError):
    """A sample could not be read or decoded.

    Attributes:
      path: the file (shard, table or media file) the sample lives in.
      key: the sample key (``shard/member-key`` or the table row key).
      reason: what is wrong, in words.
    """

    def __init__(self, path: str, key: str, reason: str):
        self.path = str(path)
        self.key = str(key)
        self.reason = reason
        super().__init__(f"{self.path}: sample {self.key!r}: {reason}")


_OBJECT_REPR = re.compile(r"\s*<[\w.]+ object at 0x[0-9a-fA-F]+>")
_NO_FILE_NAME = re.compile(r":\s*'<none>'$")
_ERRNO = re.compile(r"^\[Errno -?\d+\]\s*")


def error_text(e: BaseException) -> str:
    """The message of a library's exception, fit for an fpipe error: object reprs such as
    ``<_io.BytesIO object at 0x...>`` (the in-memory file the library was handed), FFmpeg's
    ``'<none>'`` file name and ``[Errno N]`` codes are left out; fpipe's message names the file
    and key instead.

    >>> error_text(OSError("cannot identify image file <_io.BytesIO object at 0x7f01>"))
    'cannot identify image file'
    """
    text = _ERRNO.sub("", _NO_FILE_NAME.sub("", _OBJECT_REPR.sub("", str(e))).strip())
    return text or type(e).__name__


class ErrorPolicy(str, enum.Enum):
    """What to do with a sample that cannot be read or decoded.

    RAISE: stop with a :class:`BadSampleError` naming file, key and problem (the default).
    SKIP: leave the sample out and count it in the loader's stats. The decision depends only on
      the sample's bytes, so a resumed run skips exactly the same samples.
    """

    RAISE = "raise"
    SKIP = "skip"
