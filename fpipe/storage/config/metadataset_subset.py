"""``subset:`` in a metadataset (Energon 7.2's sample-range subsets): a node keeps one
consecutive range of its datasets' samples.

``subset: {range: [start, end]}`` (start included, end not) on a dataset reference, a nested
metadataset, a ``join:`` or a ``blend:`` / ``blend_epochized:`` node. A bound is a percentage
string (``"12.5%"``: of each dataset's split, after the ranges below it) or, on a dataset
reference or join only, a sample index (an integer; ``end``: the split's end). Nested ranges
compose from the outside in, multiplicatively: ``[0%, 50%]`` around ``[25%, 75%]`` keeps
``[25%, 50%]``. A dataset's index range is applied first, then the composed percentages to what
it left, each bound rounded down (as Energon's sharder computes it).
"""

from __future__ import annotations

from typing import Any

import msgspec

from fpipe.core.errors import ConfigError

__all__ = ["SampleRange", "node_subset", "subset_bounds"]


class SampleRange(msgspec.Struct, frozen=True, kw_only=True):
    """A dataset's subset: ``absolute`` sample indices ``(start, end)`` (end None: the split's
    end) applied first, then ``ratio`` ``(start, end)`` as fractions of what is left."""

    ratio: tuple[float, float] = (0.0, 1.0)
    absolute: tuple[int, int | None] | None = None


def _bound(value: Any, at: str) -> float | int | None:
    if isinstance(value, bool):
        raise ConfigError(f"{at}: a subset bound is a percentage ('25%') or a sample index")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip() == "end":
        return None
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            pct = float(value.strip()[:-1])
        except ValueError:
            pct = -1.0
        if 0 <= pct <= 100:
            return pct / 100
    raise ConfigError(
        f"{at}: subset bound {value!r} is neither a percentage between 0% and 100%, a sample "
        "index nor 'end'"
    )


def _own(node: dict, where: str, entry: str) -> SampleRange | None:
    """The ``subset:`` written on ``node`` itself (None when it has none)."""
    spec = node.get("subset")
    if spec is None:
        return None
    at = f"{where}: {entry}.subset"
    if not isinstance(spec, dict) or set(spec) != {"range"}:
        raise ConfigError(f"{at}: expected {{range: [start, end]}}, got {spec!r}")
    rng = spec["range"]
    if not isinstance(rng, list) or len(rng) != 2:
        raise ConfigError(f"{at}: range must be a list [start, end], got {rng!r}")
    start, end = _bound(rng[0], at), _bound(rng[1], at)
    if isinstance(start, int):
        if not (end is None or isinstance(end, int)):
            raise ConfigError(f"{at}: a range starting at a sample index ends at one (or 'end')")
        if start < 0 or (end is not None and end < start):
            raise ConfigError(f"{at}: sample range {rng!r} is not 0 <= start <= end")
        return SampleRange(absolute=(start, end))
    if not isinstance(end, float) or start is None:
        raise ConfigError(f"{at}: a range starting at a percentage ends at one, got {rng!r}")
    if start > end:
        raise ConfigError(f"{at}: range {rng!r} starts after it ends")
    return SampleRange(ratio=(start, end))


def node_subset(
    node: dict, outer: SampleRange | None, where: str, entry: str, *, leaf: bool
) -> SampleRange | None:
    """The subset in force below ``node``: its own ``subset:`` composed with ``outer`` (the
    levels above, percentages only). ``leaf``: ``node`` names one dataset (a reference or a
    join), the only place a sample-index range may be."""
    own = _own(node, where, entry)
    if own is None:
        out = outer
    elif outer is None:
        out = own
    else:
        (a, b), (c, d) = own.ratio, outer.ratio
        out = SampleRange(ratio=(a + c * (b - a), a + d * (b - a)), absolute=own.absolute)
    if out is not None and out.absolute is not None and not leaf:
        raise ConfigError(
            f"{where}: {entry}.subset: sample-index ranges are only allowed for a leaf dataset "
            "(a path to a dataset, or a join); use percentages here"
        )
    return out


def subset_bounds(subset: SampleRange, total: int, where: str) -> tuple[int, int]:
    """``(start, end)`` positions of ``subset`` in a split of ``total`` samples."""
    start, end = 0, total
    if subset.absolute is not None:
        start, end = subset.absolute[0], total if subset.absolute[1] is None else subset.absolute[1]
        if end > total:
            raise ConfigError(
                f"{where}: subset range {list(subset.absolute)} ends after the split's "
                f"{total} samples"
            )
    width = end - start
    return start + int(width * subset.ratio[0]), start + int(width * subset.ratio[1])
