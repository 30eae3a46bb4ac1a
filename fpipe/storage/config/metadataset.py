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
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
import yaml

from fpipe.core.errors import ConfigError
from fpipe.storage.config.dataset_yaml import _load_yaml
from fpipe.storage.config.metadataset_entries import (
    BLEND_ENTRY_KEYS,
    EPOCH_ENTRY_KEYS,
    entry_name,
    is_metadataset,
    join_leaf,
    no_unknown,
    number,
    read_reference,
    user_path,
)
from fpipe.storage.config.metadataset_records import AuxRef, JoinPart, Leaf, MixSchedule
from fpipe.storage.config.metadataset_schedule import schedule_of
from fpipe.storage.config.metadataset_subset import node_subset
from fpipe.storage.config.safe_yaml import safe_load
from fpipe.storage.paths import is_url

__all__ = [
    "AuxRef",
    "JoinPart",
    "Leaf",
    "Metadataset",
    "Mix",
    "MixSchedule",
    "is_metadataset",
    "load_metadataset",
    "resolve_mix",
]

_ENERGON_CLASSES = ("MetadatasetV2", "Metadataset")
_TOP_KEYS = {"__module__", "__class__", "splits"}
#: Keys of an entry of a version-1 ``Metadataset`` split (``datasets: [...]``).
_V1_KEYS = {
    "path",
    "weight",
    "split_part",
    "subflavor",
    "subflavors",
    "shuffle_over_epochs_multiplier",
    "dataset_config",
    "split_config",
}


class Mix(msgspec.Struct, frozen=True, kw_only=True):
    """A split resolved to leaf datasets: ``mode`` is ``"single"``, ``"blend"`` (weighted) or
    ``"blend_epochized"``; ``schedule`` is set for weighted blends (constant weights are a
    one-point schedule); ``unit``: the index column the weights are shares of (the top-level
    blend's ``blend_unit``; None: shares of samples)."""

    split: str
    mode: str
    leaves: tuple[Leaf, ...]
    schedule: MixSchedule | None = None
    source: str = ""
    unit: str | None = None


