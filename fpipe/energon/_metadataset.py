"""Energon's metadataset loaders on fpipe: ``load_dataset``, ``traverse_metadataset``,
``prepare_metadataset``.

Energon's ``load_dataset(path)`` gives a loader whose ``get_datasets(...)`` lists the split's
datasets as factories with their weights or repetitions and the blend mode; fpipe reads the
same file with :func:`fpipe.storage.load_metadataset` and flattens a split with
:func:`fpipe.storage.resolve_mix`, so the loaders here only put those leaves into Energon's
records: each dataset is a :class:`~fpipe.energon._factory.DatasetFactory` (``.build()``).
Training still goes through ``get_train_dataset`` on the metadataset path, which blends in the
plan.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from fpipe.core.errors import ConfigError

__all__ = [
    "DatasetLoader",
    "DatasetLoaderInterface",
    "LoadedDataset",
    "LoadedDatasetList",
    "MetadatasetLoader",
    "TraversedDatasetReference",
    "load_dataset",
    "prepare_metadataset",
    "traverse_metadataset",
]


@dataclasses.dataclass
class LoadedDataset:
    """One dataset of a split: its factory, and its ``weight`` (a weighted blend) or
    ``repetitions`` (an epochized blend), as Energon's record."""

    dataset: Any
    weight: float | int | None = None
    repetitions: float | int | None = None
    aux: dict[str, Any] | None = None


@dataclasses.dataclass
class LoadedDatasetList:
    """The datasets of a split and how they blend (a ``DatasetBlendMode``)."""

    datasets: list[LoadedDataset]
    blend_mode: Any = None


@dataclasses.dataclass
class TraversedDatasetReference:
    """A leaf dataset of a split, as Energon's traversal gives it: its path, split part,
    ``aux`` stores (name -> path) and the subflavors the metadataset levels give it (the
    dataset's own dataset.yaml subflavors are not read)."""

    path: Any
    split_part: str
    aux: dict[str, Any]
    subflavors: dict[str, Any]


class DatasetLoaderInterface:
    """Energon's base of dataset loaders: ``get_datasets(...)`` and ``post_initialize()``."""

    def post_initialize(self, mds_path: Any = None) -> None:
        """Nothing to do: fpipe reads and checks the file when the loader is made."""

    def get_datasets(self, **kwargs: Any) -> LoadedDatasetList:
        raise NotImplementedError


