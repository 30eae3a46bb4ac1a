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
    "EmptyIndexError",
    "ErrorPolicy",
    "FpipeError",
    "MaterializeError",
    "ResourceLimitError",
    "SnapshotError",
    "SnapshotMismatchError",
    "WorkerError",
    "error_text",
]


def _rebuild(cls: type, args: tuple, attrs: dict) -> FpipeError:
    """Unpickle an fpipe error without calling ``__init__`` (whatever its signature)."""
    err = cls.__new__(cls, *args)
    err.args = args
    err.__dict__.update(attrs)
    return err


class FpipeError(Exception):
    """Base class of every error fpipe raises on purpose.

    Every fpipe error can be rebuilt from its message alone (``type(err)(str(err))``, what torch
    does when it re-raises a worker's exception) and pickles with its attributes, so it keeps
    its type across DataLoader worker processes.
    """

    def __reduce__(self):
        return _rebuild, (type(self), self.args, dict(self.__dict__))


class ConfigError(FpipeError, ValueError):
    """A pipeline or dataset configuration is invalid; raised when it is built, not on use."""


class EmptyIndexError(ConfigError):
    """Preparing a dataset indexed no sample (every one was left out, or there were none).
    ``report``: the prepare report, whose ``problems`` say why (None once pickled)."""

    def __init__(self, message: str, report=None):
        super().__init__(message)
        self.report = report

    def __reduce__(self):  # the report stays behind: the message names the reasons
        return _rebuild, (type(self), self.args, {"report": None})


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

    def __init__(self, path: str, key: str | None = None, reason: str | None = None):
        if key is None and reason is None:  # rebuilt from a message alone
            self.path, self.key, self.reason = "", "", str(path)
            super().__init__(str(path))
            return
        self.path = str(path)
        self.key = str(key)
        self.reason = str(reason)
        super().__init__(f"{self.path}: sample {self.key!r}: {reason}")


class MaterializeError(FpipeError):
    """Code run while materializing a batch (a task-encoder hook, a cooker, a reader) raised an
    exception that is not an fpipe error. It wraps the original, with where it happened.

    Attributes:
      hook: what was running (``"encode_sample"``, ``"batch"``, ``"cook"``, ``"read"``...).
      keys: the sample key(s) it was working on (one for per-sample hooks, the batch's for
        batch hooks).
      step: the recipe's step (position in the plan's stream of batches).
      position: the sample's position in the recipe (None for batch hooks).
      original: the original exception's type name (``"ValueError"``).
      traceback: the original traceback, as text (also shown as the ``__cause__`` when the
        error crossed a worker process).
    """

    def __init__(
        self,
        message: str,
        *,
        hook: str = "",
        keys: tuple[str, ...] = (),
        step: int | None = None,
        position: int | None = None,
        original: str = "",
        traceback: str = "",
    ):
        self.hook, self.keys, self.step, self.position = hook, tuple(keys), step, position
        self.original, self.traceback = original, traceback
        super().__init__(message)


class WorkerError(FpipeError):
    """A DataLoader worker process died or produced nothing within the loader's ``timeout``.

    Raised once, in the main process (with ``recover_workers=True``, the loader's default, only
    when a recipe fails this way twice without naming a sample); the workers are shut down
    first. The loader's state is
    still the one after the last batch taken, so iterating again (or ``load_state_dict`` of the
    last ``state_dict``) resumes exactly.

    Attributes:
      worker: the worker's id (0-based), or None if unknown.
      pid: its process id, or None.
      reason: ``"died"`` (with the exit code or signal in the message), ``"timed out"``, or
        ``"failed"`` (no worker died or was late, but its batch could not be received: a broken
        queue or shared-memory handle, named in the message).
      step: the step of the recipe it was materializing, or None.
      keys: the sample keys of that recipe (the first few).
      position: the position in the recipe of the sample it was reading, cooking or encoding
        (None: between samples, or in a batch hook).
    """

    def __init__(
        self,
        message: str,
        *,
        worker: int | None = None,
        pid: int | None = None,
        reason: str = "",
        step: int | None = None,
        keys: tuple[str, ...] = (),
        position: int | None = None,
    ):
        self.worker, self.pid, self.reason, self.step = worker, pid, reason, step
        self.keys, self.position = tuple(keys), position
        super().__init__(message)


class ResourceLimitError(FpipeError):
    """A limit of the process or the machine was reached while loading (too many open files,
    the kernel's file table, memory mappings or address space): no sample is at fault, so none
    is skipped or blamed and the workers are not restarted. The message names the limit, its
    current value where there is one, and how to raise it.

    Attributes:
      limit: what ran out: ``"RLIMIT_NOFILE"`` (the process's open files, ``ulimit -n``),
        ``"fs.file-max"`` (the system's open files), ``"memory"`` (the kernel refused memory:
        ``RLIMIT_AS``, ``vm.max_map_count`` or the machine's).
      errno: the system error number (``errno.EMFILE``, ``errno.ENFILE``, ``errno.ENOMEM``).
    """

    def __init__(self, message: str, *, limit: str = "", errno: int | None = None):
        self.limit, self.errno = limit, errno
        super().__init__(message)


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