class Metadataset(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed metadataset file: its absolute ``path`` and the raw node of each split."""

    path: str
    splits: dict[str, Any]
    #: split -> its walk ``(mode, leaves, schedule)`` with paths checked, kept by
    #: :func:`load_metadataset`'s check: both readings of a split and a later
    #: :func:`resolve_mix` reuse it instead of walking 10,000 entries again
    walked: dict[str, Any] = msgspec.field(default_factory=dict)


def load_metadataset(path: str | os.PathLike, *, check_paths: bool = True) -> Metadataset:
    """Parse and check a metadataset file, nested files included.

    Raises ConfigError naming the file and the entry for unknown keys, bad weights or
    repetitions, missing paths and cycles between nested files. ``check_paths=False`` only
    parses the top file (to list what it names, datasets that do not exist yet included:
    :func:`resolve_mix` with ``check_paths=False``).
    """
    if isinstance(path, str) and "://" in path:  # dss:// and msc:// profiles resolved
        path = user_path(path, "the metadataset file")
    md = _load(_located(path), ())
    if not check_paths:
        return md
    for split in md.splits:  # every node is checked (both readings walk the same nodes)
        for mode in ("train", "val"):
            resolve_mix(md, split, training=mode == "train")
    return md


def _located(path: str | os.PathLike) -> Path | str:
    """A metadataset file's absolute path, or its URL (on object storage)."""
    return path if is_url(path) else Path(path).resolve()


def _read(path: Path | str) -> Any:
    """The parsed YAML of a metadataset file: a local file, or an object (one GET)."""
    if not isinstance(path, str):
        if not path.is_file():
            raise ConfigError(f"metadataset {path} does not exist")
        return _load_yaml(path)
    from fpipe.storage.objects import read_object

    try:
        data = read_object(path)
    except ConfigError:
        raise
    except FileNotFoundError:
        raise ConfigError(f"metadataset {path} does not exist (no such object)") from None
    except Exception as e:  # obstore's errors (no such object, access denied, ...)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"metadataset {path} cannot be read: {first}") from None
    try:
        return safe_load(data)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None


def _load(path: Path | str, stack: tuple[str, ...]) -> Metadataset:
    if str(path) in stack:
        chain = " -> ".join([*stack[stack.index(str(path)) :], str(path)])
        raise ConfigError(f"{stack[-1]}: nested metadatasets form a cycle: {chain}")
    obj = _read(path)
    where = str(path)
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: a metadataset is a mapping with 'splits:'")
    no_unknown(obj, _TOP_KEYS, where, "the top level")
    splits = obj.get("splits")
    v1 = isinstance(splits, dict) and any(
        isinstance(v, dict) and "datasets" in v for v in splits.values()
    )
    cls = obj.get("__class__", "Metadataset" if v1 else "MetadatasetV2")
    if cls not in _ENERGON_CLASSES:
        raise ConfigError(
            f"{where}: __class__ {cls!r} is not supported; fpipe reads MetadatasetV2 files "
            "(splits: with blend / blend_epochized / path / join) and version-1 Metadataset "
            "files (splits: with datasets)"
        )
    if not isinstance(splits, dict) or not splits:
        raise ConfigError(f"{where}: 'splits:' must map split names (train, val, test) to nodes")
    if cls == "Metadataset":
        splits = {k: _v1_split(v, where, f"splits.{k}") for k, v in splits.items()}
    return Metadataset(path=where, splits={str(k): v for k, v in splits.items()})


def _v1_split(node: Any, where: str, entry: str) -> dict:
    """A version-1 split, ``{datasets: [{weight, path, ...}]}``, as the weighted ``blend:`` it
    means (Energon's ``MetadatasetBlender``); a legacy ``subflavor: x`` becomes the subflavor
    ``__subflavor__: x``, as Energon sets it."""
    if not isinstance(node, dict) or set(node) != {"datasets"}:
        raise ConfigError(f"{where}: {entry}: a version-1 split is a mapping with 'datasets:'")
    items = node["datasets"]
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{where}: {entry}.datasets: expected a non-empty list of datasets")
    out = []
    for i, item in enumerate(items):
        e = f"{entry}.datasets[{i}]"
        if not isinstance(item, dict) or "path" not in item:
            raise ConfigError(f"{where}: {e}: expected a mapping with 'path'")
        no_unknown(item, _V1_KEYS, where, e)
        item = dict(item)
        legacy = item.pop("subflavor", None)
        if legacy is not None:
            sub = dict(item.get("subflavors") or {})
            item["subflavors"] = sub if "__subflavor__" in sub else {"__subflavor__": legacy, **sub}
        out.append(item)
    return {"blend": out}


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
        walked = _node(
            md.splits[split], _located(md.path), split, f"splits.{split}", {}, (md.path,),
            top=True, check=check_paths,
        )  # fmt: skip
        if check_paths:
            md.walked[split] = walked
    mode, leaves, schedule = walked
    leaves = _unique_names(leaves, md.path, split)
    unit = _unit(md.splits[split], md.path, f"splits.{split}")
    if not training:
        mode, schedule = ("single" if len(leaves) == 1 else "concat"), None
        leaves = tuple(
            msgspec.structs.replace(leaf, weight=1.0, repetitions=1.0) for leaf in leaves
        )
    elif mode == "blend" and schedule is None:
        schedule = MixSchedule(points=(0,), weights=(tuple(leaf.weight for leaf in leaves),))
    if not training or mode != "blend":
        unit = None
    return Mix(split=split, mode=mode, leaves=leaves, schedule=schedule, source=md.path, unit=unit)


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


def _node(
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
    no_unknown(node, {kind, "schedule", "schedule_mode", "blend_unit", "subset"}, where, entry)
    subset = node_subset(node, subset, where, entry, leaf=False)
    for key in ("schedule", "blend_unit"):
        if key in node and (kind != "blend" or not top):
            raise ConfigError(
                f"{where}: {entry}: {key!r} belongs to the top-level 'blend' of a split (nested "
                "or epochized blends have fixed weights, shares of the top-level unit)"
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
    inner = _load(path, stack)
    if ref.split_part not in inner.splits:
        raise ConfigError(
            f"{where}: {entry}: nested metadataset {path} has no split {ref.split_part!r} "
            f"(it has {sorted(inner.splits)})"
        )
    mode, leaves, _ = _node(
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
