"""A ``join:`` entry of a metadataset: datasets joined by sample key, read into one leaf.

The first dataset is the primary (every one of its samples is kept); the others are found by
its sample keys (:class:`~fpipe.storage.config.metadataset_records.JoinPart`), and the parts
are joined into the sample type or joiner function named by ``joiner:`` (a name, never
imported here). Every error names the file and the entry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fpipe.core.errors import ConfigError
from fpipe.storage.config.metadataset_fields import (
    BLEND_ENTRY_KEYS,
    CONFIG_FILE_KEYS,
    EPOCH_ENTRY_KEYS,
    config_name,
    entry_name,
    multiplier,
    no_unknown,
    subflavors_of,
)
from fpipe.storage.config.metadataset_paths import (
    beside,
    dataset_exists,
    is_metadataset,
    local_path,
    user_path,
)
from fpipe.storage.config.metadataset_records import JoinPart, Leaf
from fpipe.storage.config.metadataset_subset import node_subset
from fpipe.storage.paths import is_url

__all__ = ["JOINER_FUNCTION", "JOIN_KEYS", "join_leaf"]

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


#: Prefix of a joiner that names a registered function (``__function__``), not a sample type.
JOINER_FUNCTION = "function:"


def join_leaf(
    node, base, split, entry, subflavors, stack, subset=None, *, extra=None, check=True
) -> Leaf:
    """A ``join:`` node as one leaf: the first (primary) dataset, the others joined by key.

    ``join:`` is a list of parts, or a mapping name -> part (the names reach a custom joiner's
    ``from_joined`` as keyword arguments). Part paths may be URLs of datasets on object storage.
    ``subset``: the range of the levels above; the join's own ``subset:`` selects samples of
    the primary. ``extra``: the keys the blend it is an entry of adds (None: a weight or
    repetitions are let pass). ``check``: refuse paths that do not exist.
    """
    where = stack[-1]
    if extra is None:
        extra = BLEND_ENTRY_KEYS | EPOCH_ENTRY_KEYS
    no_unknown(node, JOIN_KEYS | extra, where, entry)
    subset = node_subset(node, subset, where, entry, leaf=True)
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
        raw = user_path(beside(base, str(part["path"]), f"{where}: {e}"), f"{where}: {e}")
        p = raw if is_url(raw) else str(local_path(base, raw))
        if check and not is_url(raw) and not dataset_exists(Path(p)):
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
