"""Energon's ``loader.restore_sample(restore_key)``: one batch again, from its restore key.

A sample's ``__restore_key__`` is ``(dataset, index, epoch)`` and a batch's is the tuple of its
samples' keys. Every sample's random numbers are keyed by the plan key and these three numbers,
and a batch's step, bucket and packs are in its recipe. So the plan of this rank is walked
(plan tier only: no sample read) to the first recipe whose samples are exactly those of the
key, and that recipe is materialized in this process: the batch the loader delivered, with the
same tensors. The walk stops when the plan is past the key's epochs. Refused with a packing
buffer (a batch is made of packs of several buffers, which a restore key does not name).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.plan.skip import next_recipe

__all__ = ["can_restore", "restore_batch"]

_EPOCHS_PAST = 2  # the walk ends once every sample of a recipe is this many epochs past the key


def can_restore(dataset: Any) -> bool:
    """Whether :func:`restore_batch` can rebuild batches of ``dataset``."""
    return hasattr(dataset, "plan") and not getattr(dataset, "packing_buffer_size", None)


def _triples(restore_key: Any) -> list[tuple[int, int, int]]:
    """The ``(dataset, index, epoch)`` of each sample named by ``restore_key`` (a sample's
    key, or a batch's tuple or list of them)."""

    def triple(k: Any) -> tuple[int, int, int] | None:
        if (
            isinstance(k, (tuple, list))
            and len(k) == 3
            and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in k)
        ):
            return int(k[0]), int(k[1]), int(k[2])
        return None

    one = triple(restore_key)
    if one is not None:
        return [one]
    if isinstance(restore_key, (tuple, list)) and restore_key:
        many = [triple(k) for k in restore_key]
        if all(t is not None for t in many):
            return many  # type: ignore[return-value]
    raise ConfigError(
        f"restore_sample: {restore_key!r} is not an fpipe restore key; pass the "
        "__restore_key__ of a sample ((dataset, index, epoch)) or of a batch (a tuple of them) "
        "that this loader delivered"
    )


def restore_batch(dataset: Any, restore_key: Any) -> Any:
    """The batch (or, with ``batch_size=None``, the sample) of ``dataset`` whose
    ``__restore_key__`` is ``restore_key``, built again from its recipe."""
    if not can_restore(dataset):
        raise ConfigError(
            "restore_sample is not supported with packing_buffer_size: a batch holds packs of "
            "several packing buffers, which its restore key does not name; use "
            "loader.state_dict() before the batch and load_state_dict() to deliver it again"
        )
    want = _triples(restore_key)
    last_epoch = max(e for _, _, e in want)
    plan, state = dataset.plan, dataset.plan.init()
    while True:
        state, recipe, _ = next_recipe(plan, state, ())
        if recipe is None:
            break
        refs = recipe.refs
        if len(refs) == len(want):
            got = zip(refs.dataset.tolist(), refs.index.tolist(), refs.epoch.tolist())
            if list(got) == want:
                return dataset.materializer(recipe).batch
        if len(refs) and int(refs.epoch.min()) > last_epoch + _EPOCHS_PAST:
            break
    raise ConfigError(
        f"restore_sample: no batch of this rank's plan has the restore key {restore_key!r} "
        f"(searched to epoch {last_epoch + _EPOCHS_PAST}); a restore key is restored by a loader "
        "over the same dataset, options and rank that delivered it"
    )
