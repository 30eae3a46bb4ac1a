"""What opening a prepared folder parses and checks, done once per process while its files are
unchanged.

Opening a folder prepared by ``fpipe prepare`` parses ``info.yaml`` (an index of fewer than 256
shards, or one prepared before that limit, lists every shard there: four lines each),
``dataset.yaml`` and ``split.yaml`` (every shard's name again), and checks that every shard
path stays inside the folder: about 0.1 s of one core for 1,000 shards. The main process does
it to plan; then each thread worker opened the folder again, so did each worker process (a
forked worker inherits what the main process parsed, but reparsed it), and so did every
reopen of a blend's dataset (a process keeps 64 open). Here the parsed values are kept per
process with the bytes they were parsed from: a file whose bytes changed (a folder prepared
again, a config edited) is parsed again. The values are frozen records, shared read-only.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, TypeVar

from fpipe.core.fork_locks import fork_safe_lock

__all__ = ["checked_once", "clear", "parsed"]

T = TypeVar("T")

#: Files kept parsed per process (a blend's datasets have three each).
MAX_FILES = 1024

_parsed: collections.OrderedDict[tuple, Any] = collections.OrderedDict()
#: (identity of a parsed value, what was checked) -> the value (kept alive: its id stays its own)
_checked: collections.OrderedDict[tuple, Any] = collections.OrderedDict()
_lock = fork_safe_lock(globals(), "_lock")


def parsed(
    path: str | os.PathLike,
    read: Callable[[Path, bytes | None], T],
    keep: Callable[[T], bool] | None = None,
) -> T:
    """``read(path, data)`` (``data``: the file's bytes, read here; None where it cannot be
    read), or what it returned before in this process for a file of the same path and the
    same bytes (``read``: a function defined once, not a new lambda per call).
    ``keep(value)``: whether to keep a value (None: always); one that holds more than the
    file's bytes say (arrays of files beside it) must not be kept.

    The bytes are compared, not the file's modification time: a file rewritten within the
    timestamp's granularity (milliseconds) is parsed again too. Reading them costs microseconds;
    parsing was the cost. Errors are not kept: a file that fails to parse fails again."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError:
        return read(path, None)  # missing or unreadable: the reader says so (or its default)
    key = (str(path), read)
    with _lock:
        hit = _parsed.get(key)
        if hit is not None and hit[0] == data:
            _parsed.move_to_end(key)
            return hit[1]
    value = read(path, data)  # the bytes read above: not read again
    if keep is not None and not keep(value):
        return value
    with _lock:
        _parsed[key] = (data, value)
        _parsed.move_to_end(key)
        while len(_parsed) > MAX_FILES:
            _parsed.popitem(last=False)
    return value


def checked_once(value: Any, what: Hashable, check: Callable[[], None]) -> None:
    """``check()`` (which checks ``value`` for ``what``), unless it passed before in this
    process for this very value (one :func:`parsed` returned)."""
    key = (id(value), what)
    with _lock:
        if _checked.get(key) is value:
            _checked.move_to_end(key)
            return
    check()  # raises: nothing is recorded
    with _lock:
        _checked[key] = value
        while len(_checked) > MAX_FILES:
            _checked.popitem(last=False)


def clear() -> None:
    """Forget everything parsed and checked (tests), and the prepared records of parsed YAML
    read (:mod:`fpipe.storage.config.yaml_record`)."""
    from fpipe.storage.config import yaml_record

    with _lock:
        _parsed.clear()
        _checked.clear()
    yaml_record.clear()
