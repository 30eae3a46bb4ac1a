"""What ``get_train_dataset`` / ``get_val_dataset`` return: a rank's plan and its materializer.

A :class:`PlannedDataset` is the loader's input: :func:`fpipe.loader.get_loader` runs its plan in
the main process and its materializer in workers. Iterating it directly materializes in this
process, for quick looks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from fpipe.core import Pipeline
from fpipe.loader.topology import Topology
from fpipe.materialize.materializer import Materializer

__all__ = ["PlannedDataset"]


@dataclasses.dataclass(frozen=True)
class PlannedDataset:
    """What ``get_*_dataset`` returns: the plan for this rank and the recipe materializer.

    Attributes:
      plan: the :class:`~fpipe.core.Pipeline` of batch recipes for this rank.
      materializer: the pure ``recipe -> batch`` function run in workers.
      topology: the rank / world size the plan was built for.
      batch_size: samples per batch on this rank (0 with buckets, or grouped batching without
        a fixed batch size: each bucket or group has its own).
      distribution: ``"global"`` or ``"per_rank"`` (see docs/distributed.md).
      packing_buffer_size: with Energon's packing hooks, the samples per packing buffer (each
        recipe is one buffer; the loader makes batches of ``batch_size`` packs), else None.
      group_batches: the task encoder's ``batch_group_criterion`` groups the encoded samples
        (Energon's grouped batching): each recipe is a chunk of the stream and the loader makes
        the batches (see :mod:`fpipe.loader._group_batches`).
      drop_last: drop a short final batch (of packs, with a packing buffer; the partly filled
        groups at the end, with grouped batching).
      buckets: the parsed bucket_config (:class:`~fpipe.plan.BucketTable`) or None.
      datasets: the name of each dataset id in the refs (one name without a metadataset).
      num_batches: ``len(ds)`` when known in advance: the batches of the whole stream on this
        rank when it is finite (at most ``limit``), else the batches of one epoch (Energon's
        length of a repeating dataset); None when plan stages or packing decide how many
        samples a batch takes.
      path, split: where the samples come from (for the repr).
      skip_steps: global step ranges ``(a, b)`` the loader leaves out (``skip_steps`` option,
        see :mod:`fpipe.plan.skip`).
      virtual_epoch_length: Energon's virtual epoch: each ``for`` loop over a loader ends after
        this many batches and the next goes on from there (0: none); it is then ``len(ds)``.
      limit: a validation pass ends after this many batches on this rank (None: all).
      estimated_batches: with a packing buffer, Energon's estimate of ``len()``: the batches
        the samples would make unpacked (each pack counted as one sample), as Energon's packing
        reports it; the real number is known only once the buffers are packed.
    """

    plan: Pipeline
    materializer: Materializer
    topology: Topology
    batch_size: int
    distribution: str = "global"
    packing_buffer_size: int | None = None
    group_batches: bool = False
    drop_last: bool = True
    buckets: Any = None
    datasets: tuple[str, ...] = ()
    num_batches: int | None = None
    path: str = ""
    split: str = ""
    skip_steps: tuple[tuple[int, int], ...] = ()
    virtual_epoch_length: int = 0
    limit: int | None = None
    estimated_batches: int | None = None

    def __iter__(self) -> Iterator[Any]:
        """Batches in order, materialized in this process (no DataLoader): for quick looks."""
        from fpipe.loader.dataloader import get_loader

        return iter(get_loader(self, num_workers=0))

    def __len__(self) -> int:
        """Energon's length on this rank: ``virtual_epoch_length`` when set, else the batches
        of the whole stream when it ends, else of one epoch (see ``num_batches``)."""
        if self.virtual_epoch_length:
            return self.virtual_epoch_length
        if self.num_batches is None and self.estimated_batches is not None:
            return self.estimated_batches
        if self.num_batches is None:
            raise TypeError(
                "len() is unknown for this dataset: plan stages, packing, buckets, grouped "
                "batching or a batch schedule decide how many samples each batch takes, so "
                "fpipe cannot count its batches before running the plan (Energon guesses one "
                "batch per batch_size samples); set virtual_epoch_length=N for a fixed length"
            )
        return self.num_batches

    def config(self) -> dict[str, Any]:
        """Energon's ``config()``: a JSON-able description of this dataset (its plan, batch
        size, encoder, rank...) to log and compare (see :mod:`fpipe.loader.config_tree`)."""
        from fpipe.loader.config_tree import dataset_config

        return dataset_config(self)

    def __bool__(self) -> bool:
        """Always true, so ``ds or make_dataset()`` keeps it: truthiness would otherwise fall
        back to ``len()``, which an endless stream does not have."""
        return True

    def __repr__(self) -> str:
        topo = self.topology
        batches = "endless or unknown" if self.num_batches is None else self.num_batches
        return (
            f"PlannedDataset({self.path!r}, split={self.split!r}, batch_size={self.batch_size}, "
            f"batches={batches}, rank={topo.rank}/{topo.world_size} {self.distribution}, "
            f"encoder={type(self.materializer.task_encoder).__name__})"
        )
