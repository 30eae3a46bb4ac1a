"""Energon's dataset factories: ``get_dataset_from_config`` returns one, ``.build()`` gives the
planned dataset.

Energon builds a dataset in two steps: a factory (``BaseCoreDatasetFactory``) holds the
dataset's path, sample type and subflavors, and ``factory.build()`` makes the iterable dataset.
:class:`DatasetFactory` keeps that shape over fpipe's one dataset type: ``build()`` returns the
:class:`~fpipe.loader.PlannedDataset` of the split's samples one at a time (``batch_size=None``),
as :func:`fpipe.get_train_dataset` (``training=True``) or :func:`fpipe.get_val_dataset` builds
it, so it has the exact resume and worker independence of every fpipe dataset.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from fpipe.core.errors import ConfigError
from fpipe.loader.planned import PlannedDataset

__all__ = ["DatasetFactory", "FactoryDataset", "get_dataset_from_config"]


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How a factory's dataset is built, so that Energon's ``MapDataset`` / ``BatchDataset``
    over it can build it again with their step added (fpipe builds one plan per dataset, never
    a dataset over another): the folder, train or validation, the builder's keywords, the
    functions mapped over each sample and, once batched, the batch size, batcher and the
    functions mapped over each batch."""

    path: str
    training: bool
    options: dict[str, Any]
    sample_maps: tuple[Any, ...] = ()
    batch_size: int | None = None
    batcher: Any = None
    drop_last: bool = False
    batch_maps: tuple[Any, ...] = ()

    def build(self) -> FactoryDataset:
        """The planned dataset of this recipe."""
        from fpipe.datasets import get_train_dataset, get_val_dataset

        options = dict(self.options, batch_size=self.batch_size)
        if self.sample_maps or self.batcher is not None or self.batch_maps:
            from fpipe.energon._mapping import MappingEncoder  # imports torch

            options["task_encoder"] = MappingEncoder(
                self.sample_maps, self.batcher, self.batch_maps
            )
        if self.training:
            ds = get_train_dataset(self.path, drop_last=self.drop_last, **options)
        else:
            ds = get_val_dataset(self.path, **options)
        fields = {f.name: getattr(ds, f.name) for f in dataclasses.fields(ds)}
        return FactoryDataset(**fields, recipe=self)


@dataclasses.dataclass(frozen=True)
class FactoryDataset(PlannedDataset):
    """The planned dataset a factory builds, with its :class:`Recipe` (``recipe``), which
    Energon's ``MapDataset`` / ``BatchDataset`` build on."""

    recipe: Recipe | None = None


class DatasetFactory:
    """Energon's factory of one split of a dataset folder.

    Attributes as Energon's: ``paths`` (the dataset folder, an ``EPath``), ``subflavors``
    (the dataset config's, merged with those given; may be changed before ``build()``),
    ``__sample_type__`` (the class the samples are). ``len()`` is the number of samples of the
    split over all ranks. The dataset is built once here, so a bad path, config file or
    keyword fails at once, as Energon's factory does. Images decode as Energon's factories
    decode them unless ``image_decode`` is given: ``"torchrgb"``.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        training: bool,
        worker_config: Any,
        subflavors: dict[str, Any] | None = None,
        **options: Any,
    ) -> None:
        from fpipe.energon.epath import EPath, path_text
        from fpipe.samples import sample_type_from_name

        self._path = path_text(path)
        self._training = training
        self._worker_config = worker_config
        # Energon's factories decode images so by default (float32 in [0, 1])
        self._options = {"image_decode": "torchrgb", **options}
        first = self._build(None)
        source = first.materializer.sources[0]
        self.paths = [EPath(self._path)]
        self.subflavors: dict[str, Any] = {**source.subflavors, **(subflavors or {})}
        self.__sample_type__ = sample_type_from_name(source.sample_type)
        self._built = (dict(self.subflavors), first if not subflavors else self._build_now())
        self._length: int | None = None

    def _build(self, subflavors: dict[str, Any] | None) -> FactoryDataset:
        options = dict(self._options, worker_config=self._worker_config, subflavors=subflavors)
        return Recipe(self._path, self._training, options).build()

    def _build_now(self) -> Any:
        return self._build(dict(self.subflavors))

    def build(self, worker_rotation_offset: int = 0) -> Any:
        """The planned dataset (one sample at a time). ``worker_rotation_offset`` (Energon's
        choice of the worker that reads first) changes nothing: fpipe's samples do not depend
        on the workers."""
        del worker_rotation_offset
        if self._built[0] != self.subflavors:
            self._built = (dict(self.subflavors), self._build_now())
        return self._built[1]

    def __len__(self) -> int:
        """Samples of the split over all ranks (Energon's factory length)."""
        if self._length is None:
            from fpipe.datasets import get_val_dataset
            from fpipe.loader import Topology

            keep = ("split_part", "split", "dataset_config", "split_config", "open_kwargs")
            one = get_val_dataset(
                self._path,
                batch_size=1,
                topology=Topology(rank=0, world_size=1),
                **{k: v for k, v in self._options.items() if k in keep},
            )
            self._length = int(one.num_batches)
        return self._length

    def __repr__(self) -> str:
        return f"DatasetFactory({self._path!r}, training={self._training})"


def get_dataset_from_config(
    path: str | os.PathLike,
    *,
    dataset_config: str | None = None,
    split_config: str | None = None,
    split_part: str | None = None,
    training: bool = True,
    subflavors: dict[str, Any] | None = None,
    worker_config: Any,
    sample_type: type | None = None,
    **kwargs: Any,
) -> DatasetFactory:
    """Energon's ``get_dataset_from_config``: the factory of one split of a dataset folder
    (``.build()`` gives the dataset). ``dataset_config`` / ``split_config``: another
    dataset.yaml / split.yaml of the dataset's ``.nv-meta/`` folder, by file name;
    ``subflavors`` are merged over the dataset config's; ``sample_type`` only checks the
    dataset's type, as in Energon; images decode as Energon's factories decode them by default
    (``image_decode="torchrgb"``: float32 in [0, 1]). An Energon ``sample_loader`` named in
    the dataset config is refused (no code named in a data file runs)."""
    options = dict(kwargs)
    for key, value in (
        ("dataset_config", dataset_config),
        ("split_config", split_config),
        ("split_part", split_part),
    ):
        if value is not None:
            options[key] = value
    factory = DatasetFactory(
        path, training=training, worker_config=worker_config, subflavors=subflavors, **options
    )
    if sample_type is not None:
        have = factory.__sample_type__
        if not (isinstance(have, type) and issubclass(have, sample_type)):
            raise ConfigError(
                f"get_dataset_from_config(sample_type={sample_type.__name__}): {path} holds "
                f"{getattr(have, '__name__', have)} samples"
            )
    return factory
