"""Checks of a restored state's values: snapshot bytes are data, not trusted.

A snapshot whose checksum is intact can still hold impossible values (written by a buggy tool,
or edited): a position of -1, a key that is not the one the pipeline derives from its seed, a
position past the end of an epoch. Decoding checks the types (msgspec); :func:`check_state`
checks the values, in two parts:

- generic, for every state record: every integer is >= 0 (counters, epochs, positions and
  cursors are) and, but for keys, below :data:`MAX_COUNT` (2**62: a run counting a billion a
  second takes 146 years to get there, and the headroom keeps the sums steps compute, such as
  ``epoch + 1`` or a position plus a window, inside the 64-bit integers numpy and the recipe
  encoding hold); every field named ``key`` (a 64-bit hash) equals the one in a fresh
  ``init()`` state (keys are derived from the seed and the step's path, both covered by the
  fingerprint);
- per step: a :class:`~fpipe.core.stage.Source` may declare ``check(own_state)`` for what only
  it knows (``repeat``: the position lies inside an epoch of its view, the epoch inside
  ``num_epochs``).

Any violation raises :class:`~fpipe.core.errors.SnapshotError` naming the step and field.
"""

from __future__ import annotations

from typing import Any

import msgspec

from fpipe.core.errors import SnapshotError
from fpipe.core.graph import check_restored

__all__ = ["MAX_COUNT", "check_state", "check_values"]

#: Integers of a restored state other than keys must be below this (see the module doc).
MAX_COUNT = 1 << 62


def check_values(restored: Any, fresh: Any, where: str = "state", limit: int = MAX_COUNT) -> None:
    """Integers in ``[0, limit)`` (keys: >= 0) and ``key`` fields equal to ``fresh``'s,
    recursively."""
    if isinstance(restored, bool) or restored is None:
        return
    if isinstance(restored, int):
        if restored < 0:
            raise SnapshotError(f"snapshot {where} is {restored}: it must be >= 0")
        if restored >= limit:
            raise SnapshotError(
                f"snapshot {where} is {restored}: it must be below 2**{limit.bit_length() - 1} "
                "(no run gets there; the snapshot was edited or corrupted)"
            )
        return
    if isinstance(restored, msgspec.Struct):
        same = type(fresh) is type(restored)
        for f in restored.__struct_fields__:
            value = getattr(restored, f)
            other = getattr(fresh, f, None) if same else None
            if f == "key" and same and value != other:
                raise SnapshotError(
                    f"snapshot {where}.key is {value}, but this pipeline derives {other} from its "
                    "seed: the snapshot was edited or corrupted"
                )
            check_values(value, other, f"{where}.{f}", 1 << 64 if f == "key" else limit)
        return
    if isinstance(restored, (list, tuple)):
        fresh_items = fresh if isinstance(fresh, (list, tuple)) else ()
        for i, value in enumerate(restored):
            other = fresh_items[i] if i < len(fresh_items) else None
            check_values(value, other, f"{where}[{i}]")


def check_state(source: Any, restored: Any, fresh: Any) -> None:
    """Check a restored plan state against a fresh ``source.init`` state (see module doc), then
    run every step's own ``check``."""
    check_values(restored, fresh)
    check_restored(source, restored)
