"""Fingerprints of a pipeline's configuration, and a readable diff between two of them.

A pipeline is described by its parts, ``(name, config)`` pairs in data-flow order. Each part is
summarized as ``[name, config type name, [short hash of each field]]``; the fingerprint is a
hash of the canonical msgpack encoding of all of it. Fields a config declares ``compatible``
(rank, world size...) are left out, so changing them does not refuse a restore.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import msgspec

from fpipe.core.records import Config

__all__ = [
    "canonical",
    "diff_parts",
    "fingerprint",
    "part_digest",
    "record_fields",
]

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


def _field_hashes(digest: bytes, width: int) -> list[bytes]:
    return [digest[i : i + width] for i in range(0, len(digest), width)]


def fingerprint(parts: Sequence[tuple[str, Config]]) -> bytes:
    """A 16-byte hash of the canonical description of ``parts``."""
    canon = [[n, type(c).__name__, _config_fields(c)] for n, c in parts]
    return hashlib.blake2b(_encoder.encode(canon), digest_size=16).digest()


def diff_parts(saved: list, current: Sequence[tuple[str, Config]], width: int = 2) -> list[str]:
    """Readable differences between saved part digests (field hashes of ``width`` bytes) and
    the current pipeline's parts.

    Parts are matched by step path (name), so a step added or removed elsewhere does not hide
    a changed field: each differing field is reported as ``step 'NAME': field 'FIELD' ...``.
    """
    out = []
    saved_names = [str(s[0]) for s in saved]
    cur_names = [n for n, _ in current]
    if saved_names != cur_names:
        out.append(
            f"the snapshot's pipeline has {len(saved)} parts ({', '.join(saved_names)}), "
            f"this one has {len(cur_names)} ({', '.join(cur_names)})"
        )
    by_name = {str(s[0]): s for s in saved}
    for name, config in current:
        s = by_name.get(name)
        if s is None:
            continue
        d = part_digest(name, config, width)
        hint = getattr(type(config), "mismatch_hint", "")
        if s[1] != d[1]:
            out.append(f"step {name!r}: snapshot has a {s[1]}, pipeline has a {d[1]}")
            if hint:
                out.append(hint)
            continue
        before = len(out)
        saved_h, cur_h = _field_hashes(s[2], width), _field_hashes(d[2], width)
        for (field, value), hs, hc in zip(_config_fields(config), saved_h, cur_h):
            if hs != hc:
                out.append(f"step {name!r}: field {field!r} differs (now {value!r})")
        if len(saved_h) != len(cur_h):
            out.append(f"step {name!r}: config has {len(cur_h)} fields, snapshot {len(saved_h)}")
        if hint and len(out) > before:
            out.append(hint)
    return out
