"""A limit of the process or the machine, told apart from a fault of the data.

Readers and decoders turn an ``OSError`` into a :class:`BadSampleError` (a file that cannot be
opened or read is bad input), and the loader restarts workers whose batch cannot be received.
Both are wrong when the cause is a limit: a process out of file descriptors (``EMFILE``), a
kernel whose file table is full (``ENFILE``) or that refuses memory (``ENOMEM``: address
space, memory mappings) fails on whatever sample comes next, so skipping or blaming samples,
or restarting workers, only moves the failure. :func:`resource_limit_error` finds such a cause
in an exception (or what caused it) and returns the :class:`ResourceLimitError` to raise in
its place, naming the limit, its value in this process and how to raise it.
"""

from __future__ import annotations

import errno as errnos
import os

from fpipe.core.errors import ResourceLimitError

__all__ = ["out_of_descriptors", "resource_limit_error"]

#: torch reports a descriptor it could not get in a RuntimeError's text, with no errno: its
#: DataLoader's "Too many open files. Communication with the workers is no longer possible"
#: (raised ``from None``), a shared segment's "unable to open shared memory object ...: Too
#: many open files (24)". ENFILE's text holds EMFILE's: it is looked for first.
_TEXTS = ((os.strerror(errnos.ENFILE), errnos.ENFILE), (os.strerror(errnos.EMFILE), errnos.EMFILE))


def _open_files_limit() -> str:
    try:
        import resource
    except ImportError:  # not a Unix
        return ""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    shown = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
    return f": soft limit {soft}, hard limit {shown}"


def _message(code: int, where: str) -> tuple[str, str]:
    """The limit's name and what to say about system error ``code`` met ``where``."""
    process = f"process {os.getpid()}"
    if code == errnos.EMFILE:
        return "RLIMIT_NOFILE", (
            f"{process} reached its limit of open files (RLIMIT_NOFILE{_open_files_limit()}) "
            f"{where}. Raise the limit before starting: `ulimit -n 65536` in the shell, or "
            "resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard)) at the start of your "
            "script, with the hard limit from resource.getrlimit (beyond the hard limit: "
            "`ulimit -Hn` as root, or /etc/security/limits.conf)"
        )
    if code == errnos.ENFILE:
        return "fs.file-max", (
            f"the system's table of open files is full (ENFILE) {where} in {process}: close "
            "other programs' files, or raise the system's limit (`sysctl fs.file-max`)"
        )
    return "memory", (
        f"the kernel refused memory (ENOMEM) {where} in {process}: its address space limit "
        "(RLIMIT_AS, `ulimit -v`), its number of memory mappings (`sysctl vm.max_map_count`) "
        "or the machine's memory ran out. Hold fewer batches, or raise the limit"
    )


def _code(err: BaseException) -> int | None:
    """The limit's system error number in ``err`` itself (not its causes), else None."""
    if isinstance(err, OSError) and err.errno in (errnos.EMFILE, errnos.ENFILE, errnos.ENOMEM):
        return err.errno
    if isinstance(err, RuntimeError):
        text = str(err)
        return next((code for t, code in _TEXTS if t in text), None)
    return None


def out_of_descriptors(err: BaseException) -> bool:
    """Whether ``err`` itself says no file descriptor was left (EMFILE, ENFILE)."""
    return _code(err) in (errnos.EMFILE, errnos.ENFILE)


def resource_limit_error(err: BaseException, where: str) -> ResourceLimitError | None:
    """The error to raise in place of ``err`` when it (or what caused it) is a process or
    system limit reached, else None. ``where``: what was running, for the message ("while
    ..."). A :class:`ResourceLimitError` is returned as it is."""
    seen: BaseException | None = err
    for _ in range(8):  # the cause chain, bounded
        if seen is None:
            return None
        if isinstance(seen, ResourceLimitError):
            return seen
        code = _code(seen)
        if code is not None:
            limit, text = _message(code, where)
            return ResourceLimitError(
                f"{text}. No sample is at fault: none was skipped or blamed, no worker was "
                f"replaced. [{type(seen).__name__}: {seen}]",
                limit=limit,
                errno=code,
            )
        seen = seen.__cause__ or seen.__context__
    return None
