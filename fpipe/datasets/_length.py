"""How many batches a finite stream gives a rank, known before it runs (``len(dataset)``)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from fpipe.loader.topology import Topology

__all__ = ["count_batches", "epoch_refs", "stream_refs", "warn_if_empty"]


def stream_refs(head: Any, num_epochs: int | None) -> int | None:
    """Refs in a plan head made by ``repeat(view, num_epochs)`` (a single dataset): the view's
    size times the epochs; None for an endless stream or another head (a blend)."""
    if num_epochs is None or getattr(head, "name", None) != "repeat":
        return None
    inputs = getattr(head, "inputs", ())
    size = getattr(inputs[0], "size", None) if len(inputs) == 1 else None
    return None if size is None else int(size) * num_epochs


def epoch_refs(head: Any, passes: int = 1) -> int | None:
    """Refs of one epoch of a training plan's head, as Energon counts its length: a dataset's
    split (``repeat(view)``: the view's size), a weighted blend's datasets together (weights
    disregarded) or an epochized blend's epoch (each dataset times its repetitions); None for
    another head. ``passes``: passes over the data per view epoch
    (``shuffle_over_epochs_multiplier``), divided out so that one epoch is one pass."""
    name = getattr(head, "name", None)
    inputs = getattr(head, "inputs", ())
    if name == "repeat" and len(inputs) == 1 and getattr(inputs[0], "size", None) is not None:
        return int(inputs[0].size) // passes
    config = getattr(head, "config", None)
    if name == "blend" and config is not None:
        per_dataset = config.counts if config.mode == "epochized" else config.sizes
        return int(sum(per_dataset)) // passes
    return None


def count_batches(
    refs: int, batch_size: int, topology: Topology, distribution: str, drop_last: bool
) -> int:
    """Batches this rank gets from a stream of ``refs`` refs (on this rank in per-rank mode,
    over all ranks in global mode) when no plan stage drops refs; mirrors ``distribute`` and
    ``batch``: in global mode a short last global batch is dropped on every rank, or split as
    evenly as possible (a rank whose share is empty gets no last batch).

    >>> count_batches(10, 2, Topology(rank=1, world_size=2), "global", drop_last=False)
    3
    >>> count_batches(10, 2, Topology(rank=0, world_size=2), "global", drop_last=True)
    2
    """
    if distribution == "per_rank":
        full, rest = divmod(refs, batch_size)
        return full + int(bool(rest) and not drop_last)
    world = topology.world_size
    full, rest = divmod(refs, batch_size * world)
    if not rest or drop_last:
        return full
    bounds = np.linspace(0, rest, world + 1).round().astype(np.int64)  # as distribute splits it
    return full + int(bounds[topology.rank + 1] > bounds[topology.rank])


def warn_if_empty(
    n: int, path: Any, split: str, refs: int, batch_size: int, topo: Topology, distribution: str
) -> None:
    """Warn when a finite configuration yields no batch at all (``n == 0``)."""
    if n:
        return
    size = batch_size * (topo.world_size if distribution == "global" else 1)
    where = " on this rank" if distribution == "per_rank" else ""
    warnings.warn(
        f"{path}: this configuration yields no batch on rank {topo.rank}: split {split!r} gives "
        f"{refs} samples{where} over all epochs, fewer than one batch of {size} with "
        "drop_last=True; use a smaller batch, more epochs or drop_last=False",
        UserWarning,
        stacklevel=3,
    )
