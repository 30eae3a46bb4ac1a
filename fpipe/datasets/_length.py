"""How many batches a finite stream gives a rank, known before it runs (``len(dataset)``)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from fpipe.loader.topology import Topology

__all__ = ["count_batches", "epoch_refs", "stream_refs", "warn_if_empty"]


def stream_refs(head: Any, num_epochs: int | None) -> int | None:
    """Refs in a finite plan head: ``repeat(view, num_epochs)`` (a single dataset) gives the
    view's size times the epochs, a blend with ``num_epochs`` (``repeat=False``) its epochs'
    positions (an epochized blend: each dataset times its repetitions, as Energon counts
    ``blend_epochized``); None for an endless stream or another head."""
    if num_epochs is None:
        return None
    name = getattr(head, "name", None)
    config = getattr(head, "config", None)
    if name == "blend" and config is not None and config.num_epochs is not None:
        per_dataset = config.counts if config.mode == "epochized" else config.sizes
        return int(sum(per_dataset)) * int(config.num_epochs)
    if name != "repeat":
        return None
    inputs = getattr(head, "inputs", ())
    size = getattr(inputs[0], "size", None) if len(inputs) == 1 else None
    return None if size is None else int(size) * num_epochs


def _one_pass(view: Any) -> int:
    """Refs of one pass over the data under ``view``: its size, with the passes of a ``tile``
    (``shuffle_over_epochs_multiplier``, global or a metadataset entry's) divided out."""
    node = view
    while node is not None:
        if getattr(node, "name", None) == "tile":
            return int(view.size) // int(node.config.times)
        inputs = getattr(node, "inputs", ())
        node = inputs[0] if len(inputs) == 1 else None
    return int(view.size)


def epoch_refs(head: Any) -> int | None:
    """Refs of one epoch of a training plan's head, as Energon counts its length: a dataset's
    split (``repeat(view)``: one pass over it), a weighted blend's datasets together (one pass
    over each, weights disregarded) or an epochized blend's epoch (each dataset times its
    repetitions); None for another head. A ``shuffle_over_epochs_multiplier`` (global or of
    one entry) does not change it: Energon's length is one pass."""
    name = getattr(head, "name", None)
    inputs = getattr(head, "inputs", ())
    if name == "repeat" and len(inputs) == 1 and getattr(inputs[0], "size", None) is not None:
        return _one_pass(inputs[0])
    config = getattr(head, "config", None)
    if name == "blend" and config is not None:
        if config.mode == "epochized":
            return int(sum(config.counts))
        if len(inputs) == len(config.sizes):
            return sum(_one_pass(v) for v in inputs)
        return int(sum(config.sizes))
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
    if distribution != "global":  # per_rank, energon: this rank's own refs
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
    where = " on this rank" if distribution != "global" else ""
    warnings.warn(
        f"{path}: this configuration yields no batch on rank {topo.rank}: split {split!r} gives "
        f"{refs} samples{where} over all epochs, fewer than one batch of {size} with "
        "drop_last=True; use a smaller batch, more epochs or drop_last=False",
        UserWarning,
        stacklevel=3,
    )
