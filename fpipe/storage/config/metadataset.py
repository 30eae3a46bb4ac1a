"""``metadataset.yaml``: how several datasets are mixed, as Megatron-Energon users write it.

The file is read with ``yaml.safe_load`` only and parsed into frozen msgspec records. The
names ``__module__: megatron.energon`` / ``__class__: MetadatasetV2`` are accepted as labels,
never imported. Relative paths are relative to the file that names them. A file may be on
object storage (``msc://PROFILE/x.yaml``, ``s3://bucket/x.yaml``): it is read with one GET
when it is loaded, and its relative paths name objects in its own folder of the bucket.

A split is one node::

    {path: ./coco, split_part: val, subflavors: {...}}             # one dataset (or a nested
                                                                    # metadataset.yaml)
    {blend: [{weight: 5, path: ./coco}, ...], schedule: [...]}      # weighted mix
    {blend: [...], blend_unit: tokens}                              # weights share tokens
    {blend_epochized: [{repetitions: 2, path: ./coyo}, ...]}        # exact passes per epoch
    {join: [{path: ./images}, {path: ./captions}], joiner: ...}     # columns joined by key

:func:`load_metadataset` checks the whole tree (unknown keys, weights, missing paths, cycles
between nested files); :func:`resolve_mix` flattens one split into a :class:`Mix`: the leaf
datasets with their composed weights (normalized at every blend level, as Energon does) or
repetitions (multiplied down the levels), their merged subflavors and split parts, plus the
weight schedule of the top-level blend. Storage decides no order: the plan tier turns a
:class:`Mix` into a blend.

The steps are modules of their own: :mod:`~fpipe.storage.config.metadataset_file` reads one
file, :mod:`~fpipe.storage.config.metadataset_walk` walks a split's nodes,
:mod:`~fpipe.storage.config.metadataset_entries` and
:mod:`~fpipe.storage.config.metadataset_join` read each dataset entry into a
:class:`Leaf` (:mod:`~fpipe.storage.config.metadataset_records`).
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from fpipe.core.errors import ConfigError
from fpipe.storage.config.metadataset_file import Metadataset, load_file, located
from fpipe.storage.config.metadataset_paths import is_metadataset, user_path
from fpipe.storage.config.metadataset_records import AuxRef, JoinPart, Leaf, MixSchedule
from fpipe.storage.config.metadataset_walk import walk_node

__all__ = [
    "AuxRef",
    "BLEND_DRAWS",
    "JoinPart",
    "Leaf",
    "Metadataset",
    "Mix",
    "MixSchedule",
    "is_metadataset",
    "load_metadataset",
    "resolve_mix",
]


#: The values of a top-level blend's ``blend_draw``: the draws of a weighted blend
#: (:data:`fpipe.plan.blend_state.BlendDraw`; storage does not import the plan tier).
BLEND_DRAWS = ("hash", "quota")


class Mix(msgspec.Struct, frozen=True, kw_only=True):
    """A split resolved to leaf datasets: ``mode`` is ``"single"``, ``"blend"`` (weighted) or
    ``"blend_epochized"``; ``schedule`` is set for weighted blends (constant weights are a
    one-point schedule); ``unit``: the index column the weights are shares of (the top-level
    blend's ``blend_unit``; None: shares of samples); ``draw``: the top-level blend's
    ``blend_draw`` (one of :data:`BLEND_DRAWS`; None: the file leaves it to the loader)."""

    split: str
    mode: str
    leaves: tuple[Leaf, ...]
    schedule: MixSchedule | None = None
    source: str = ""
    unit: str | None = None
    draw: str | None = None


def load_metadataset(path: str | os.PathLike, *, check_paths: bool = True) -> Metadataset:
    """Parse and check a metadataset file, nested files included.

    Raises ConfigError naming the file and the entry for unknown keys, bad weights or
    repetitions, missing paths and cycles between nested files. ``check_paths=False`` only
    parses the top file (to list what it names, datasets that do not exist yet included:
    :func:`resolve_mix` with ``check_paths=False``).
    """
    if isinstance(path, str) and "://" in path:  # dss:// and msc:// profiles resolved
        path = user_path(path, "the metadataset file")
    md = load_file(located(path), ())
    if not check_paths:
        return md
    for split in md.splits:  # every node is checked (both readings walk the same nodes)
        for mode in ("train", "val"):
            resolve_mix(md, split, training=mode == "train")
    return md


def resolve_mix(
    md: Metadataset, split: str, *, training: bool = True, check_paths: bool = True
) -> Mix:
    """Flatten split ``split`` of ``md`` into its leaf datasets (see the module docstring).

    With ``training=False`` (validation and test) weights and repetitions are ignored and the
    leaves are concatenated in file order, as Energon does. ``check_paths=False``: a dataset
    or ``aux:`` folder that does not exist is listed as named, not refused.

    Example::

        mix = resolve_mix(load_metadataset("mix.yaml"), "train")
        [(leaf.name, leaf.weight) for leaf in mix.leaves]   # [("coco", 0.625), ...]
    """
    if split not in md.splits:
        raise ConfigError(f"{md.path}: no split {split!r}; the file has {sorted(md.splits)}")
    walked = md.walked.get(split) if check_paths else None
    if walked is None:  # the walk does not depend on the reading (training or not)
        walked = walk_node(
            md.splits[split], located(md.path), split, f"splits.{split}", {}, (md.path,),
            top=True, check=check_paths,
        )  # fmt: skip
        if check_paths:
            md.walked[split] = walked
    mode, leaves, schedule = walked
    leaves = _unique_names(leaves, md.path, split)
    unit = _unit(md.splits[split], md.path, f"splits.{split}")
    draw = _draw(md.splits[split], md.path, f"splits.{split}")
    if not training:
        mode, schedule = ("single" if len(leaves) == 1 else "concat"), None
        leaves = tuple(
            msgspec.structs.replace(leaf, weight=1.0, repetitions=1.0) for leaf in leaves
        )
    elif mode == "blend" and schedule is None:
        schedule = MixSchedule(points=(0,), weights=(tuple(leaf.weight for leaf in leaves),))
    if not training or mode != "blend":
        unit = draw = None
    return Mix(
        split=split, mode=mode, leaves=leaves, schedule=schedule, source=md.path, unit=unit,
        draw=draw,
    )  # fmt: skip


def _unit(node, where: str, entry: str) -> str | None:
    """The top-level blend's ``blend_unit``: an index column name (None: samples)."""
    unit = node.get("blend_unit") if isinstance(node, dict) else None
    if unit is None:
        return None
    if not isinstance(unit, str) or not unit:
        raise ConfigError(
            f"{where}: {entry}: blend_unit must name an index column (e.g. tokens) or be "
            f"'samples', got {unit!r}"
        )
    return None if unit == "samples" else unit


def _draw(node, where: str, entry: str) -> str | None:
    """The top-level blend's ``blend_draw`` (None: not given)."""
    draw = node.get("blend_draw") if isinstance(node, dict) else None
    if draw is not None and draw not in BLEND_DRAWS:
        raise ConfigError(
            f"{where}: {entry}: blend_draw must be 'hash' or 'quota' (how the weighted blend "
            f"draws each position's dataset), got {draw!r}"
        )
    return draw


def _unique_names(leaves: list[Leaf], where: str, split: str) -> tuple[Leaf, ...]:
    """The leaves, each with a name of its own: datasets of the same name in different folders
    (``a/wds`` and ``b/wds``, as ``energon prepare`` recipes lay them out) are named by as many
    trailing folders as tell them apart; the same dataset twice needs a ``name:``."""
    out = list(leaves)
    by_name: dict[str, list[int]] = {}
    for i, leaf in enumerate(leaves):
        by_name.setdefault(leaf.name, []).append(i)
    for name, idxs in by_name.items():
        if len(idxs) > 1:
            for i, prefix in zip(idxs, _telling_folders([leaves[i] for i in idxs])):
                if prefix is None:  # the same folder twice: name the first two entries
                    _clash(leaves[idxs[0]], leaves[idxs[1]], where, split)
                out[i] = msgspec.structs.replace(leaves[i], name=f"{prefix}/{name}")
    seen: dict[str, Leaf] = {}
    for leaf in out:
        if leaf.name in seen:
            _clash(seen[leaf.name], leaf, where, split)
        seen[leaf.name] = leaf
    return tuple(out)


def _telling_folders(leaves: list[Leaf]) -> list[str | None]:
    """For leaves of one name: the fewest trailing parent folders of each path that differ
    between them all (None for each when two paths are the same)."""
    parents = [Path(leaf.path).parent.parts for leaf in leaves]
    if len(set(parents)) < len(parents):
        return [None] * len(leaves)
    for n in range(1, max(len(p) for p in parents) + 1):
        tails = ["/".join(p[-n:]) for p in parents]
        if len(set(tails)) == len(tails):
            return tails
    return [None] * len(leaves)


def _clash(first: Leaf, second: Leaf, where: str, split: str) -> None:
    raise ConfigError(
        f"{where}: split {split!r}: two datasets are named {first.name!r} "
        f"({first.where} and {second.where}); give one of them a 'name:' (a 'blend:' entry "
        "of a MetadatasetV2 file)"
    )
