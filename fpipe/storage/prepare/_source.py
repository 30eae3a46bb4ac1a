"""What a dataset folder already says, and what its index will say.

:func:`_find_source` reads a folder's kind, shards, dataset.yaml and split.yaml (an Energon
folder's ``.nv-meta`` or a previous fpipe index); :func:`_dataset_config` puts the options over
them (guessing the sample type from common field names) and checks the field map against the
sample type; :func:`_aliases` maps ``width`` / ``height`` to the first field's
``<field>.width`` / ``<field>.height`` columns when the index has no plain ones.
Every mode of ``fpipe prepare`` (:mod:`.run`) writes its dataset.yaml through these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import msgspec

from fpipe.storage.config.dataset_yaml import (
    CRUDE,
    DatasetConfig,
    SplitConfig,
    load_dataset_config,
    load_split_config,
)
from fpipe.storage.prepare._checks import check_sample_type
from fpipe.storage.prepare._options import PrepareOptions
from fpipe.storage.read.energon import (
    exclude_to_keys,
    exclude_to_keys_by_walk,
    has_shard_counts,
    is_energon,
    read_energon_meta,
    read_energon_yaml,
)
from fpipe.storage.read.tar.index import INDEX_DIR
from fpipe.storage.read.webdataset import list_shards

# field names -> sample type guessed when --sample-type is not given
_GUESS = {
    frozenset({"image", "caption"}): "CaptioningSample",
    frozenset({"image"}): "ImageSample",
    frozenset({"text"}): "TextSample",
    frozenset({"image", "label"}): "ImageClassificationSample",
    frozenset({"image", "context", "answers"}): "VQASample",
    frozenset({"video", "caption"}): "CaptionedVideoSample",
    frozenset({"audio", "caption"}): "CaptionedAudioSample",
    frozenset({"image", "context"}): "VQASample",
}


def _guess_sample_type(field_map: Mapping[str, object]) -> str:
    return _GUESS.get(frozenset(field_map), CRUDE) if field_map else CRUDE


def _aliases(columns: Iterable[str], field_map: Mapping[str, object]) -> dict[str, str]:
    cols = list(columns)
    order = list(field_map) + [c[: -len(".width")] for c in cols if c.endswith(".width")]
    for f in order:
        if f"{f}.width" in cols and "width" not in cols:
            return {"width": f"{f}.width", "height": f"{f}.height"}
    return {}


class _Source(msgspec.Struct, frozen=True):
    """What a folder already says: its kind, shards, dataset.yaml and split.yaml."""

    kind: str  #: "webdataset" | "energon"
    shards: list[str]
    config: DatasetConfig
    split: SplitConfig | None


def _find_source(p: Path, opts: PrepareOptions) -> _Source:
    """Shards, config and split of an Energon folder (``.nv-meta``; without its
    ``.info.yaml``, the shards are found as in a WebDataset folder) or a WebDataset folder
    (a previous ``.fpipe`` index's YAML files)."""
    if is_energon(p) and not has_shard_counts(p):  # .nv-meta with dataset.yaml/split.yaml only
        config, split = read_energon_yaml(p)
        shards = list_shards(p, list(opts.shards))
        if split is not None:
            split = SplitConfig(
                split_parts=split.split_parts,
                exclude=exclude_to_keys_by_walk(p, split, shards),
            )
        return _Source("energon", shards, config, split)
    if is_energon(p):
        meta = read_energon_meta(p)
        shards = list(meta.shard_counts)
        if opts.shards:
            wanted = set(list_shards(p, list(opts.shards)))
            shards = [s for s in shards if s in wanted]
        split = meta.split
        if split is not None:  # Energon's per-shard indices become keys: fpipe may drop samples
            split = SplitConfig(split_parts=split.split_parts, exclude=exclude_to_keys(p, meta))
        return _Source("energon", shards, meta.config, split)
    config = load_dataset_config(p / INDEX_DIR / "dataset.yaml")
    split = load_split_config(p / INDEX_DIR / "split.yaml")
    return _Source("webdataset", list_shards(p, list(opts.shards)), config, split)


def _dataset_config(existing: DatasetConfig, opts: PrepareOptions) -> DatasetConfig:
    """dataset.yaml to write: options over what the folder had; checked against the type."""
    fmap = opts.fields if opts.fields is not None else dict(existing.field_map)
    kept = existing.sample_type if existing.sample_type != CRUDE else None
    config = DatasetConfig(
        sample_type=opts.sample_type or kept or _guess_sample_type(fmap),
        field_map=fmap,
        subflavors=dict(opts.subflavors if opts.subflavors is not None else existing.subflavors),
        sample_loader=existing.sample_loader,
    )
    check_sample_type(config.sample_type, fmap, existing.sample_loader)
    return config
