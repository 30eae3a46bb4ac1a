"""Energon's dataset wrappers over fpipe's one dataset type, :class:`fpipe.loader.PlannedDataset`.

``LimitDataset`` and ``RepeatDataset`` wrap the dataset's plan (:mod:`fpipe.plan.passes`), so
the result is again a planned dataset: exact resume, the same batches for any number of
workers, a small state. ``BlendDataset`` and ``ConcatDataset`` blend or concatenate the batches
of whole datasets (:mod:`fpipe.datasets.batch_blend`), and ``MixBatchDataset`` mixes batches
drawn from several datasets into each step (:mod:`fpipe.datasets.batch_mix`), again a planned
dataset.
``get_val_datasets`` builds one validation dataset per dataset of a metadataset split. Each
returns a ``PlannedDataset``; the names are Energon's so that its code
runs with the import line changed.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from typing import Any

from fpipe.core import Pipeline
from fpipe.core.errors import ConfigError
from fpipe.loader.planned import PlannedDataset
from fpipe.plan.passes import limit_passes, repeat_passes

__all__ = [
    "BatchDataset",
    "BlendDataset",
    "ConcatDataset",
    "LimitDataset",
    "MapDataset",
    "MixBatchDataset",
    "RepeatDataset",
    "edataclass",
    "get_val_datasets",
]


def _planned(dataset: Any, wrapper: str) -> PlannedDataset:
    if not isinstance(dataset, PlannedDataset):
        raise ConfigError(
            f"{wrapper} wraps a dataset from get_train_dataset / get_val_dataset (or another "
            f"wrapper of one), got {type(dataset).__name__}"
        )
    return dataset


def _check_topology(dataset: PlannedDataset, worker_config: Any, wrapper: str) -> None:
    """Energon passes the worker config to every wrapper; it must be the dataset's."""
    if worker_config is None:
        return
    topo = dataset.topology
    rank, world = getattr(worker_config, "rank", None), getattr(worker_config, "world_size", None)
    if (rank, world) != (topo.rank, topo.world_size):
        raise ConfigError(
            f"{wrapper}(worker_config=...): rank {rank} of {world} differs from the wrapped "
            f"dataset's rank {topo.rank} of {topo.world_size}; pass the worker_config the "
            "dataset was built with"
        )


def LimitDataset(  # noqa: N802 - Energon's name
    dataset: Any,
    length: int,
    *,
    reset_after_epoch: bool = False,
    worker_config: Any = None,
) -> PlannedDataset:
    """The first ``length`` batches of ``dataset`` (per rank), as Energon's ``LimitDataset``.

    Each iteration of a loader over it yields at most ``length`` batches; the next iteration
    starts again from the wrapped dataset's start (Energon 7.4 resets the wrapped dataset after
    every iteration, whatever ``reset_after_epoch`` says). ``len()`` is ``length``, or the
    wrapped dataset's length when that is shorter. A loader snapshot inside an iteration
    resumes exactly there.
    """
    ds = _planned(dataset, "LimitDataset")
    _check_topology(ds, worker_config, "LimitDataset")
    if ds.packing_buffer_size is not None:
        # A plan step is a packing buffer, which gives a number of batches known only once it
        # is packed: the loader counts the batches of each pass instead (``limit``), and a
        # pass after one that reached it starts over, as here.
        limit = length if ds.limit is None else min(length, ds.limit)
        estimate = limit if ds.estimated_batches is None else min(limit, ds.estimated_batches)
        return dataclasses.replace(ds, limit=limit, estimated_batches=estimate)
    plan = Pipeline(limit_passes(ds.plan.source, length), seed=ds.plan.seed)
    n = length if ds.num_batches is None else min(length, ds.num_batches)
    return dataclasses.replace(ds, plan=plan, num_batches=n)


