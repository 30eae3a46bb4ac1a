"""The entries of a metadataset: leaf records, and each entry checked and read into one.

:mod:`fpipe.storage.config.metadataset` walks a split's tree; every dataset it meets is one
call here (:func:`read_reference` for a ``path:``, :func:`join_leaf` for a ``join:``), which
checks the whole entry and returns its :class:`Leaf` (or the nested metadataset to walk
next). Every error names the file and the entry.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path
from typing import Any

from fpipe.core.errors import ConfigError
from fpipe.storage.config.dataset_yaml import is_config_file_name
from fpipe.storage.config.metadataset_records import AuxRef, JoinPart, Leaf, NestedRef
from fpipe.storage.config.metadataset_subset import SampleRange, node_subset
from fpipe.storage.msc import resolve_location
from fpipe.storage.paths import SCHEMES, is_url

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


def aux_refs(
    node: dict, base: Path, where: str, entry: str, *, check: bool = True
) -> tuple[AuxRef, ...]:
    """The ``aux:`` mapping of a reference as records (``()`` without one): a plain path is a
    prepared dataset, ``filesystem://path`` a folder (``filesystem+msc://PROFILE/path``,
    ``filesystem+s3://...``: a folder on object storage); relative paths are relative to the
    file that names them (in its bucket, for a metadataset file on object storage). Paths
    take Energon's schemes as a ``path:`` does (:func:`user_path`). Raises ConfigError naming
    the file, the entry and the name (``check``: also when a local folder does not exist; one
    on object storage is read when a cooker asks for a file)."""
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
        elif ref.startswith("filesystem+"):  # Energon's folder on object storage
            kind, target = "filesystem", ref[len("filesystem+") :]
            if not is_url(target):
                raise ConfigError(
                    f"{at}: {ref!r}: filesystem+ is followed by a URL (filesystem+msc://"
                    "PROFILE/path); a local folder is filesystem://path"
                )
        target = user_path(beside(base, target, at), at)
        if is_url(target):
            out.append(AuxRef(name=name, path=target, kind=kind))
            continue
        path = _local(base, target)
        if check and not path.is_dir():
            raise ConfigError(f"{at}: {ref!r} is not a folder ({path})")
        out.append(AuxRef(name=name, path=str(path), kind=kind))
    return tuple(out)


def _local(base: Path | str, raw: str) -> Path:
    """The absolute local path of entry ``raw`` (not a URL) of the file ``base`` (a relative
    one of a file on object storage was made a URL by :func:`beside`)."""
    if os.path.isabs(raw):
        return Path(raw).resolve()
    return (Path(base).parent / raw).resolve()


def _exists(path: Path) -> bool:
    """Whether a dataset is at ``path``: a file or folder, or a Megatron corpus prefix (whose
    files are ``path.idx`` and ``path.bin``)."""
    return path.exists() or Path(f"{path}.idx").is_file()


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


def user_path(raw: str, at: str) -> str:
    """A ``path:`` as written, with Energon's schemes resolved (``dss://``, ``msc://``
    profiles: :func:`~fpipe.storage.msc.resolve_location`, which refuses an unknown profile
    here, when the metadataset is read); a scheme fpipe does not read is refused, rather than
    taken for a relative folder. ``at``: where it is written (``"<file>: <entry>"``), for the
    messages."""
    if "://" not in raw:
        return raw
    scheme = raw.split("://", 1)[0].lower()
    if scheme != "dss" and scheme not in SCHEMES:
        raise ConfigError(
            f"{at}: path {raw!r}: fpipe does not read {scheme}:// paths; give a local folder, "
            f"an msc://PROFILE/path or dss://NAME@VERSION path, or a URL of "
            f"{', '.join(s + '://' for s in SCHEMES if s != 'msc')}"
        )
    try:
        return resolve_location(raw)
    except ConfigError as e:
        raise ConfigError(f"{at}: {e}") from None


def beside(base: Path | str, raw: str, at: str) -> str:
    """Path entry ``raw`` of the metadataset file ``base`` as it is to be opened: a relative
    path named by a file on object storage (``base`` a URL) becomes the URL of that path in
    the file's folder (``..`` climbs folders, but not above the bucket or ``msc://`` profile:
    refused naming the entry); anything else stays as written (local relative paths are
    resolved against ``base``'s folder by the caller)."""
    if not is_url(base) or "://" in raw or os.path.isabs(raw):
        return raw
    scheme, rest = str(base).split("://", 1)
    root, _, inner = rest.partition("/")
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(inner), raw))
    if joined == ".." or joined.startswith("../"):
        raise ConfigError(
            f"{at}: path {raw!r} leads above {scheme}://{root}, the top of the store the "
            "metadataset file is in; name the dataset by its full URL"
        )
    return f"{scheme}://{root}" if joined == "." else f"{scheme}://{root}/{joined}"


def names_metadataset(path: str) -> bool:
    """True when the local path or URL ``path`` ends in ``.yaml`` / ``.yml``."""
    return posixpath.splitext(path)[1].lower() in (".yaml", ".yml")


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
        path = _local(base, raw)
    # Subflavors: the levels above override the entry's own (Energon's merge order).
    merged = {**subflavors_of(node, where, entry), **subflavors}
    name = entry_name(node)
    if check and not is_url(raw) and not _exists(path):
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
        p = raw if is_url(raw) else str(_local(base, raw))
        if check and not is_url(raw) and not _exists(Path(p)):
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
