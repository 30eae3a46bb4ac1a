"""One metadataset file read: parsed with ``yaml.safe_load`` into a :class:`Metadataset`.

A local file, or an object on object storage (``msc://PROFILE/x.yaml``, ``s3://bucket/x.yaml``:
one GET). The names ``__module__: megatron.energon`` / ``__class__: MetadatasetV2`` are
accepted as labels, never imported; a version-1 ``Metadataset`` split (``datasets: [...]``) is
read as the weighted ``blend:`` it means. Its splits are checked by
:mod:`fpipe.storage.config.metadataset_walk`; a cycle between nested files is refused here,
naming the chain.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
import yaml

from fpipe.core.errors import ConfigError
from fpipe.storage.config.dataset_yaml import _load_yaml
from fpipe.storage.config.metadataset_fields import no_unknown
from fpipe.storage.config.safe_yaml import safe_load
from fpipe.storage.paths import is_url

__all__ = ["Metadataset", "load_file", "located"]

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


class Metadataset(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed metadataset file: its absolute ``path`` and the raw node of each split."""

    path: str
    splits: dict[str, Any]
    #: split -> its walk ``(mode, leaves, schedule)`` with paths checked, kept by
    #: :func:`~fpipe.storage.config.metadataset.load_metadataset`'s check: both readings of
    #: a split and a later :func:`~fpipe.storage.config.metadataset.resolve_mix` reuse it
    #: instead of walking 10,000 entries again
    walked: dict[str, Any] = msgspec.field(default_factory=dict)


def located(path: str | os.PathLike) -> Path | str:
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


def load_file(path: Path | str, stack: tuple[str, ...]) -> Metadataset:
    """The metadataset file ``path`` (from :func:`located`), read and its top level checked;
    ``stack``: the files that nest it, outermost first (a cycle back to one is refused)."""
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