@dataclasses.dataclass
class DatasetLoader(DatasetLoaderInterface):
    """Energon's loader of one dataset folder: ``get_datasets`` lists its one factory."""

    path: str | os.PathLike
    split_part: str | None = None
    subflavors: dict[str, Any] | None = None
    shuffle_over_epochs_multiplier: int | None = 1
    dataset_config: str | None = None
    split_config: str | None = None

    def get_dataset(
        self,
        *,
        training: bool,
        split_part: str | None = None,
        worker_config: Any,
        subflavors: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """The factory of the dataset's split (this loader's ``split_part`` wins, as in
        Energon; the loader's subflavors are merged under those given)."""
        from fpipe.energon._factory import get_dataset_from_config

        split_part = self.split_part or split_part
        if split_part is None:
            raise ConfigError(f"{self.path}: no split part given")
        if self.subflavors is not None:
            subflavors = {**self.subflavors, **(subflavors or {})}
        for key in ("dataset_config", "split_config"):
            if kwargs.get(key) is None and getattr(self, key) is not None:
                kwargs[key] = getattr(self, key)
        return get_dataset_from_config(
            self.path,
            training=training,
            split_part=split_part,
            worker_config=worker_config,
            subflavors=subflavors,
            **kwargs,
        )

    def get_datasets(
        self,
        *,
        training: bool,
        split_part: str,
        worker_config: Any,
        subflavors: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> LoadedDatasetList:
        """The one dataset, blend mode ``NONE``."""
        from fpipe.energon._constants import DatasetBlendMode

        kwargs.pop("shuffle_over_epochs_multiplier", None)
        factory = self.get_dataset(
            training=training,
            split_part=split_part,
            worker_config=worker_config,
            subflavors=subflavors,
            **kwargs,
        )
        return LoadedDatasetList(datasets=[LoadedDataset(dataset=factory)],
                                 blend_mode=DatasetBlendMode.NONE)  # fmt: skip


@dataclasses.dataclass
class MetadatasetLoader(DatasetLoaderInterface):
    """A metadataset file read by fpipe (checked when made), as Energon's ``Metadataset`` /
    ``MetadatasetV2`` loader."""

    path: str

    def __post_init__(self) -> None:
        from fpipe.storage.config.metadataset import load_metadataset

        self._md = load_metadataset(self.path)

    def get_datasets(
        self,
        *,
        training: bool,
        split_part: str,
        worker_config: Any,
        subflavors: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> LoadedDatasetList:
        """Each leaf dataset of split ``split_part`` as a factory, with the weights (a
        ``blend:``, normalized and composed down the levels) or repetitions (a
        ``blend_epochized:``) of the file, whatever ``training`` is (Energon's validation
        concatenates them later). A ``join:`` or ``subset:`` leaf, or one with ``aux:``, is
        refused here: build the split with ``get_train_dataset`` / ``get_val_dataset`` on the
        metadataset path."""
        from fpipe.energon._constants import DatasetBlendMode
        from fpipe.energon._factory import DatasetFactory
        from fpipe.storage.config.metadataset import resolve_mix

        kwargs.pop("shuffle_over_epochs_multiplier", None)
        mix = resolve_mix(self._md, split_part, training=True)
        mode = {
            "blend": DatasetBlendMode.DATASET_WEIGHT,
            "blend_epochized": DatasetBlendMode.SAMPLE_REPETITIONS,
        }.get(mix.mode, DatasetBlendMode.NONE)
        out = []
        for leaf in mix.leaves:
            if leaf.join or leaf.subset is not None or leaf.aux:
                raise ConfigError(
                    f"{leaf.where}: load_dataset(...).get_datasets() lists plain datasets; a "
                    "join:, subset: or aux: entry is built by fpipe.energon.get_train_dataset "
                    f"/ get_val_dataset on {self.path}"
                )
            factory = DatasetFactory(
                leaf.path,
                training=training,
                worker_config=worker_config,
                subflavors={**leaf.subflavors, **(subflavors or {})},
                split_part=leaf.split_part,
                **{k: getattr(leaf, k) for k in ("dataset_config", "split_config")
                   if getattr(leaf, k) is not None},
                **kwargs,
            )  # fmt: skip
            out.append(
                LoadedDataset(
                    dataset=factory,
                    weight=leaf.weight if mode is DatasetBlendMode.DATASET_WEIGHT else None,
                    repetitions=(
                        leaf.repetitions if mode is DatasetBlendMode.SAMPLE_REPETITIONS else None
                    ),
                )
            )
        return LoadedDatasetList(datasets=out, blend_mode=mode)

    def traverse(self, mds_path: Any = None, *, split_part: str) -> list[TraversedDatasetReference]:
        """The split's leaf datasets, nested files flattened (see :func:`traverse_metadataset`)."""
        return _traverse(self._md, split_part, check_paths=True)


def _traverse(md: Any, split_part: str, *, check_paths: bool) -> list[TraversedDatasetReference]:
    from fpipe.energon.epath import EPath
    from fpipe.storage.config.metadataset import resolve_mix

    mix = resolve_mix(md, split_part, training=True, check_paths=check_paths)
    return [
        TraversedDatasetReference(
            path=EPath(leaf.path),
            split_part=leaf.split_part,
            aux={a.name: EPath(a.path) for a in leaf.aux},
            subflavors=dict(leaf.subflavors),
        )
        for leaf in mix.leaves
    ]


def load_dataset(path: Any, **kwargs: Any) -> DatasetLoaderInterface:
    """Energon's ``load_dataset``: a :class:`MetadatasetLoader` for a metadataset file, a
    :class:`DatasetLoader` (``kwargs``: its fields) for a dataset folder."""
    from fpipe.energon.epath import path_text
    from fpipe.storage.config.metadataset import is_metadataset

    path = path_text(path)
    if is_metadataset(path):
        if kwargs:
            raise ConfigError(
                f"load_dataset({path}): {sorted(kwargs)} apply to a dataset folder, not a "
                "metadataset"
            )
        return MetadatasetLoader(path)
    return DatasetLoader(path=path, **kwargs)


def traverse_metadataset(path: Any, *, split_part: str, **kwargs: Any) -> list:
    """Energon's ``traverse_metadataset``: the leaf datasets of split ``split_part`` of a
    metadataset file (nested files flattened), each with its path, split part, ``aux`` stores
    and the subflavors the metadataset levels give it. Nothing is opened: a dataset or ``aux:``
    folder that does not exist (yet) is listed as named, as in Energon."""
    from fpipe.energon.epath import path_text
    from fpipe.storage.config.metadataset import is_metadataset, load_metadataset

    path = path_text(path)
    if not is_metadataset(path):
        raise ConfigError(f"traverse_metadataset({path}): not a metadataset file")
    if kwargs:
        raise ConfigError(f"traverse_metadataset: unknown keyword(s) {sorted(kwargs)}")
    md = load_metadataset(path, check_paths=False)
    return _traverse(md, split_part, check_paths=False)


def prepare_metadataset(path: Any) -> None:
    """Energon's ``prepare_metadataset(path)``: Energon writes a join index for each ``join:``
    of the metadataset; fpipe needs none (it matches sample keys in the workers), so this only
    parses and checks the file (nested files included) and writes nothing. Joiners are not
    resolved here, as in Energon's preparation: a joiner of code that is not imported yet is
    resolved when the dataset is built. Raises a ConfigError naming the file and the entry for
    a bad metadataset."""
    from fpipe.energon.epath import path_text
    from fpipe.storage.config.metadataset import load_metadataset

    load_metadataset(path_text(path))