def RepeatDataset(  # noqa: N802 - Energon's name
    dataset: Any,
    *,
    repeats: float | None = None,
    restart: bool = True,
    worker_config: Any = None,
) -> PlannedDataset:
    """``dataset`` played ``repeats`` times (None: forever), as Energon's ``RepeatDataset``.

    The first pass is the dataset itself; each later pass is the same plan under a key folded
    with the pass number, so a shuffled dataset is shuffled anew and per-sample random numbers
    differ, while a validation dataset keeps its order. A fractional ``repeats`` ends inside
    the last pass (``floor(len * fraction)`` batches). ``restart``: after the last pass the
    next iteration plays them all again (else the stream stays ended). ``len()`` is
    ``int(len(dataset) * repeats)`` (unknown when repeating forever).
    """
    ds = _planned(dataset, "RepeatDataset")
    _check_topology(ds, worker_config, "RepeatDataset")
    source = repeat_passes(ds.plan.source, repeats, pass_length=ds.num_batches, restart=restart)
    n = None
    if repeats is not None and ds.num_batches is not None:
        n = int(ds.num_batches * repeats)
    return dataclasses.replace(ds, plan=Pipeline(source, seed=ds.plan.seed), num_batches=n)


class BlendDataset:
    """Energon's ``BlendDataset((dataset, weight), ..., worker_config=...)``: each step is the
    next batch of one dataset, chosen by weight among those not ended (see
    :func:`fpipe.datasets.blend_datasets`). Constructing it returns a
    :class:`~fpipe.loader.PlannedDataset`, which ``get_loader`` takes as it takes any."""

    def __new__(  # type: ignore[misc]  # returns the planned dataset, as the wrappers here do
        cls, *dataset_weights: tuple[Any, float], worker_config: Any = None
    ) -> PlannedDataset:
        from fpipe.datasets.batch_blend import blend_datasets

        for ds, _weight in dataset_weights:
            _check_topology(_planned(ds, "BlendDataset"), worker_config, "BlendDataset")
        return blend_datasets(dataset_weights)


class MixBatchDataset:
    """Energon's ``MixBatchDataset((dataset, weight), ..., batch_size=, batch_mix_fn=,
    worker_config=)``: each step is ``batch_mix_fn`` of ``batch_size`` batches, each the next
    batch of one dataset chosen by weight (default: the list of them; see
    :func:`fpipe.datasets.batch_mix.mix_datasets`). Constructing it returns a
    :class:`~fpipe.loader.PlannedDataset`."""

    def __new__(  # type: ignore[misc]  # returns the planned dataset, as the wrappers here do
        cls,
        *dataset_weights: tuple[Any, float],
        batch_size: int,
        batch_mix_fn: Any = None,
        worker_config: Any = None,
    ) -> PlannedDataset:
        from fpipe.datasets.batch_mix import mix_datasets
        from fpipe.materialize.mix import list_mix

        for ds, _weight in dataset_weights:
            _check_topology(_planned(ds, "MixBatchDataset"), worker_config, "MixBatchDataset")
        mix_fn = list_mix if batch_mix_fn is None else batch_mix_fn
        return mix_datasets(dataset_weights, batch_size, mix_fn)


class ConcatDataset:
    """Energon's ``ConcatDataset(dataset, ..., worker_config=...)``: every batch of the first
    dataset, then of the next (see :func:`fpipe.datasets.concat_datasets`). Constructing it
    returns a :class:`~fpipe.loader.PlannedDataset`."""

    def __new__(  # type: ignore[misc]  # returns the planned dataset, as the wrappers here do
        cls, *datasets: Any, worker_config: Any = None
    ) -> PlannedDataset:
        from fpipe.datasets.batch_blend import concat_datasets

        for ds in datasets:
            _check_topology(_planned(ds, "ConcatDataset"), worker_config, "ConcatDataset")
        return concat_datasets(datasets)


def _recipe(dataset: Any, wrapper: str) -> Any:
    recipe = getattr(dataset, "recipe", None)
    if recipe is None:
        raise ConfigError(
            f"{wrapper} wraps the dataset of a factory (get_dataset_from_config(...).build(), "
            "or another MapDataset / BatchDataset of one), where fpipe can build the plan "
            f"again with the step added; got {type(dataset).__name__}. For get_train_dataset "
            "/ get_val_dataset, give the step to the task encoder (encode_sample, batch, "
            "encode_batch) and batch_size="
        )
    return recipe


