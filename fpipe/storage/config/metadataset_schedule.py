"""The ``schedule:`` of a split's top-level weighted blend: its weights over the run.

Written as ``[[position, {name: weight}], ...]`` over the blend's entries (by name), read
into a :class:`~fpipe.storage.config.metadataset_records.MixSchedule` over the blend's leaves:
an entry's weight is spread over its leaves by their share within the entry.
"""

from __future__ import annotations

from fpipe.core.errors import ConfigError
from fpipe.storage.config.metadataset_fields import number
from fpipe.storage.config.metadataset_records import MixSchedule

__all__ = ["schedule_of"]


def schedule_of(node, names, groups, where, entry) -> MixSchedule:
    """The top-level blend's schedule over its leaves: ``[[position, {name: weight}], ...]``."""
    raw, mode = node["schedule"], node.get("schedule_mode", "step")
    if mode not in ("step", "linear"):
        raise ConfigError(f"{where}: {entry}: schedule_mode must be 'step' or 'linear'")
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}: {entry}.schedule: expected [[position, {{name: weight}}]...]")
    index = {n: i for i, n in enumerate(names)}
    if len(index) != len(names):
        raise ConfigError(f"{where}: {entry}: entries of a scheduled blend need unique names")
    points, rows = [], []
    for j, item in enumerate(raw):
        e = f"{entry}.schedule[{j}]"
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[1], dict)):
            raise ConfigError(f"{where}: {e}: expected [position, {{name: weight, ...}}]")
        pos, weights = item
        if isinstance(pos, bool) or not isinstance(pos, int) or pos < 0:
            raise ConfigError(f"{where}: {e}: position must be an integer >= 0, got {pos!r}")
        if points and pos <= points[-1]:
            raise ConfigError(f"{where}: {e}: positions must increase ({pos} after {points[-1]})")
        unknown = sorted(set(map(str, weights)) - set(index))
        if unknown:
            raise ConfigError(f"{where}: {e}: unknown dataset(s) {unknown}; entries: {names}")
        w = [0.0] * len(names)
        for n, v in weights.items():
            w[index[str(n)]] = number(v, where, e, f"weight of {n!r}")
        if sum(w) <= 0:
            raise ConfigError(f"{where}: {e}: all weights are 0; at least one must be > 0")
        points.append(pos)
        rows.append(w)
    if points[0] != 0:
        raise ConfigError(f"{where}: {entry}.schedule: the first point must be at position 0")
    # Spread each entry's weight over its leaves by their normalized share within the entry.
    leaf_rows = []
    for w in rows:
        row = []
        for (_, leaves), we in zip(groups, w):
            inner_total = sum(lf.weight for lf in leaves)
            row.extend(we * lf.weight / inner_total for lf in leaves)
        leaf_rows.append(tuple(row))
    return MixSchedule(points=tuple(points), weights=tuple(leaf_rows), linear=mode == "linear")
