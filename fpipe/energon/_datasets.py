"""Energon's ``get_train_dataset``: fpipe's, with Energon's slices and the ranks' parts Energon
gives them where a stream ends.

Energon's slices never cross a shard, and ``max_samples_per_sequence=None`` (its default) reads
each shard whole, in order, shuffling only the order of the shards (then the shuffle buffer, if
any); fpipe's own default shuffles single samples. ``fpipe.energon.get_train_dataset``
therefore defaults to ``sequence_slices="shards"`` (:mod:`fpipe.plan.shard_slices`).

With ``repeat=False`` on several ranks, Energon shards each dataset over its global workers
(``num_workers * world_size``), so a rank's part, and its ``len()``, is Energon's (55 samples on
3 ranks of 5 workers: 19, 19, 17, every sample on one rank), where fpipe's global distribution
leaves a short last global batch out. ``fpipe.energon.get_train_dataset`` therefore defaults to
``distribution="energon"`` (:mod:`fpipe.plan.worker_split`) for a stream that ends on more than
one rank. A repeating stream keeps fpipe's global distribution, which loses no sample (the next
epoch follows), keeps the same global batches for any world size and restores on any world
size; pass ``distribution="energon"`` for Energon's parts there too. A ``distribution=`` given
explicitly is always kept.

A validation pass (``get_val_dataset``) of one dataset on several ranks or workers defaults to
``distribution="energon"`` too: Energon's workers each batch their own part of the rank's part
(the last batch of each short) and the loader takes one batch of each in turn, so ``len()``
depends on ``num_workers`` (35 samples in batches of 8 with 4 workers: 7 batches, not 5); see
:mod:`fpipe.plan.worker_batches`.

Energon's deprecated ``auto_decode=False`` (to either function) keeps working as Energon 7.4
gives it: the task encoder's ``decoder`` is set to None (raw bytes for the cooker, sample loader
or field map), on the instance passed in, or on a new ``DefaultTaskEncoder`` when none is.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from fpipe.datasets import get_train_dataset as _fpipe_get_train_dataset
from fpipe.datasets import get_val_dataset as _fpipe_get_val_dataset
from fpipe.energon.epath import path_text
from fpipe.loader import Topology

__all__ = ["get_train_dataset", "get_val_dataset"]


def _auto_decode(kwargs: dict[str, Any]) -> None:
    """Energon's ``auto_decode`` keyword, taken out of ``kwargs``: ``False`` is ``decoder =
    None`` on the task encoder (Energon 7.4 sets it on the instance it is given)."""
    if "auto_decode" not in kwargs or kwargs.pop("auto_decode"):
        return
    encoder = kwargs.get("task_encoder")
    if encoder is None:
        from fpipe.encode import DefaultTaskEncoder

        encoder = kwargs["task_encoder"] = DefaultTaskEncoder()
    encoder.decoder = None


@functools.wraps(_fpipe_get_train_dataset)
def get_train_dataset(path: str | os.PathLike, **kwargs: Any) -> Any:
    """:func:`fpipe.get_train_dataset` with Energon's slices (``sequence_slices="shards"``)
    and, for a stream that ends (``repeat=False``), Energon's split of the data to ranks by
    default (see the module doc)."""
    path = path_text(path)
    _auto_decode(kwargs)
    kwargs.setdefault("sequence_slices", "shards")
    if "distribution" not in kwargs and kwargs.get("repeat", True) is False:
        topo = kwargs.get("topology") or kwargs.get("worker_config") or Topology.from_env()
        if topo.world_size > 1:
            kwargs["distribution"] = "energon"
    return _fpipe_get_train_dataset(path, **kwargs)


@functools.wraps(_fpipe_get_val_dataset)
def get_val_dataset(path: str | os.PathLike, **kwargs: Any) -> Any:
    """:func:`fpipe.get_val_dataset` with Energon's per-worker batches on each rank
    (``distribution="energon"``) by default for one dataset read by several ranks or workers,
    also taking Energon's ``auto_decode`` (see the module doc)."""
    path = path_text(path)
    _auto_decode(kwargs)
    if "distribution" not in kwargs and kwargs.get("packing_buffer_size") is None:
        from fpipe.storage.config.metadataset import is_metadataset

        topo = kwargs.get("topology") or kwargs.get("worker_config") or Topology.from_env()
        if (topo.world_size > 1 or topo.num_workers > 1) and not is_metadataset(path):
            kwargs["distribution"] = "energon"
    return _fpipe_get_val_dataset(path, **kwargs)
