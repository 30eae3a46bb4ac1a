"""Fingerprints of a pipeline's configuration, and a readable diff between two of them.

A pipeline is described by its parts, ``(name, config)`` pairs in data-flow order. Each part is
summarized as ``[name, config type name, [short hash of each field]]``; the fingerprint is a
hash of the canonical msgpack encoding of all of it. Fields a config declares ``compatible``
(rank, world size...) are left out, so changing them does not refuse a restore.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

import msgspec

from fpipe.core.records import Config

__all__ = [
    "FOLD_FROM",
    "canonical",
    "diff_parts",
    "fingerprint",
    "fold_parts",
    "part_digest",
    "record_fields",
    "step_pattern",
]

#: Parts of one step pattern and config type are summarized as one digest entry from this many
#: on (see :func:`fold_parts`): a blend of 10,000 datasets has 20,000 parts, whose names and
#: field hashes would otherwise be most of its snapshot.
FOLD_FROM = 64

_encoder = msgspec.msgpack.Encoder(order="deterministic")


def canonical(value: Any, *, named: bool = False) -> Any:
    """Plain data for hashing and printing: the one walk from records to plain values.

    A record becomes ``[type name, {field: value}]`` (what fingerprints hash), or with
    ``named=True`` ``{"__type__": type name, field: value, ...}`` (how states are shown); tuples
    become lists, dict keys strings, and callables are named by module and qualname.
    """
    if isinstance(value, msgspec.Struct):
        fields = record_fields(value, named=named)
        if named:
            return {"__type__": type(value).__name__, **fields}
        return [type(value).__name__, fields]
    if isinstance(value, dict):
        return {str(k): canonical(v, named=named) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v, named=named) for v in value]
    if callable(value):
        return f"{getattr(value, '__module__', '?')}:{getattr(value, '__qualname__', repr(value))}"
    return value


def record_fields(record: msgspec.Struct, *, named: bool = False) -> dict[str, Any]:
    """``{field: canonical value}`` of every field of a record, in declaration order."""
    return {f: canonical(getattr(record, f), named=named) for f in record.__struct_fields__}


def _config_fields(config: Config) -> list[tuple[str, Any]]:
    """The fingerprinted fields of a config, in declaration order, as canonical plain data."""
    skip = type(config).compatible
    return [(f, canonical(getattr(config, f))) for f in config.__struct_fields__ if f not in skip]


def _field_hash(value: Any, width: int) -> bytes:
    return hashlib.blake2b(_encoder.encode(value), digest_size=width).digest()


def part_digest(name: str, config: Config, width: int = 2) -> list:
    """``[name, type name, hash of ``width`` bytes per fingerprinted field, concatenated]`` for
    one part.

    Fixed-width bytes, so a snapshot's size does not depend on the hash values.
    """
    fields = _config_fields(config)
    return [name, type(config).__name__, b"".join(_field_hash(v, width) for _, v in fields)]


def step_pattern(name: str) -> str:
    """A step path with each number as ``*``: ``blend/57/samples`` -> ``blend/*/samples``."""
    return re.sub(r"[0-9]+", "*", name)


def fold_parts(parts: Sequence[tuple[str, Config]]) -> list[tuple[str, str, list[Config]]]:
    """``(label, config type name, configs)`` per digest entry, in order of first appearance:
    the parts of one :func:`step_pattern` and type, when there are at least :data:`FOLD_FROM`
    of them (the datasets of a large blend), are one entry labeled with the pattern; every
    other part is an entry of its own, labeled with its path."""
    groups: dict[tuple[str, str], list[tuple[str, Config]]] = {}
    for name, config in parts:
        groups.setdefault((step_pattern(name), type(config).__name__), []).append((name, config))
    out, done = [], set()
    for name, config in parts:
        key = (step_pattern(name), type(config).__name__)
        members = groups[key]
        if len(members) < FOLD_FROM:
            out.append((name, key[1], [config]))
        elif key not in done:
            done.add(key)
            out.append((key[0], key[1], [c for _, c in members]))
    return out


def _entry_hashes(configs: list[Config], width: int) -> list[tuple[str, Any, bytes]]:
    """``(field, value, hash)`` per fingerprinted field of an entry: one config's values, or
    for a folded entry the list of its configs' values (hashed together)."""
    fields = [_config_fields(c) for c in configs]
    out = []
    for j, (field, value) in enumerate(fields[0]):
        values = value if len(configs) == 1 else [f[j][1] for f in fields]
        out.append((field, value, _field_hash(values, width)))
    return out


def folded_digests(parts: Sequence[tuple[str, Config]], width: int) -> list[list]:
    """``[label, type name, field hashes, number of parts]`` per :func:`fold_parts` entry."""
    return [
        [label, type_name, b"".join(h for _, _, h in _entry_hashes(configs, width)), len(configs)]
        for label, type_name, configs in fold_parts(parts)
    ]


def _field_hashes(digest: bytes, width: int) -> list[bytes]:
    return [digest[i : i + width] for i in range(0, len(digest), width)]


def fingerprint(parts: Sequence[tuple[str, Config]]) -> bytes:
    """A 16-byte hash of the canonical description of ``parts``."""
    canon = [[n, type(c).__name__, _config_fields(c)] for n, c in parts]
    return hashlib.blake2b(_encoder.encode(canon), digest_size=16).digest()


def diff_parts(
    saved: list, current: Sequence[tuple[str, Config]], width: int = 2, *, folded: bool = False
) -> list[str]:
    """Readable differences between saved part digests (field hashes of ``width`` bytes) and
    the current pipeline's parts; ``folded``: the saved digests are :func:`folded_digests`
    entries (snapshot format 5), so the current parts are folded the same way.

    Parts are matched by step path (name), so a step added or removed elsewhere does not hide
    a changed field: each differing field is reported as ``step 'NAME': field 'FIELD' ...``
    (a folded entry: ``steps 'blend/*/samples' (10000 of them): field 'FIELD' differs in at
    least one``).
    """
    out = []
    entries = fold_parts(current) if folded else [(n, type(c).__name__, [c]) for n, c in current]
    saved_names = [str(s[0]) for s in saved]
    cur_names = [label for label, _, _ in entries]
    if saved_names != cur_names:
        out.append(
            f"the snapshot's pipeline has {len(saved)} parts ({', '.join(saved_names)}), "
            f"this one has {len(cur_names)} ({', '.join(cur_names)})"
        )
    by_name = {str(s[0]): s for s in saved}
    for name, type_name, configs in entries:
        s = by_name.get(name)
        if s is None:
            continue
        hint = getattr(type(configs[0]), "mismatch_hint", "")
        if s[1] != type_name:
            out.append(f"step {name!r}: snapshot has a {s[1]}, pipeline has a {type_name}")
            if hint:
                out.append(hint)
            continue
        before = len(out)
        fields = _entry_hashes(configs, width)
        saved_h = _field_hashes(s[2], width)
        many = len(configs) > 1 or (len(s) > 3 and s[3] > 1)
        for (field, value, hc), hs in zip(fields, saved_h):
            if hs == hc:
                continue
            if many:
                out.append(
                    f"steps {name!r} ({len(configs)} of them): field {field!r} differs in at "
                    "least one"
                )
            else:
                out.append(f"step {name!r}: field {field!r} differs (now {value!r})")
        if len(saved_h) != len(fields):
            out.append(f"step {name!r}: config has {len(fields)} fields, snapshot {len(saved_h)}")
        if hint and len(out) > before:
            out.append(hint)
    return out
