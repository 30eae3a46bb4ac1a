"""``loader.config()`` and ``dataset.config()``: a JSON-able description of what a loader
delivers, for logs and for comparing two runs, with the keys of Energon's ``config()``.

Energon's tree has one node per wrapper it stacks; fpipe has one plan per dataset, so a dataset
node holds the plan's own description (:meth:`fpipe.core.Pipeline.describe`: every stage with
its settings) next to the keys Energon's nodes have (``type``, ``batch_size``, ``drop_last``,
``worker_config``...). A blend is Energon's ``{"type": "BlendDataset", "dataset_weights":
[(config, weight), ...], "worker_config": ...}``, a concatenation ``{"type": "ConcatDataset",
"datasets": [...]}``. Functions are named ``module.qualname`` as Energon names them. The tree
does not depend on the process, the time or ``num_workers`` of the loader (only the loader's
own node holds that), so equal trees mean equal plans.
"""

from __future__ import annotations

from typing import Any

__all__ = ["dataset_config", "loader_config", "worker_config"]


def _name(fn: Any) -> str:
    """A function or class as Energon writes it in a config: ``module.qualname``."""
    fn = getattr(fn, "__func__", fn)
    if not hasattr(fn, "__qualname__"):
        fn = type(fn)
    return f"{getattr(fn, '__module__', '?')}.{fn.__qualname__}"


def worker_config(topology: Any) -> dict[str, Any]:
    """Energon's ``WorkerConfig.config()``: rank, world size, workers, and the size of the
    data-parallel group (None without one)."""
    group = topology.data_parallel_group
    size = getattr(group, "size", None)
    return {
        "rank": topology.rank,
        "world_size": topology.world_size,
        "num_workers": topology.num_workers,
        "data_parallel_group": size() if callable(size) else None,
    }


def _encoder(materializer: Any) -> dict[str, Any]:
    encoder = getattr(materializer, "task_encoder", None)
    if encoder is None:
        return {"task_encoder": None}
    steps = ("encode_sample", "batch", "encode_batch")
    return {
        "task_encoder": _name(type(encoder)),
        **{step: _name(getattr(encoder, step)) for step in steps if hasattr(encoder, step)},
    }


def dataset_config(dataset: Any) -> dict[str, Any]:
    """The config tree of a planned dataset (see the module doc)."""
    weights = getattr(dataset, "weights", None)
    parts = getattr(dataset, "parts", ())
    if parts and weights is not None:
        return {
            "type": "BlendDataset",
            "dataset_weights": [
                (dataset_config(ds), float(w)) for ds, w in zip(parts, weights, strict=True)
            ],
            "worker_config": worker_config(dataset.topology),
        }
    if parts:
        return {"type": "ConcatDataset", "datasets": [dataset_config(ds) for ds in parts]}
    return {
        "type": type(dataset).__qualname__,
        "_path": dataset.path,
        "split": dataset.split,
        "batch_size": dataset.batch_size,
        "drop_last": dataset.drop_last,
        "distribution": dataset.distribution,
        "len": dataset.num_batches,
        "virtual_epoch_length": dataset.virtual_epoch_length,
        "limit": dataset.limit,
        "packing_buffer_size": dataset.packing_buffer_size,
        **_encoder(dataset.materializer),
        "plan": dataset.plan.describe(),
        "worker_config": worker_config(dataset.topology),
    }


def loader_config(loader: Any) -> dict[str, Any]:
    """Energon's ``loader.config()``: the loader's settings and its dataset's tree."""
    workers = loader.num_workers
    return {
        "type": type(loader).__qualname__,
        "num_workers": workers,
        # each loop starts its workers and shuts them down at its end
        "persistent_workers": False,
        "pin_memory": loader.pin_memory,
        "prefetch_factor": None if workers == 0 else loader.prefetch_factor,
        "dataset": dataset_config(loader.dataset),
    }
