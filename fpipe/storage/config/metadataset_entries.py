"""A ``path:`` entry of a metadataset, checked whole and read into a leaf record.

:mod:`fpipe.storage.config.metadataset_walk` walks a split's tree; every dataset it meets is
one call here (:func:`read_reference` for a ``path:``,
:func:`~fpipe.storage.config.metadataset_join.join_leaf` for a ``join:``), which checks the
whole entry and returns its :class:`Leaf` (or the nested metadataset to walk next). The
checks of single fields are in :mod:`fpipe.storage.config.metadataset_fields`, where paths
point in :mod:`fpipe.storage.config.metadataset_paths`; their names are importable from here
too. Every error names the file and the entry.
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
    number,
    subflavors_of,
)
from fpipe.storage.config.metadataset_join import JOIN_KEYS, JOINER_FUNCTION, join_leaf
from fpipe.storage.config.metadataset_paths import (
    aux_refs,
    beside,
    dataset_exists,
    is_metadataset,
    local_path,
    names_metadataset,
    user_path,
)
from fpipe.storage.config.metadataset_records import Leaf, NestedRef
from fpipe.storage.config.metadataset_subset import SampleRange, node_subset
from fpipe.storage.paths import is_url

__all__ = [
    "BLEND_ENTRY_KEYS",
    "CONFIG_FILE_KEYS",
    "EPOCH_ENTRY_KEYS",
    "GPT_KEYS",
    "JOINER_FUNCTION",
    "JOIN_KEYS",
    "REF_KEYS",
    "aux_refs",
    "beside",
    "config_name",
    "entry_name",
    "is_metadataset",
    "join_leaf",
    "multiplier",
    "names_metadataset",
    "no_unknown",
    "number",
    "read_reference",
    "subflavors_of",
    "user_path",
]

#: Keys of a reference to a dataset or a nested metadataset (a ``path:`` entry).
REF_KEYS = {
    "path",
    "name",
    "split_part",
    "subflavors",
    "subflavor",
    "dataset_config",
    "split_config",
    "shuffle_over_epochs_multiplier",
    "aux",
    "subset",
}
#: Keys of a ``path:`` entry naming a Megatron corpus whose samples are GPT sequences (its
#: open arguments, see :mod:`fpipe.storage.read.gpt_corpus`; ``sequence_length`` turns them on).
GPT_KEYS = {
    "sequence_length",
    "add_extra_token_to_sequence",
    "eod_token",
    "pad_token",
    "eod_mask_loss",
    "reset_position_ids",
    "order",
    "split",
    "seed",
    "num_samples",
}
REF_KEYS |= GPT_KEYS


def read_reference(
    node: dict,
    base: Path,
    split: str,
    entry: str,
    subflavors: dict,
    stack: tuple[str, ...],
    subset: SampleRange | None = None,
    *,
    extra: frozenset[str] | set[str] = frozenset(),
    check: bool = True,
) -> Leaf | NestedRef:
    """A ``path:`` entry of file ``stack[-1]`` (keys: :data:`REF_KEYS` and ``extra``, those
    of the blend it is in), checked whole: the :class:`Leaf` of the dataset it names, or the
    :class:`NestedRef` of a nested metadataset. ``subflavors`` and ``subset`` come from the
    levels above (whose subflavors win); ``check``: refuse paths that do not exist."""
    where = stack[-1]
    no_unknown(node, REF_KEYS | extra, where, entry)
    raw = node["path"]
    if not isinstance(raw, str) or not raw:
        raise ConfigError(f"{where}: {entry}: 'path' must be a non-empty string")
    raw = user_path(beside(base, raw, f"{where}: {entry}"), f"{where}: {entry}")
    split_part = node.get("split_part") or split
    if is_url(raw):  # a dataset on object storage: opened (and checked) when it is loaded
        path: Any = raw
    else:
        path = local_path(base, raw)
    # Subflavors: the levels above override the entry's own (Energon's merge order).
    merged = {**subflavors_of(node, where, entry), **subflavors}
    name = entry_name(node)
    if check and not is_url(raw) and not dataset_exists(path):
        raise ConfigError(f"{where}: {entry}: path {raw!r} does not exist ({path})")
    mult = multiplier(node, where, entry)
    gpt = _gpt_open_kwargs(node, where, entry)
    if gpt.get("order") == "megatron" and "shuffle_over_epochs_multiplier" not in node:
        mult = None  # Megatron's order is the dataset's own: its samples are not reshuffled
    configs = {key: config_name(node.get(key), where, entry, key) for key in CONFIG_FILE_KEYS}
    aux = aux_refs(node, base, where, entry, check=check)
    nested = names_metadataset(raw) if is_url(raw) else is_metadataset(path)
    subset = node_subset(node, subset, where, entry, leaf=not nested)
    if nested:
        given = [key for key, value in configs.items() if value is not None] + sorted(gpt)
        if given or aux:
            key = given[0] if given else "aux"
            raise ConfigError(f"{where}: {entry}: {key} applies to a dataset, not a metadataset")
        return NestedRef(
            path=path,
            split_part=split_part,
            name=name,
            subflavors=merged,
            multiplier=mult,
            subset=subset,
        )
    return Leaf(
        name=name,
        path=str(path),
        split_part=split_part,
        subflavors=merged,
        where=f"{where}: {entry}",
        shuffle_over_epochs_multiplier=mult,
        dataset_config=configs["dataset_config"],
        split_config=configs["split_config"],
        aux=aux,
        subset=subset,
        open_kwargs=gpt,
    )


def _gpt_open_kwargs(node: dict, where: str, entry: str) -> dict[str, Any]:
    """The GPT-sequence keys of an entry (its open arguments; empty without them)."""
    given = {k: node[k] for k in GPT_KEYS if k in node}
    if given and node.get("sequence_length") is None:
        raise ConfigError(
            f"{where}: {entry}: {sorted(given)} make GPT sequences of a Megatron corpus; "
            "give sequence_length too"
        )
    if isinstance(given.get("num_samples"), list):
        given["num_samples"] = tuple(given["num_samples"])  # open arguments are hashable
    return given
