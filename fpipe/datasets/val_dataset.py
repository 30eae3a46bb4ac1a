"""``build_val_dataset``: an options record -> one deterministic validation pass (its plan
and materializer), in fpipe's global batches or Energon's per-worker batches.
"""

from __future__ import annotations

import os

import msgspec

from fpipe.core import Pipeline, chain
from fpipe.core.errors import ConfigError
from fpipe.datasets._energon_options import resolve_energon_options
from fpipe.datasets._length import count_batches
from fpipe.datasets._materializer import dataset_materializer
from fpipe.datasets._mix import eval_head
from fpipe.datasets.options import DatasetOptions
from fpipe.loader.planned import PlannedDataset
from fpipe.loader.topology import Topology
from fpipe.plan import batch, distribute, repeat

__all__ = ["build_val_dataset"]


def build_val_dataset(
    path: str | os.PathLike, options: DatasetOptions, *, leaf: int | None = None
) -> PlannedDataset:
    """:func:`get_val_dataset` from an options record (see :class:`DatasetOptions`); the
    options of the training order (seed, shuffles, epochs, drop_last) do not apply. ``leaf``:
    only that dataset of a metadataset's split (its position in file order)."""
    topo = options.topology or options.worker_config or Topology.from_env()
    options = resolve_energon_options(options, topo, default_split="val")
    limit = options.limit  # batches per rank: the loader stops there
    options = msgspec.structs.replace(options, limit=None)
    view, sources, names = eval_head(path, options, leaf=leaf)
    batch_size = options.batch_size
    mat, recipe_size = dataset_materializer(sources, options, batch_size)
    if options.distribution != "global":
        return _energon_val_dataset(path, options, topo, view, mat, names, recipe_size, limit)
    stages = [
        distribute(
            recipe_size * topo.world_size,
            rank=topo.rank,
            world_size=topo.world_size,
            drop_last=False,
        ),
        batch(recipe_size, drop_last=False),
    ]
    plan = Pipeline(chain(repeat(view, 1), *stages), seed=0)
    n: int | None = count_batches(view.size, recipe_size, topo, "global", False)
    estimate = None
    if mat.packing:  # Energon's len() with packing: the batches of the samples unpacked
        n, estimate = None, count_batches(view.size, batch_size or 1, topo, "global", False)
    if estimate is not None and limit is not None:
        estimate = min(estimate, limit)
    return _val_planned(
        path, options, topo, plan, mat, names, n, limit,
        packing_buffer_size=options.packing_buffer_size if mat.packing else None,
        estimated_batches=estimate,
    )  # fmt: skip


def _energon_val_dataset(path, options, topo, view, mat, names, recipe_size, limit):
    """:func:`build_val_dataset` with ``distribution="energon"`` (Energon's per-worker
    batches on each rank; see :mod:`fpipe.plan.worker_batches`)."""
    from fpipe.plan.worker_batches import worker_batches

    if options.distribution != "energon" or len(names) > 1 or mat.packing:
        raise ConfigError(
            f"get_val_dataset(distribution={options.distribution!r}): a validation pass takes "
            "'global' (fpipe's: global batches, each rank its part) or 'energon' (Energon's "
            "per-worker batches), the latter for one dataset without packing_buffer_size"
        )
    part, schedule, n = worker_batches(
        view, rank=topo.rank, world_size=topo.world_size, workers=topo.num_workers,
        batch_size=recipe_size,
    )  # fmt: skip
    plan = Pipeline(chain(repeat(part, 1), batch(schedule, drop_last=False)), seed=0)
    return _val_planned(path, options, topo, plan, mat, names, n, limit, distribution="energon")


def _val_planned(path, options, topo, plan, mat, names, n, limit, **more) -> PlannedDataset:
    """The validation pass of either distribution: ``plan`` (every batch kept, the last one
    short), ``n`` batches on this rank, at most ``limit`` of them; ``more``: the
    distribution's own fields of :class:`PlannedDataset`."""
    if mat.grouping:  # the groups decide the batches: known once every sample is encoded
        n = None
    if n is not None and limit is not None:
        n = min(n, limit)
    return PlannedDataset(
        plan=plan,
        materializer=mat,
        topology=topo,
        batch_size=options.batch_size or (0 if mat.grouping else 1),  # 0: each group its own
        group_batches=mat.grouping,
        drop_last=False,
        datasets=names,
        num_batches=n,
        path=str(path),
        split=options.split,
        limit=limit,
        **more,
    )
