"""The entries of a metadataset: leaf records, key checks, names, joins and schedules.

Helpers of :mod:`fpipe.storage.config.metadataset`; every error names the file and the entry.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from fpipe.core.errors import ConfigError
from fpipe.storage.config.dataset_yaml import is_config_file_name
from fpipe.storage.config.metadataset_subset import SampleRange, node_subset
from fpipe.storage.paths import is_url

__all__ = [
    "AuxRef",
    "BLEND_ENTRY_KEYS",
    "CONFIG_FILE_KEYS",
    "EPOCH_ENTRY_KEYS",
    "JOINER_FUNCTION",
    "JOIN_KEYS",
    "JoinPart",
    "Leaf",
    "MixSchedule",
    "aux_refs",
    "combine_multipliers",
    "config_name",
    "entry_name",
    "is_metadataset",
    "join_leaf",
    "multiplier",
    "no_unknown",
    "number",
    "schedule_of",
    "subflavors_of",
]

#: Keys an entry of a weighted / epochized blend may add to a reference.
BLEND_ENTRY_KEYS = {"weight"}
EPOCH_ENTRY_KEYS = {"repetitions"}
JOIN_KEYS = {
    "join",
    "joiner",
    "name",
    "split_part",
    "subflavors",
    "subflavor",
    "shuffle_over_epochs_multiplier",
    "subset",
}
JOIN_PART_KEYS = {
    "path",
    "nonmatch",
    "split_part",
    "subflavors",
    "subflavor",
    "dataset_config",
    "split_config",
}
NONMATCH = ("error", "skip", "none")


class JoinPart(msgspec.Struct, frozen=True, kw_only=True):
    """A secondary dataset of a ``join:``: its samples are found by the primary's sample keys.

    ``nonmatch`` says what a primary sample without a match here becomes: ``"error"`` (a bad
    sample), ``"skip"`` (left out, counted) or ``"none"`` (this part's fields are None);
    ``name``: the part's key when ``join:`` is a mapping (passed to a custom joiner by name);
    ``dataset_config`` / ``split_config``: the part's config / split file to read instead of
    ``dataset.yaml`` / ``split.yaml`` (file names in its index folder).
    """

    path: str
    split_part: str
    nonmatch: str = "error"
    subflavors: dict[str, Any] = msgspec.field(default_factory=dict)
    name: str = ""
    dataset_config: str | None = None
    split_config: str | None = None


class AuxRef(msgspec.Struct, frozen=True, kw_only=True):
    """An auxiliary file store of a crude dataset (Energon's ``aux:``): cookers get it as the
    keyword ``name`` and read files from it by name. ``kind``: ``"filesystem"`` (a folder,
    ``filesystem://dir``) or ``"dataset"`` (a prepared dataset, files named
    ``<sample key>.<member>``); ``path``: absolute."""

    name: str
    path: str
    kind: str


def aux_refs(
    node: dict, base: Path, where: str, entry: str, *, check: bool = True
) -> tuple[AuxRef, ...]:
    """The ``aux:`` mapping of a reference as records (``()`` without one): a plain path is a
    prepared dataset, ``filesystem://path`` a folder; relative paths are relative to the file
    that names them. Raises ConfigError naming the file, the entry and the name (``check``:
    also when the folder does not exist)."""
    raw = node.get("aux")
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: {entry}: 'aux' must map names to paths, got {raw!r}")
    out = []
    for name, ref in raw.items():
        at = f"{where}: {entry}: aux {name!r}"
        if not isinstance(name, str) or not name.isidentifier() or name in ("primary", "cache"):
            raise ConfigError(
                f"{at}: the name must be a Python identifier other than "
                "'primary' and 'cache' (cookers get it as a keyword)"
            )
        if not isinstance(ref, str) or not ref:
            raise ConfigError(f"{at}: must be a non-empty path string, got {ref!r}")
        kind, target = "dataset", ref
        if ref.startswith("filesystem://"):
            kind, target = "filesystem", ref[len("filesystem://") :]
        if is_url(target) or "://" in target:
            raise ConfigError(
                f"{at}: {ref!r}: only local folders (filesystem://dir) and local prepared "
                "datasets are supported as auxiliary stores; copy the files locally"
            )
        path = Path(target) if os.path.isabs(target) else base.parent / target
        path = path.resolve()
        if check and not path.is_dir():
            raise ConfigError(f"{at}: {ref!r} is not a folder ({path})")
        out.append(AuxRef(name=name, path=str(path), kind=kind))
    return tuple(out)


class Leaf(msgspec.Struct, frozen=True, kw_only=True):
    """One dataset of a resolved split.

    ``name``: unique within the split (schedule keys, stats and messages use it); ``path``:
    absolute dataset folder or table; ``split_part``: the split of that dataset to read;
    ``subflavors``: labels set on every sample; ``weight`` (weighted blends) or
    ``repetitions`` (epochized blends); ``where``: file and entry, for messages; ``join``:
    the secondary datasets joined to this one by sample key (:class:`JoinPart`); ``joiner``:
    the registered sample type the parts are joined into (``function:module.name``: a
    registered joiner function); ``join_name``: the primary's key when ``join:`` is a mapping;
    ``shuffle_over_epochs_multiplier``: this dataset's factor of Energon's multiplier (the
    product down the levels; None: slices in index order); ``dataset_config`` /
    ``split_config``: the dataset's config / split file to read instead of ``dataset.yaml`` /
    ``split.yaml`` (file names in its index folder); ``aux``: auxiliary file stores passed to the
    cookers of a crude dataset (:class:`AuxRef`); ``subset``: the range of the split's samples
    kept (a metadataset's ``subset:``, composed down the levels; None: all).
    """

    name: str
    path: str
    split_part: str
    subflavors: dict[str, Any] = msgspec.field(default_factory=dict)
    weight: float = 1.0
    repetitions: float = 1.0
    where: str = ""
    join: tuple[JoinPart, ...] = ()
    joiner: str | None = None
    join_name: str = ""
    shuffle_over_epochs_multiplier: int | None = 1
    dataset_config: str | None = None
    split_config: str | None = None
    aux: tuple[AuxRef, ...] = ()
    subset: SampleRange | None = None


class MixSchedule(msgspec.Struct, frozen=True, kw_only=True):
    """A weighted blend's weights over the run, one per leaf, as the file gives them.

    ``weights[p]`` is in force from global sample position ``points[p]`` (the first is 0);
    ``linear``: the weights move linearly between points (``schedule_mode: linear``). Plain
    data: the plan tier builds its own schedule from it (:class:`fpipe.plan.WeightSchedule`).
    """

    points: tuple[int, ...]
    weights: tuple[tuple[float, ...], ...]
    linear: bool = False


def is_metadataset(path: str | os.PathLike) -> bool:
    """True when ``path`` names a metadataset file (``.yaml`` / ``.yml``)."""
    p = Path(path)
    return p.suffix.lower() in (".yaml", ".yml") and not p.is_dir()


def no_unknown(obj: dict, allowed: set, where: str, entry: str) -> None:
    """Raise naming the file, the entry and the unknown keys, if any."""
    unknown = sorted(str(k) for k in obj if k not in allowed)
    if unknown:
        raise ConfigError(f"{where}: {entry}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")


def number(value: Any, where: str, entry: str, what: str) -> float:
    """A finite number >= 0 (weights, repetitions), else an error naming the entry."""
    if isinstance(value, dict):
        raise ConfigError(
            f"{where}: {entry}: {what} must be a number; to change weights over training, give "
            "the blend a 'schedule: [[position, {name: weight}], ...]' (see docs/metadataset.md)"
        )
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: {entry}: {what} must be a number, got {value!r}")
    value = float(value)
    if not value >= 0 or value == float("inf"):
        raise ConfigError(f"{where}: {entry}: {what} must be a finite number >= 0, got {value}")
    return value


def subflavors_of(node: dict, where: str, entry: str) -> dict:
    """The entry's own subflavors (Energon's legacy ``subflavor`` included)."""
    sub = node.get("subflavors") or {}
    if not isinstance(sub, dict):
        raise ConfigError(f"{where}: {entry}: subflavors must be a mapping")
    sub = {str(k): v for k, v in sub.items()}
    if node.get("subflavor") is not None:  # Energon's legacy single subflavor
        sub.setdefault("subflavor", node["subflavor"])
    return sub


def entry_name(item: dict) -> str:
    """The name of a blend entry: its ``name:``, else the last part of its (first) path."""
    if item.get("name"):
        return str(item["name"])
    if "path" in item:
        return _default_name(item, item.get("split_part"))
    parts = item["join"]
    first = (list(parts.values()) if isinstance(parts, dict) else parts)[0]
    return Path(str(first["path"])).name


def _default_name(ref: dict, split_part: str | None) -> str:
    """The last part of the path without .yaml, plus ``.split_part`` when given."""
    stem = Path(str(ref["path"])).name
    for suffix in (".yaml", ".yml"):
        stem = stem.removesuffix(suffix)
    return f"{stem}.{split_part}" if split_part else stem


def join_leaf(node, base, split, entry, subflavors, stack, subset=None, *, check=True) -> Leaf:
    """A ``join:`` node as one leaf: the first (primary) dataset, the others joined by key.

    ``join:`` is a list of parts, or a mapping name -> part (the names reach a custom joiner's
    ``from_joined`` as keyword arguments). Part paths may be URLs of datasets on object storage.
    ``subset``: the range of the levels above; the join's own ``subset:`` selects samples of
    the primary. ``check``: refuse paths that do not exist.
    """
    where = stack[-1]
    subset = node_subset(node, subset, where, entry, leaf=True)
    no_unknown(node, JOIN_KEYS | BLEND_ENTRY_KEYS | EPOCH_ENTRY_KEYS, where, entry)
    parts, names = node["join"], None
    if isinstance(parts, dict):
        names, parts = [str(k) for k in parts], list(parts.values())
    if not isinstance(parts, list) or len(parts) < 2:
        raise ConfigError(f"{where}: {entry}.join: expected a list of at least two datasets")
    split_part = node.get("split_part") or split
    outer = {**subflavors_of(node, where, entry), **subflavors}  # the outer levels win
    resolved = []
    for i, part in enumerate(parts):
        e = f"{entry}.join[{names[i] if names else i}]"
        if not isinstance(part, dict) or "path" not in part:
            raise ConfigError(f"{where}: {e}: expected a mapping with 'path'")
        no_unknown(part, JOIN_PART_KEYS, where, e)
        configs = {k: config_name(part.get(k), where, e, k) for k in CONFIG_FILE_KEYS}
        raw = str(part["path"])
        p = raw if is_url(raw) else str((base.parent / raw).resolve())
        if check and not is_url(raw) and not Path(p).exists():
            raise ConfigError(f"{where}: {e}: path {raw!r} does not exist ({p})")
        if not is_url(raw) and is_metadataset(p):
            raise ConfigError(f"{where}: {e}: only datasets can be joined, not a metadataset")
        nonmatch = part.get("nonmatch", "error")
        if nonmatch not in NONMATCH:
            raise ConfigError(f"{where}: {e}: nonmatch must be 'error', 'skip' or 'none'")
        if i == 0 and nonmatch != "error":
            raise ConfigError(
                f"{where}: {e}: the first dataset of a join is the primary (every one of its "
                "samples is kept); 'nonmatch' belongs to the datasets joined to it"
            )
        resolved.append(
            JoinPart(
                path=p,
                split_part=str(part.get("split_part") or split_part),
                nonmatch=nonmatch,
                subflavors={**subflavors_of(part, where, e), **outer},
                name=names[i] if names else "",
                **configs,
            )
        )
    return Leaf(
        name=entry_name(node),
        path=resolved[0].path,
        split_part=resolved[0].split_part,
        subflavors=resolved[0].subflavors,
        where=f"{where}: {entry}",
        join=tuple(resolved[1:]),
        joiner=_joiner_name(node.get("joiner"), where, entry),
        join_name=resolved[0].name,
        dataset_config=resolved[0].dataset_config,
        split_config=resolved[0].split_config,
        shuffle_over_epochs_multiplier=multiplier(node, where, entry),
        subset=subset,
    )


def multiplier(node: dict, where: str, entry: str) -> int | None:
    """An entry's ``shuffle_over_epochs_multiplier``: an integer >= 1 (default 1) or None
    (slices in index order). -1 (slices drawn with replacement, forever) is refused."""
    m = node.get("shuffle_over_epochs_multiplier", 1)
    if m is None:
        return None
    if m == -1:
        raise ConfigError(
            f"{where}: {entry}: shuffle_over_epochs_multiplier: -1 draws slices with replacement "
            "forever, so an epoch no longer holds every sample once; fpipe keeps that "
            "guarantee. Use a large multiplier instead (e.g. 100)"
        )
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ConfigError(
            f"{where}: {entry}: shuffle_over_epochs_multiplier must be an integer >= 1 or null, "
            f"got {m!r}"
        )
    return m


def combine_multipliers(outer: int | None, inner: int | None) -> int | None:
    """Energon's composition of multipliers down the levels: None wins, else the product."""
    return None if outer is None or inner is None else outer * inner


#: The keys of an entry that name another config file of its dataset.
CONFIG_FILE_KEYS = ("dataset_config", "split_config")


def config_name(value: Any, where: str, entry: str, key: str) -> str | None:
    """A ``dataset_config`` / ``split_config`` file name (None when absent)."""
    if value is None:
        return None
    if not is_config_file_name(value):
        raise ConfigError(f"{where}: {entry}: {key} must be a file name, got {value!r}")
    return value


#: Prefix of a joiner that names a registered function (``__function__``), not a sample type.
JOINER_FUNCTION = "function:"


def _joiner_name(joiner: Any, where: str, entry: str) -> str | None:
    """The sample type named by ``joiner:`` (``{__module__, __class__}`` or a string), as
    ``module.Class`` for the allow-list of :func:`fpipe.samples.sample_type_from_name`, or the
    function named by ``{__module__, __function__}`` as ``function:module.name`` for
    :func:`fpipe.samples.joiner_from_name` (resolved by the loader; never imported)."""
    if joiner is None:
        return None
    if isinstance(joiner, dict):
        no_unknown(joiner, {"__module__", "__class__", "__function__"}, where, f"{entry}.joiner")
        if "__function__" in joiner and "__class__" not in joiner:
            module = joiner.get("__module__")
            fn = str(joiner["__function__"])
            return f"{JOINER_FUNCTION}{module}.{fn}" if module else f"{JOINER_FUNCTION}{fn}"
        if "__class__" not in joiner or "__function__" in joiner:
            raise ConfigError(
                f"{where}: {entry}.joiner: expected {{__module__, __class__}} (a sample type) "
                "or {__module__, __function__} (a joiner function)"
            )
        module = joiner.get("__module__")
        return f"{module}.{joiner['__class__']}" if module else str(joiner["__class__"])
    if not isinstance(joiner, str) or not joiner:
        raise ConfigError(f"{where}: {entry}.joiner: expected a sample type name")
    return joiner


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
