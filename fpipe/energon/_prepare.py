"""Energon's Python prepare API over fpipe's one implementation
(:func:`fpipe.storage.prepare_dataset`).

``BaseWebdatasetFactory.prepare_dataset(parent_path, paths, split_parts_ratio=...)`` indexes
the shards and writes the split Energon's call writes (the same shards in each split part, in
the same order: Energon's seeded shuffle and cut points), as fpipe's index in ``.fpipe/``,
and Energon's ``.nv-meta`` files beside it (``.info.json``, ``split.yaml`` and, where there is
none, ``dataset.yaml``), whose later edits are read when the dataset is opened. Keywords that
would change the data fpipe has no counterpart for are refused.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import numpy as np

from fpipe.core.errors import ConfigError

__all__ = ["BaseWebdatasetFactory"]

_FACTORY = (
    "megatron.energon.BaseWebdatasetFactory is not supported by fpipe: fpipe reads the "
    "dataset's .nv-meta files itself and builds no dataset factories; use "
    "fpipe.energon.get_train_dataset / get_val_dataset on the folder (its classmethod "
    "prepare_dataset is supported)"
)


def _energon_split(
    shards: list[str],
    ratio: Sequence[tuple[str, float]] | None,
    patterns: Sequence[tuple[str, str]] | None,
    seed: int | None,
) -> dict[str, list[str]]:
    """The shards of each split part as Energon 7.4's prepare assigns them."""
    from fpipe.storage.paths import expand_braces

    if ratio is not None:
        total = sum(r for _, r in ratio)
        order = list(shards)
        if seed is not None:  # Energon's own seeded shuffle (a local generator, not a global one)
            random.Random(seed).shuffle(order)
        parts, acc, start = {}, 0.0, 0
        for name, r in ratio:
            acc += r / total
            end = int(len(order) * acc)
            parts[name] = order[start:end]
            start = end
        return parts
    if patterns is None:
        raise ConfigError(
            "BaseWebdatasetFactory.prepare_dataset needs split_parts_ratio or split_parts_patterns"
        )
    out = {}
    for name, pattern in patterns:
        regexes = [re.compile(p) for p in expand_braces(pattern)]
        out[name] = [s for s in shards if any(r.match(s) for r in regexes)]
    return out


def _prepare_dataset(
    parent_path: str | os.PathLike,
    paths: list[str],
    *,
    split_parts_ratio: list[tuple[str, float]] | None = None,
    split_parts_patterns: list[tuple[str, str]] | None = None,
    split_config: str = "split.yaml",
    shuffle_seed: int | None = 42,
    progress_fn: Callable[..., Any] | None = None,
    workers: int = 32,
    tar_index_only: bool = False,
    media_filter: Any = None,
    fix_duplicates: bool = False,
    index_sqlite_tmp_path: Any = None,
) -> set[str]:
    """Energon's ``BaseWebdatasetFactory.prepare_dataset``: index the shards ``paths`` (relative
    to ``parent_path``, brace patterns expanded) and write the split, as Energon assigns shards
    to split parts (``split_parts_ratio``: shuffled with ``shuffle_seed``, cut by ratio;
    ``split_parts_patterns``: regular expressions). Returns the member extensions found, as
    Energon does. ``progress_fn``, ``workers`` (capped at the CPUs) and
    ``index_sqlite_tmp_path`` change no data; ``media_filter`` (a ``MediaFilterConfig``) also
    writes the selected members' media metadata where Energon does
    (``.nv-meta/index.sqlite``); ``split_config`` other than ``split.yaml``,
    ``tar_index_only`` and ``fix_duplicates`` are refused."""
    from fpipe.storage import SplitConfig, prepare_dataset
    from fpipe.storage.paths import expand_braces

    refused = {
        "split_config": split_config not in ("split.yaml", "split.json"),
        "tar_index_only": tar_index_only,
        "fix_duplicates": fix_duplicates,
    }
    bad = [k for k, v in refused.items() if v]
    if bad:
        raise ConfigError(
            f"BaseWebdatasetFactory.prepare_dataset({bad[0]}=...) is not supported by fpipe: "
            "fpipe writes one index (.fpipe/, with the split) and never rewrites shards; "
            "a sample with a duplicate key is reported and left out"
        )
    shards = [q for p in paths for q in expand_braces(str(p))]
    parts = _energon_split(shards, split_parts_ratio, split_parts_patterns, shuffle_seed)
    report = prepare_dataset(
        parent_path,
        shards=tuple(shards),
        split=SplitConfig(split_parts=parts),
        workers=max(1, min(int(workers), os.cpu_count() or 1)),
    )
    _write_nv_meta(parent_path, report, parts)
    if media_filter is not None:
        from fpipe.energon._media import prepare_dataset_media

        prepare_dataset_media(parent_path, media_filter)
    return set(report.members)


def _write_nv_meta(parent_path: str | os.PathLike, report: Any, parts: dict) -> None:
    """Energon's ``.nv-meta`` files beside the index (:mod:`fpipe.storage.read.nv_meta`)."""
    from fpipe.storage import open_dataset
    from fpipe.storage.config.dataset_yaml import DatasetConfig
    from fpipe.storage.read.nv_meta import write_nv_meta

    record = open_dataset(parent_path).record
    counts = {name: int(n) for name, n in zip(record.shard_names, np.diff(record.shard_starts()))}
    config = DatasetConfig(sample_type=report.sample_type, field_map=dict(report.field_map))
    write_nv_meta(os.fspath(parent_path), report.index_dir, counts, parts, config)


def _refuse_factory(*_args: Any, **_kwargs: Any) -> NoReturn:
    raise ConfigError(_FACTORY)


class BaseWebdatasetFactory:
    """Energon's ``BaseWebdatasetFactory``: only its classmethod ``prepare_dataset`` (the
    Python prepare API); building a factory is refused (fpipe builds none)."""

    __new__ = _refuse_factory  # type: ignore[assignment]
    prepare_dataset = staticmethod(_prepare_dataset)

    def __init_subclass__(cls, **kwargs: Any) -> NoReturn:
        raise ConfigError(_FACTORY)
