"""A plan config: a dataset, a world size and the options of :func:`fpipe.get_train_dataset`.

``fpipe plan``, ``fpipe state show --config`` and ``fpipe inspect`` read one from a YAML file
(``yaml.safe_load``) or from a dataset path plus flags::

    path: data/coco              # relative to the YAML file's folder
    world_size: 8                # data-parallel ranks (default 1)
    global_batch_size: 256       # then any option of get_train_dataset, by its keyword name
    seed: 1234
    shuffle_buffer_size: 1000
    bucket_config: buckets.yaml  # a YAML file next to this one, a mapping or YAML text

The options convert to a :class:`~fpipe.datasets.options.DatasetOptions` (``msgspec.convert``),
so a plan config holds every option that is plain data; an unknown key is an error naming the
file and the key. :func:`build_dataset` makes the :class:`~fpipe.loader.PlannedDataset` of one
rank from it.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from fpipe.core.errors import ConfigError
from fpipe.datasets.options import PYTHON_ONLY, DatasetOptions

if TYPE_CHECKING:
    from fpipe.loader.planned import PlannedDataset

__all__ = ["PlanConfig", "build_dataset", "load_plan_config"]

#: The keys of a plan config besides the options of get_train_dataset.
_PLAN_KEYS = ("path", "world_size", "mix_history")


class PlanConfig(msgspec.Struct, frozen=True, kw_only=True):
    """What to plan: the dataset ``path`` (a folder, table or metadataset.yaml), the number of
    data-parallel ranks, and the options of :func:`fpipe.get_train_dataset`."""

    path: str
    world_size: int = 1
    options: DatasetOptions = msgspec.field(default_factory=DatasetOptions)
    #: a JSON file of ``loader.mix_history()``: the run's online weight changes, applied at
    #: their steps (see docs/steering.md)
    mix_history: str | None = None


def load_plan_config(
    config: str | os.PathLike, overrides: Mapping[str, Any] | None = None
) -> PlanConfig:
    """The plan config in a YAML file, or a dataset path (a folder, table or metadataset.yaml)
    with default options; ``overrides`` (e.g. command-line flags) win, None values ignored.

    Raises ConfigError naming the file for a key that is not an option, a value of the wrong
    type, or a config that sets no batch size (``batch_size``, ``global_batch_size`` or a
    ``bucket_config``).
    """
    p = Path(config)
    where = str(p)
    raw: dict[str, Any] = {}
    if p.is_file() and p.suffix.lower() in (".yaml", ".yml"):
        raw = _read_yaml(p)
    else:
        raw["path"] = str(config)
        where = "the plan options"
    raw.update({k: v for k, v in (overrides or {}).items() if v is not None})
    cfg = _convert(raw, where)
    opts = cfg.options
    if opts.batch_size is None and opts.global_batch_size is None and opts.bucket_config is None:
        raise ConfigError(
            "the plan needs batch_size (per rank), global_batch_size or a bucket_config"
        )
    return cfg


def _read_yaml(p: Path) -> dict[str, Any]:
    """A plan YAML's mapping, its paths made relative to the file's folder."""
    import yaml

    loaded = yaml.safe_load(p.read_text()) or {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"{p}: a plan config is a YAML mapping")
    if "splits" in loaded:  # a metadataset.yaml given directly: it is the dataset
        loaded = {"path": p.name}
    raw = {str(k): v for k, v in loaded.items()}
    if "path" not in raw:
        raise ConfigError(f"{p}: the plan config needs 'path' (the dataset)")
    dpath = Path(str(raw["path"])).expanduser()
    raw["path"] = str(dpath if dpath.is_absolute() else p.parent / dpath)
    mh = raw.get("mix_history")
    if isinstance(mh, str) and not Path(mh).expanduser().is_absolute():
        raw["mix_history"] = str(p.parent / mh)  # a JSON file next to the config
    bc = raw.get("bucket_config")
    if isinstance(bc, str) and "\n" not in bc and not Path(bc).expanduser().is_absolute():
        raw["bucket_config"] = str(p.parent / bc)  # a YAML file next to the config
    return raw


def _convert(raw: dict[str, Any], where: str) -> PlanConfig:
    """The record of a plan config's mapping; errors name ``where`` and the key."""
    fields = DatasetOptions.__struct_fields__
    options = {k: v for k, v in raw.items() if k not in _PLAN_KEYS}
    unknown = sorted(set(options) - set(fields))
    if unknown:
        close = [m for k in unknown for m in difflib.get_close_matches(k, fields, n=1)]
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise ConfigError(
            f"{where}: unknown keys {unknown}{hint}; a plan config holds "
            f"{', '.join(_PLAN_KEYS)} and the options of get_train_dataset: "
            f"{', '.join(f for f in fields if f not in PYTHON_ONLY)}"
        )
    objects = sorted(PYTHON_ONLY & set(options))
    if objects:
        raise ConfigError(
            f"{where}: {objects} take Python objects; pass them to get_train_dataset, "
            "a plan config cannot hold them"
        )
    try:
        world_size = msgspec.convert(raw.get("world_size") or 1, int)
    except msgspec.ValidationError as e:
        raise ConfigError(f"{where}: world_size: {e}") from None
    try:
        converted = msgspec.convert(options, DatasetOptions)
    except msgspec.ValidationError as e:
        raise ConfigError(f"{where}: {e}") from None
    history = raw.get("mix_history")
    if history is not None and not isinstance(history, str):
        raise ConfigError(f"{where}: mix_history is the path of a JSON file, got {history!r}")
    return PlanConfig(
        path=str(raw["path"]), world_size=world_size, options=converted, mix_history=history
    )


def build_dataset(cfg: PlanConfig, rank: int = 0) -> PlannedDataset:
    """The :class:`~fpipe.loader.PlannedDataset` of ``rank`` for a plan config."""
    from fpipe.datasets.dataset import build_train_dataset
    from fpipe.loader.topology import Topology

    topology = Topology(rank=rank, world_size=cfg.world_size)
    ds = build_train_dataset(cfg.path, msgspec.structs.replace(cfg.options, topology=topology))
    if cfg.mix_history is None:
        return ds
    return dataclasses.replace(ds, plan=_steered(ds.plan, cfg.mix_history))


def _steered(plan: Any, path: str) -> Any:
    """``plan`` with the online weight changes of the mix history in the JSON file ``path``."""
    import json

    from fpipe.loader.steering import MixHistory, SteeredPlan, blend_of

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"mix_history {path}: {e}") from None
    _, config = blend_of(plan)
    return SteeredPlan(plan, MixHistory.of(data, config.datasets).changes)
