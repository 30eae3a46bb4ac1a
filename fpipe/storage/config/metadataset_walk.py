"""The walk of a split's tree: each node of a metadataset read into ``(mode, leaves,
schedule)``.

A node is one ``path:`` (a dataset, or a nested metadataset whose split is walked in turn), a
``join:``, a weighted ``blend:`` or a ``blend_epochized:``. Down the levels weights are
normalized at every blend and scaled by the entry's share (as Energon does), repetitions and
``shuffle_over_epochs_multiplier`` multiplied, subflavors merged (the outer levels win) and
``subset:`` ranges composed; a nested metadataset's leaves are named ``<entry>/<leaf>``.
Every error names the file and the entry.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from fpipe.core.errors import ConfigError
from fpipe.storage.config.metadataset_entries import read_reference
from fpipe.storage.config.metadataset_fields import (
    BLEND_ENTRY_KEYS,
    EPOCH_ENTRY_KEYS,
    entry_name,
    no_unknown,
    number,
)
from fpipe.storage.config.metadataset_file import load_file
from fpipe.storage.config.metadataset_join import join_leaf
from fpipe.storage.config.metadataset_records import Leaf
from fpipe.storage.config.metadataset_schedule import schedule_of
from fpipe.storage.config.metadataset_subset import node_subset

__all__ = ["walk_node"]


def walk_node(
    node, base: Path | str, split, entry, subflavors, stack, *, top=False, subset=None, check=True
):
    """(mode, leaves, schedule) of one node of the file ``base`` (a path, or a URL);
    ``subflavors`` and ``subset`` (a
    :class:`~fpipe.storage.config.metadataset_subset.SampleRange`) come from the levels
    above; ``check``: refuse paths that do not exist."""
    where = stack[-1]
    if not isinstance(node, dict):
        raise ConfigError(f"{where}: {entry}: expected a mapping, got {type(node).__name__}")
    kinds = [k for k in ("blend", "blend_epochized", "join", "path") if k in node]
    if len(kinds) != 1:
        raise ConfigError(
            f"{where}: {entry}: a node has exactly one of 'path', 'blend', 'blend_epochized' or "
            f"'join' (found {kinds or 'none'})"
        )
    kind = kinds[0]
    if kind == "path":
        return _reference(node, base, split, entry, subflavors, stack, subset, check=check)
    if kind == "join":
        leaf = join_leaf(node, base, split, entry, subflavors, stack, subset, check=check)
        return "single", [leaf], None
    extra = BLEND_ENTRY_KEYS if kind == "blend" else EPOCH_ENTRY_KEYS
    keys = {kind, "schedule", "schedule_mode", "blend_unit", "blend_draw", "subset"}
    no_unknown(node, keys, where, entry)
    subset = node_subset(node, subset, where, entry, leaf=False)
    for key in ("schedule", "blend_unit", "blend_draw"):
        if key in node and (kind != "blend" or not top):
            raise ConfigError(  # a split's blends are flattened into one blend of its leaves
                f"{where}: {entry}: {key!r} belongs to the top-level 'blend' of a split (nested "
                "or epochized blends have fixed weights, shares of the top-level unit, drawn "
                "as the top-level blend draws)"
            )
    items = node[kind]
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{where}: {entry}.{kind}: expected a non-empty list of entries")
    groups, entry_weights, names = [], [], []
    for i, item in enumerate(items):
        e = f"{entry}.{kind}[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: {e}: expected a mapping with 'path'")
        if "join" in item:
            leaf = join_leaf(
                item, base, split, e, subflavors, stack, subset, extra=extra, check=check
            )
            leaves = [leaf]
            inner_mode = "single"
        else:
            if "path" not in item:
                raise ConfigError(f"{where}: {e}: missing 'path'")
            inner_mode, leaves, _ = _reference(
                item, base, split, e, subflavors, stack, subset, extra=extra, check=check
            )
        if kind == "blend":
            if inner_mode == "blend_epochized":
                raise ConfigError(f"{where}: {e}: cannot blend an epochized blend by weight")
            entry_weights.append(number(item.get("weight", 1.0), where, e, "weight"))
        else:
            if inner_mode == "blend":
                raise ConfigError(f"{where}: {e}: cannot put a weighted blend in blend_epochized")
            reps = number(item.get("repetitions", 1), where, e, "repetitions")
            if reps == 0:
                raise ConfigError(f"{where}: {e}: repetitions must be > 0")
            leaves = [
                msgspec.structs.replace(lf, repetitions=lf.repetitions * reps) for lf in leaves
            ]
        groups.append((e, leaves))
        names.append(entry_name(item))
    if kind == "blend_epochized":
        return kind, [lf for _, ls in groups for lf in ls], None
    total = sum(entry_weights)
    if total <= 0:
        raise ConfigError(f"{where}: {entry}.blend: all weights are 0; at least one must be > 0")
    out = []
    for (_, leaves), w in zip(groups, entry_weights):
        inner_total = sum(lf.weight for lf in leaves)
        for lf in leaves:  # normalized at this level, then scaled by the entry's share
            out.append(msgspec.structs.replace(lf, weight=w / total * lf.weight / inner_total))
    schedule = None
    if "schedule" in node:
        schedule = schedule_of(node, names, groups, where, entry)
    return kind, out, schedule


def _reference(
    node, base, split, entry, subflavors, stack, subset=None, *, extra=frozenset(), check=True
):
    """(mode, leaves, schedule) of a ``path:`` entry: its dataset, or the split of the nested
    metadataset it names, walked with this entry's name, subflavors, multiplier and subset."""
    ref = read_reference(
        node, base, split, entry, subflavors, stack, subset, extra=extra, check=check
    )
    if isinstance(ref, Leaf):
        return "single", [ref], None
    where, path = stack[-1], ref.path
    inner = load_file(path, stack)
    if ref.split_part not in inner.splits:
        raise ConfigError(
            f"{where}: {entry}: nested metadataset {path} has no split {ref.split_part!r} "
            f"(it has {sorted(inner.splits)})"
        )
    mode, leaves, _ = walk_node(
        inner.splits[ref.split_part],
        path,
        ref.split_part,
        f"splits.{ref.split_part}",
        ref.subflavors,
        (*stack, str(path)),
        subset=ref.subset,
        check=check,
    )
    leaves = [
        msgspec.structs.replace(
            lf,
            name=f"{ref.name}/{lf.name}",
            shuffle_over_epochs_multiplier=_combine_multipliers(
                ref.multiplier, lf.shuffle_over_epochs_multiplier
            ),
        )
        for lf in leaves
    ]
    return mode, leaves, None


def _combine_multipliers(outer: int | None, inner: int | None) -> int | None:
    """Energon's composition of multipliers down the levels: None wins, else the product."""
    return None if outer is None or inner is None else outer * inner
