"""Energon's ``loader.restore_sample(restore_key)``: one batch again, from its restore key.

A sample's ``__restore_key__`` is ``(dataset, index, epoch)`` and a batch's is the tuple of its
samples' keys. Every sample's random numbers are keyed by the plan key and these three numbers,
and a batch's step, bucket and packs are in its recipe. So the plan of this rank is walked
(plan tier only: no sample read) to the first recipe whose samples are exactly those of the
key, and that recipe is materialized in this process: the batch the loader delivered, with the
same tensors. The walk stops when the plan is past the key's epochs.

With a packing buffer a batch is made of packs, perhaps of two buffers, and its restore key is
the tuple of its packs' keys, ``("PackingDataset", step, position, *the samples' keys)``: each
pack is rebuilt by materializing its buffer's recipe (found by its step) and taking the pack at
its position, and the packs are batched as the loader batched them.

With grouped batching (``batch_group_criterion``) a batch's samples may come from several
recipes: each is found in the plan and encoded again as it was, and they are batched.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.core.records import Recipe, Refs
from fpipe.encode.packing import PACK_KEY
from fpipe.plan.skip import next_recipe

__all__ = ["can_restore", "restore_batch"]

_EPOCHS_PAST = 2  # the walk ends once every sample of a recipe is this many epochs past the key


def can_restore(dataset: Any) -> bool:
    """Whether :func:`restore_batch` can rebuild batches of ``dataset``."""
    return hasattr(dataset, "plan")


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
        raise ConfigError(f"restore_sample needs a planned dataset, got {type(dataset).__name__}")
    if getattr(dataset, "packing_buffer_size", None):
        return _restore_packs(dataset, restore_key)
    if getattr(dataset, "group_batches", False):
        return _restore_group(dataset, _triples(restore_key))
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


def _restore_group(dataset: Any, want: list[tuple[int, int, int]]) -> Any:
    """A grouped batch (``batch_group_criterion``) again: its samples may come from several
    recipes, so each is found in the plan, encoded as it was (its recipe step and position),
    and the samples are batched as the loader batched them. A sample whose ``encode_sample``
    yields several gives them in order, one per mention in the key."""
    last_epoch = max(e for _, _, e in want)
    where: dict[tuple[int, int, int], tuple[int, int, Any]] = {}  # triple -> step, pos, key
    plan, state = dataset.plan, dataset.plan.init()
    wanted = set(want)
    while len(where) < len(wanted):
        state, recipe, _ = next_recipe(plan, state, ())
        if recipe is None:
            break
        refs = recipe.refs
        got = zip(refs.dataset.tolist(), refs.index.tolist(), refs.epoch.tolist())
        for pos, t in enumerate(got):
            if t in wanted and t not in where:
                where[t] = (recipe.step, pos, recipe.key)
        if len(refs) and int(refs.epoch.min()) > last_epoch + _EPOCHS_PAST:
            break
    missing = [t for t in want if t not in where]
    if missing:
        raise ConfigError(
            f"restore_sample: no sample of this rank's plan has the restore key {missing[0]!r} "
            f"(searched to epoch {last_epoch + _EPOCHS_PAST}); a restore key is restored by a "
            "loader over the same dataset, options and rank that delivered it"
        )
    mat = dataset.materializer
    outputs: dict[tuple[int, int, int], list] = {}
    for t in dict.fromkeys(want):
        step, pos, key = where[t]
        recipe = Recipe(
            step=step, refs=Refs.of(dataset=[t[0]], index=[t[1]], epoch=[t[2]]), key=key
        )
        outputs[t] = mat.encode_at(recipe, [pos])[0]
    samples = [outputs[t].pop(0) for t in want if outputs[t]]
    enc = mat.task_encoder
    return enc.encode_batch(enc.batch(samples))


def _is_pack_key(k: Any) -> bool:
    return (
        isinstance(k, (tuple, list))
        and len(k) >= 3
        and k[0] == PACK_KEY
        and all(isinstance(v, (int, np.integer)) for v in k[1:3])
    )


def _restore_packs(dataset: Any, restore_key: Any) -> Any:
    """A batch of packs (or one pack) again: each pack from its buffer's recipe."""
    one = _is_pack_key(restore_key)
    keys = (
        [restore_key]
        if one
        else list(restore_key)
        if isinstance(restore_key, (tuple, list))
        else []
    )
    if not keys or not all(_is_pack_key(k) for k in keys):
        raise ConfigError(
            f"restore_sample: {restore_key!r} is not the restore key of a batch of packs; pass "
            f"the __restore_key__ of a batch (a tuple of ('{PACK_KEY}', step, position, ...)) "
            "or of a pack that this loader delivered"
        )
    wanted = {int(k[1]) for k in keys}
    buffers: dict[int, list] = {}
    plan, state = dataset.plan, dataset.plan.init()
    while len(buffers) < len(wanted):
        state, recipe, _ = next_recipe(plan, state, ())
        if recipe is None or recipe.step > max(wanted):
            break
        if recipe.step in wanted:
            buffers[recipe.step] = dataset.materializer(recipe).packs or []
    packs = []
    for k in keys:
        got = buffers.get(int(k[1]), [])
        pos = int(k[2])
        pack = got[pos] if pos < len(got) else None
        found = getattr(pack, "__restore_key__", None)
        if isinstance(pack, dict):
            found = pack.get("__restore_key__")
        if pack is None or (found is not None and tuple(found) != tuple(k)):
            raise ConfigError(
                f"restore_sample: no pack of this rank's plan has the restore key {k!r}; a "
                "restore key is restored by a loader over the same dataset, options and rank "
                "that delivered it"
            )
        packs.append(pack)
    if one:
        return packs[0]
    enc = dataset.materializer.task_encoder
    return enc.encode_batch(enc.batch(packs))