def MapDataset(  # noqa: N802 - Energon's name
    dataset: Any,
    map_fn: Any,
    *,
    len_map_fn: Any = None,
    error_handler: Any = None,
    stateless_map_fn: bool = False,
    map_fn_config: Any = None,
    failure_tolerance: int | None = None,
    worker_config: Any = None,
) -> PlannedDataset:
    """``map_fn`` applied to every sample (every batch, over a ``BatchDataset``) of a
    factory's dataset, as Energon's ``MapDataset``: the dataset is built again with the
    function as a task-encoder step, so it stays one plan (exact resume, any number of
    workers). ``len()`` is the wrapped dataset's. ``len_map_fn`` (a length change) and
    ``error_handler`` are refused: a sample that raises ``SkipSample`` is left out and counted,
    as everywhere in fpipe."""
    recipe = _recipe(dataset, "MapDataset")
    _check_topology(dataset, worker_config, "MapDataset")
    if len_map_fn is not None or error_handler is not None:
        raise ConfigError(
            "MapDataset(len_map_fn=, error_handler=) is not supported by fpipe: a map keeps "
            "the length; pass handler= to get_dataset_from_config for failing samples"
        )
    if recipe.batch_size is None:
        recipe = dataclasses.replace(recipe, sample_maps=(*recipe.sample_maps, map_fn))
    else:
        recipe = dataclasses.replace(recipe, batch_maps=(*recipe.batch_maps, map_fn))
    return recipe.build()


def BatchDataset(  # noqa: N802 - Energon's name
    dataset: Any,
    batch_size: int,
    batcher: Any,
    *,
    batcher_stateless: bool = False,
    batcher_config: Any = None,
    drop_last: bool = False,
    error_handler: Any = None,
    failure_tolerance: int | None = None,
    worker_config: Any = None,
) -> PlannedDataset:
    """Batches of ``batch_size`` samples of a factory's dataset collated by ``batcher``, as
    Energon's ``BatchDataset``: the dataset is built again with that batch size (the plan
    batches) and ``batcher`` as the task encoder's ``batch``. The last batch may be short
    unless ``drop_last`` (training datasets only: a validation pass keeps every sample)."""
    recipe = _recipe(dataset, "BatchDataset")
    _check_topology(dataset, worker_config, "BatchDataset")
    if recipe.batch_size is not None:
        raise ConfigError("BatchDataset wraps a dataset of single samples; this one is batched")
    if error_handler is not None:
        raise ConfigError(
            "BatchDataset(error_handler=) is not supported by fpipe: pass handler= to "
            "get_dataset_from_config for failing samples"
        )
    if drop_last and not recipe.training:
        raise ConfigError(
            "BatchDataset(drop_last=True) over a validation dataset (training=False): fpipe's "
            "validation pass keeps every sample"
        )
    recipe = dataclasses.replace(
        recipe, batch_size=int(batch_size), batcher=batcher, drop_last=drop_last
    )
    return recipe.build()


def get_val_datasets(path: str | os.PathLike, **kwargs: Any) -> list[tuple[PlannedDataset, Any]]:
    """One validation dataset per dataset of the split, as Energon's ``get_val_datasets``:
    ``[(dataset, source), ...]``, where ``dataset`` is what :func:`fpipe.get_val_dataset` builds
    for that dataset alone (same keywords) and ``source`` describes where its samples come from
    (a :class:`fpipe.materialize.sources.DatasetSource`: path, sample type, field map,
    subflavors). A plain dataset folder gives one pair; a metadataset one per dataset of its
    split, in file order.
    """
    from fpipe.datasets.dataset import build_val_dataset, get_val_dataset
    from fpipe.datasets.options import DatasetOptions
    from fpipe.energon.epath import path_text
    from fpipe.storage.config.metadataset import is_metadataset, load_metadataset, resolve_mix

    path = path_text(path)
    if not is_metadataset(path):
        ds = get_val_dataset(path, **kwargs)
        return [(ds, ds.materializer.sources[0])]
    get_val_dataset(path, **kwargs)  # checks every keyword (and the split) as the one dataset
    bound = inspect.signature(inspect.unwrap(get_val_dataset)).bind(path, **kwargs)
    bound.apply_defaults()
    options = DatasetOptions(**{k: v for k, v in bound.arguments.items() if k != "path"})
    leaves = resolve_mix(load_metadataset(path), options.split, training=False).leaves
    out = []
    for leaf in range(len(leaves)):
        ds = build_val_dataset(path, options, leaf=leaf)
        out.append((ds, ds.materializer.sources[0]))
    return out


def edataclass(cls: type) -> type:
    """Energon's ``@edataclass``: ``@dataclass(kw_only=True, slots=True)``."""
    return dataclasses.dataclass(kw_only=True, slots=True)(cls)
