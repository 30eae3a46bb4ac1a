"""The YAML files of an index folder, parsed once by ``fpipe prepare`` and recorded in msgpack.

Opening a prepared folder parses its ``info.yaml``, ``dataset.yaml`` and ``split.yaml``: about
0.7 ms of one core each with libyaml (PyYAML builds every node in Python), so planning a blend
of 100 datasets spent 0.2 s in YAML before its first batch. ``fpipe prepare`` therefore writes
``parsed-yaml.msgpack`` beside them: for each YAML file of the folder, a digest of its bytes
and the value ``yaml.safe_load`` gave for them, in msgpack (microseconds to decode).

:func:`load_yaml_file` returns the recorded value only for a file whose bytes have that very
digest; a file edited since (a ``split.yaml`` changed by hand), one the record lacks (written
by another tool or an older fpipe) and a record that is missing, unreadable or malformed all
mean: parse the YAML, as without a record. The YAML stays what the folder says, the record
only saves parsing it. The value is plain data (mappings, lists, strings, numbers) of the kind
``safe_load`` returns, and the callers check it exactly as they check parsed YAML, so a record
that lies is refused as the same YAML would be (data files are untrusted either way).
"""

from __future__ import annotations

import collections
import hashlib
import os
from pathlib import Path
from typing import Any

import msgspec
import yaml

from fpipe.core.fork_locks import fork_safe_lock
from fpipe.core.temp_names import beside
from fpipe.storage.config.safe_yaml import safe_load

__all__ = ["RECORD_NAME", "clear", "load_yaml_file", "write_yaml_record"]

#: The record's file name, in the folder of the YAML files it records.
RECORD_NAME = "parsed-yaml.msgpack"
_FORMAT = 1


class _Entry(msgspec.Struct, frozen=True, array_like=True):
    digest: bytes  #: :func:`_digest` of the YAML file's bytes
    value: msgspec.Raw  #: msgpack of ``safe_load`` of them, decoded only when used


class _Record(msgspec.Struct, frozen=True):
    format: int
    files: dict[str, _Entry]


_MISSING = object()
_DECODER = msgspec.msgpack.Decoder(_Record)


def _no_ext(code: int, data: memoryview) -> Any:
    raise ValueError("a YAML value has no msgpack extension types")


#: values as YAML gives them: an extension type (which no YAML value encodes to) is refused
_VALUES = msgspec.msgpack.Decoder(ext_hook=_no_ext)

#: Records read in this process, by folder (the YAML files of a blend's datasets are read once
#: to plan and again by each worker that opens them). An entry is used only for a file of the
#: bytes it records, so an entry of a record rewritten since is still right for those bytes;
#: a file the kept record does not match has its folder's record read again.
MAX_RECORDS = 1024
_records: collections.OrderedDict[str, dict[str, _Entry]] = collections.OrderedDict()
_lock = fork_safe_lock(globals(), "_lock")


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def load_yaml_file(path: str | os.PathLike, data: bytes | None = None) -> Any:
    """``safe_load`` of the UTF-8 file at ``path``, or the value its folder's record holds for
    the file's very bytes (see the module's docstring); ``data``: its bytes, read already. An
    unreadable file raises :class:`OSError`, one that is not YAML :class:`yaml.YAMLError`, as
    parsing it would."""
    path = Path(path)
    if data is None:
        data = path.read_bytes()
    value = _recorded(path, data)
    if value is _MISSING:
        return safe_load(data.decode("utf-8"))
    return value


def _recorded(path: Path, data: bytes) -> Any:
    """The value recorded for ``path`` holding ``data``, or ``_MISSING``."""
    digest = _digest(data)
    folder = str(path.parent)
    with _lock:
        files = _records.get(folder)
    if files is None or _entry(files, path.name, digest) is None:
        files = _read_record(path.parent)  # none kept, or rewritten since: read it again
        with _lock:
            _records[folder] = files
            _records.move_to_end(folder)
            while len(_records) > MAX_RECORDS:
                _records.popitem(last=False)
    entry = _entry(files, path.name, digest)
    if entry is None:
        return _MISSING
    try:
        return _VALUES.decode(entry.value)  # a new value per call: callers own it
    except (msgspec.MsgspecError, ValueError):
        return _MISSING


def _entry(files: dict[str, _Entry], name: str, digest: bytes) -> _Entry | None:
    entry = files.get(name)
    return entry if entry is not None and entry.digest == digest else None


def _read_record(folder: Path) -> dict[str, _Entry]:
    """The entries of ``folder``'s record; none where it is missing or not a record of this
    format (the YAML files are parsed instead)."""
    try:
        record = _DECODER.decode((folder / RECORD_NAME).read_bytes())
    except (OSError, msgspec.MsgspecError):
        return {}
    return record.files if record.format == _FORMAT else {}


def write_yaml_record(folder: str | os.PathLike) -> Path | None:
    """Record every ``*.yaml`` file directly in ``folder`` (an index folder, once its YAML
    files are written) in ``folder/parsed-yaml.msgpack``, replacing any record there; a file
    whose value msgpack cannot carry exactly (a YAML date, a NaN) is left out: it is parsed
    when read. Returns the record's path, or None when there was nothing to record (a
    previous record is removed)."""
    folder = Path(folder)
    files: dict[str, _Entry] = {}
    for f in sorted(folder.glob("*.yaml")):
        data = f.read_bytes()
        try:
            value = safe_load(data.decode("utf-8"))
            encoded = msgspec.msgpack.encode(value)
            kept = _same(msgspec.msgpack.decode(encoded), value)
        except (yaml.YAMLError, ValueError, TypeError, msgspec.MsgspecError, OverflowError):
            kept = False  # not YAML, not UTF-8 (a ValueError), or not msgpack: parsed when read
        if kept:
            files[f.name] = _Entry(_digest(data), msgspec.Raw(encoded))
    out = folder / RECORD_NAME
    if not files:
        out.unlink(missing_ok=True)
        return None
    tmp = beside(out)
    tmp.write_bytes(msgspec.msgpack.encode(_Record(_FORMAT, files)))
    tmp.replace(out)
    return out


def _same(a: Any, b: Any) -> bool:
    """``a == b`` with the same types throughout (``1``, ``1.0`` and ``True`` differ)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        pairs = zip(a.items(), b.items())
        return len(a) == len(b) and all(_same(x, y) for p, q in pairs for x, y in zip(p, q))
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def clear() -> None:
    """Forget the records read (tests; :func:`fpipe.storage.read.parsed_files.clear`)."""
    with _lock:
        _records.clear()
