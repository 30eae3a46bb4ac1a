"""The snapshot envelope: pipeline state <-> bytes, safely and with clear refusals.

Layout: ``msgpack([magic, format_version, order_version, fingerprint, part digests, payload])``
(the part digests zlib-compressed, see :func:`_pack_parts`)
followed by an 8-byte BLAKE2b checksum of everything before it. The payload is the state in a
fixed-width binary form (every integer takes 8 bytes), so a snapshot's size depends only on the
pipeline's structure, never on how far it has run. Decoding parses plain values and converts
them to the pipeline's typed state records with msgspec: no pickle, no code runs.

Versions:
  FORMAT_VERSION: the byte layout; bumped on a CHECKPOINT BREAKING CHANGE. Version 5 (this
    one) folds the part digests of many parts of one step pattern (the datasets of a large
    blend: ``blend/*/samples``) into one entry each (:func:`fpipe.core.fingerprint.fold_parts`):
    a 10,000-dataset blend's digests take about 100 bytes instead of 110 KB. Version 4 keeps a
    state's bytes fields as bytes in the payload (version 3 wrote them as base64 text), writes
    a list of integers as one array (no tag per integer) and hashes each config field in 1 byte
    for the diff a mismatch prints (the 16-byte fingerprint still decides). Versions 3 and 4
    are still read (:data:`OLDER_FORMATS`).
  ORDER_VERSION: the iteration order of the plan stages for a given config and seed; bumped
    on an ITERATION ORDER BREAKING CHANGE (golden tests pin it).
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from fpipe.core.errors import SnapshotError, SnapshotMismatchError
from fpipe.core.fingerprint import diff_parts, fingerprint, folded_digests, part_digest
from fpipe.core.records import Config

__all__ = [
    "Envelope",
    "FORMAT_VERSION",
    "MAGIC",
    "OLDER_FORMATS",
    "ORDER_VERSION",
    "decode_state",
    "encode_state",
    "pack",
    "read_envelope",
    "unpack",
    "unpack_parts",
]

MAGIC = "fpipe-snapshot"
FORMAT_VERSION = 5
ORDER_VERSION = 2
#: Older format versions this fpipe still reads.
OLDER_FORMATS = (3, 4)
#: The first format version whose part digests are folded (:func:`_pack_parts`).
_FOLDED_FROM = 5
#: Bytes of each per-field config hash, by format version (1 from version 4 on).
_FIELD_HASH_BYTES = {3: 2}


def _hash_bytes(format_version: int) -> int:
    return _FIELD_HASH_BYTES.get(format_version, 1)


_CHECKSUM = 8


class _Envelope(msgspec.Struct, array_like=True, frozen=True):
    """The envelope as it is written (a msgpack array); read it with :func:`read_envelope`."""

    magic: str
    format_version: int
    order_version: int
    fingerprint: bytes
    parts: tuple[bytes, bytes]  # compressed step names, field hashes (see _pack_parts)
    payload: bytes


# --- fixed-width encoding of plain values -------------------------------------------------------

_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")
_F64 = struct.Struct("<d")
_U32 = struct.Struct("<I")


_INT64 = (-(1 << 63), 1 << 63)
_UINT64 = (0, 1 << 64)


def pack(value: Any, *, int_arrays: bool = False) -> bytes:
    """Encode plain values (None, bool, int, float, str, bytes, lists) in fixed-width form;
    ``int_arrays``: a non-empty list of integers as one array of 8-byte values (format 4
    payloads), not one tagged value each."""
    out = bytearray()
    _pack(value, out, int_arrays)
    return bytes(out)


def _int_array(v: list | tuple) -> bytes | None:
    """``v`` as a tagged array of 8-byte integers, or None when it is not all integers of one
    kind (signed or unsigned 64-bit)."""
    if not v or not all(type(x) is int for x in v):
        return None
    lo, hi = min(v), max(v)
    for tag, (a, b), code in ((b"A", _INT64, "<i8"), (b"Z", _UINT64, "<u8")):
        if a <= lo and hi < b:
            return tag + _U32.pack(len(v)) + np.asarray(v, dtype=code).tobytes()
    return None


def _pack(v: Any, out: bytearray, int_arrays: bool = False) -> None:
    if v is None:
        out += b"N"
    elif v is True or v is False:
        out += b"T" if v else b"F"
    elif isinstance(v, int):
        if -(1 << 63) <= v < (1 << 63):
            out += b"I" + _I64.pack(v)
        elif 0 <= v < (1 << 64):
            out += b"U" + _U64.pack(v)
        else:
            raise SnapshotError(f"integer {v} does not fit in 64 bits")
    elif isinstance(v, float):
        out += b"D" + _F64.pack(v)
    elif isinstance(v, str):
        b = v.encode()
        out += b"S" + _U32.pack(len(b)) + b
    elif isinstance(v, (bytes, bytearray)):
        out += b"B" + _U32.pack(len(v)) + bytes(v)
    elif isinstance(v, (list, tuple)):
        array = _int_array(v) if int_arrays else None
        if array is not None:
            out += array
            return
        out += b"L" + _U32.pack(len(v))
        for x in v:
            _pack(x, out, int_arrays)
    else:
        raise SnapshotError(f"cannot put a {type(v).__name__} in plan state (plain values only)")


def unpack(data: bytes) -> Any:
    """Decode :func:`pack` output; raises SnapshotError on any malformed input."""
    try:
        value, pos = _unpack(memoryview(data), 0, 0)
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise SnapshotError(f"state payload is malformed: {e}") from None
    if pos != len(data):
        raise SnapshotError(f"state payload has {len(data) - pos} trailing bytes")
    return value


def _unpack(m: memoryview, pos: int, depth: int) -> tuple[Any, int]:
    if depth > 64:
        raise SnapshotError("state payload nests too deeply")
    tag = m[pos : pos + 1].tobytes()
    pos += 1
    if tag == b"N":
        return None, pos
    if tag in (b"T", b"F"):
        return tag == b"T", pos
    if tag == b"I":
        return _I64.unpack_from(m, pos)[0], pos + 8
    if tag == b"U":
        return _U64.unpack_from(m, pos)[0], pos + 8
    if tag == b"D":
        return _F64.unpack_from(m, pos)[0], pos + 8
    if tag in (b"A", b"Z"):
        (n,) = _U32.unpack_from(m, pos)
        pos += 4
        if pos + 8 * n > len(m):
            raise SnapshotError("state payload declares an array longer than the payload")
        code = "<i8" if tag == b"A" else "<u8"
        return np.frombuffer(m, dtype=code, count=n, offset=pos).tolist(), pos + 8 * n
    if tag in (b"S", b"B", b"L"):
        (n,) = _U32.unpack_from(m, pos)
        pos += 4
        if tag == b"L":
            if n > len(m):
                raise SnapshotError("state payload declares a list longer than the payload")
            items = []
            for _ in range(n):
                x, pos = _unpack(m, pos, depth + 1)
                items.append(x)
            return items, pos
        if pos + n > len(m):
            raise SnapshotError("state payload is truncated")
        raw = m[pos : pos + n].tobytes()
        return (raw.decode() if tag == b"S" else raw), pos + n
    raise SnapshotError(f"state payload has an unknown tag {tag!r} at byte {pos - 1}")


# --- the envelope -------------------------------------------------------------------------------

_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder(_Envelope)
_names_dec = msgspec.msgpack.Decoder(list[tuple[str, str, int]])
_folded_names_dec = msgspec.msgpack.Decoder(list[tuple[str, str, int, int]])
#: Decompressed step names are refused past this size (a snapshot is never a zip bomb).
_MAX_NAMES_BYTES = 1 << 24


def _pack_parts(
    parts: Sequence[tuple[str, Config]], format_version: int = FORMAT_VERSION
) -> tuple[bytes, bytes]:
    """The part digests of a pipeline: ``(zlib(msgpack([[path, config type, number of fields,
    number of parts], ...])), the hashes of every fingerprinted field, concatenated)``: 1 byte
    each (2 in format 3); they only name the fields that differ once the fingerprint differs.

    From format 5 the parts of one step pattern, when there are many (the datasets of a large
    blend), are one entry labeled with the pattern (``blend/*/samples``) whose field hashes
    cover all of them (:func:`fpipe.core.fingerprint.fold_parts`); formats 3 and 4 list every
    part (no count). Paths and type names repeat, so they are compressed; the hashes stay
    uncompressed, so the size depends on the pipeline's structure only, never on config
    values or the step.
    """
    width = _hash_bytes(format_version)
    if format_version >= _FOLDED_FROM:
        digests = folded_digests(parts, width)
        names: list = [(d[0], d[1], len(d[2]) // width, d[3]) for d in digests]
    else:
        digests = [part_digest(n, c, width) for n, c in parts]
        names = [(d[0], d[1], len(d[2]) // width) for d in digests]
    return zlib.compress(_enc.encode(names), 9), b"".join(d[2] for d in digests)


def unpack_parts(packed: Sequence[bytes], format_version: int = FORMAT_VERSION) -> list[list]:
    """Inverse of :func:`_pack_parts` for snapshots of ``format_version``: ``[[path (or step
    pattern), config type, field hashes, number of parts], ...]``; raises SnapshotError on
    malformed, truncated or oversized bytes."""
    width = _hash_bytes(format_version)
    try:
        blob, hashes = packed
        d = zlib.decompressobj()
        raw = d.decompress(bytes(blob), _MAX_NAMES_BYTES)
        if d.unconsumed_tail or not d.eof:
            raise SnapshotError("snapshot part digests are truncated or too large")
        if format_version >= _FOLDED_FROM:
            names = _folded_names_dec.decode(raw)
        else:
            names = [(*n, 1) for n in _names_dec.decode(raw)]
    except (ValueError, TypeError, zlib.error, msgspec.DecodeError) as e:
        raise SnapshotError(f"snapshot part digests are malformed: {e}") from None
    out, pos, hashes = [], 0, bytes(hashes)
    for path, type_name, nfields, count in names:
        out.append([path, type_name, hashes[pos : pos + width * nfields], count])
        pos += width * nfields
    if pos != len(hashes):
        raise SnapshotError("snapshot part digests do not match their field hashes")
    return out


def encode_state(parts: Sequence[tuple[str, Config]], state: Any) -> bytes:
    """Snapshot bytes of ``state`` for the pipeline described by ``parts``."""
    payload = pack(msgspec.to_builtins(state, builtin_types=(bytes,)), int_arrays=True)
    body = _enc.encode(
        _Envelope(
            MAGIC,
            FORMAT_VERSION,
            ORDER_VERSION,
            fingerprint(parts),
            _pack_parts(parts, FORMAT_VERSION),
            payload,
        )
    )
    return body + hashlib.blake2b(body, digest_size=_CHECKSUM).digest()


class Envelope(msgspec.Struct, frozen=True):
    """What snapshot bytes hold, read without the pipeline (:func:`read_envelope`)."""

    format_version: int
    order_version: int
    fingerprint: bytes  #: 16-byte hash of the pipeline's configuration
    parts: tuple[bytes, bytes]  #: the packed part digests; :func:`unpack_parts` reads them
    payload: bytes  #: the state in :func:`pack` form; :func:`unpack` reads it
    checksum_ok: bool  #: the trailing checksum matches (always True when it was verified)
    size: int  #: the snapshot's length in bytes


def read_envelope(data: bytes, *, verify: bool = True) -> Envelope:
    """Parse snapshot bytes into their :class:`Envelope` (no pipeline needed, no code runs).

    ``verify=False`` reads an envelope whose checksum does not match (to show what is left of
    it) and reports the mismatch in ``checksum_ok``. Versions are not checked here.

    Raises:
      SnapshotError: not bytes, truncated, corrupted (when ``verify``) or foreign bytes, or an
        envelope whose fields have the wrong types.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise SnapshotError(f"a snapshot is bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) <= _CHECKSUM:
        raise SnapshotError(f"snapshot is truncated ({len(data)} bytes)")
    body, check = data[:-_CHECKSUM], data[-_CHECKSUM:]
    checksum_ok = hashlib.blake2b(body, digest_size=_CHECKSUM).digest() == check
    if verify and not checksum_ok:
        try:
            magic = msgspec.msgpack.decode(body, type=list)[0]
        except Exception:
            magic = None
        if magic != MAGIC:
            raise SnapshotError("these bytes are not an fpipe snapshot (or are truncated)")
        raise SnapshotError(
            "snapshot checksum does not match: the bytes are corrupted or truncated"
        )
    try:  # typed: a field of the wrong type is refused here, not a traceback later
        env = _dec.decode(body)
    except msgspec.DecodeError as e:  # ValidationError included
        raise SnapshotError(f"these bytes are not an fpipe snapshot: {e}") from None
    if env.magic != MAGIC:
        raise SnapshotError(f"these bytes are not an fpipe snapshot (magic {env.magic!r})")
    return Envelope(
        format_version=env.format_version,
        order_version=env.order_version,
        fingerprint=env.fingerprint,
        parts=env.parts,
        payload=env.payload,
        checksum_ok=checksum_ok,
        size=len(data),
    )


def decode_state(parts: Sequence[tuple[str, Config]], state_type: Any, data: bytes) -> Any:
    """Check and decode snapshot bytes into a state of ``state_type``.

    Raises:
      SnapshotError: truncated, corrupted or foreign bytes, or another format version.
      SnapshotMismatchError: intact bytes from a differently configured pipeline; the message
        names each stage and field that differs.
    """
    env = read_envelope(data)
    if env.format_version != FORMAT_VERSION and env.format_version not in OLDER_FORMATS:
        raise SnapshotError(
            f"snapshot format version {env.format_version} is not supported by this fpipe "
            f"(it reads versions {sorted({*OLDER_FORMATS, FORMAT_VERSION})})"
        )
    if env.order_version != ORDER_VERSION:
        raise SnapshotMismatchError(
            f"snapshot was taken with iteration-order version {env.order_version}, this fpipe "
            f"produces order version {ORDER_VERSION}: resuming would not continue the same stream"
        )
    if env.fingerprint != fingerprint(parts):
        saved = unpack_parts(env.parts, env.format_version)
        width = _hash_bytes(env.format_version)
        folded = env.format_version >= _FOLDED_FROM
        diffs = diff_parts(saved, parts, width, folded=folded) or [
            "the configuration differs from the snapshot's in a field its 1-byte field "
            "digests cannot name (compare the configs with `fpipe state show`)"
        ]
        raise SnapshotMismatchError(
            "snapshot was taken from a differently configured pipeline:\n  " + "\n  ".join(diffs)
        )
    try:
        return msgspec.convert(unpack(env.payload), type=state_type)
    except msgspec.ValidationError as e:
        raise SnapshotError(f"snapshot state does not fit this pipeline: {e}") from None
