"""Recipes as bytes: what the loader sends to its workers (msgpack of the refs' id columns).

A recipe travels to a DataLoader worker process (or a thread worker) as compact msgpack bytes,
never as a pickle of fpipe objects: the step, key, bucket and shape, and the refs' dataset,
index and epoch columns (plus each ref's pack number after a pack step) as raw arrays, and the
recipe's ``part`` (which dataset of a blend of whole datasets made it) when it is not 0, and
the encoded recipes a mixed batch is made of (``mix``) when it has them.
"""

from __future__ import annotations

import msgspec
import numpy as np

from fpipe.core.records import Recipe, Refs

__all__ = ["decode_recipe", "encode_recipe"]


def encode_recipe(recipe: Recipe) -> bytes:
    """Recipe -> compact msgpack bytes (the refs' id columns only)."""
    r = recipe.refs
    packs = r.columns.get("pack")  # after a pack step: each ref's pack number in the batch
    fields = [
        recipe.step,
        recipe.key,
        recipe.bucket,
        r.dataset.tobytes(),
        r.index.tobytes(),
        r.epoch.tobytes(),
        None if packs is None else np.asarray(packs, dtype=np.int64).tobytes(),
        list(recipe.shape),
    ]
    if recipe.part or recipe.mix:
        fields.append(recipe.part)
    if recipe.mix:
        fields.append([encode_recipe(m) for m in recipe.mix])
    return msgspec.msgpack.encode(fields)


def decode_recipe(data: bytes) -> Recipe:
    """Inverse of :func:`encode_recipe`."""
    step, key, bucket, ds, idx, ep, packs, shape, *rest = msgspec.msgpack.decode(data)
    cols = {
        "dataset": np.frombuffer(ds, dtype=np.int32),
        "index": np.frombuffer(idx, dtype=np.int64),
        "epoch": np.frombuffer(ep, dtype=np.int64),
    }
    if packs is not None:
        cols["pack"] = np.frombuffer(packs, dtype=np.int64)
    refs = Refs(cols)
    return Recipe(
        step=step,
        refs=refs,
        key=key,
        bucket=bucket,
        shape=tuple(shape),
        part=rest[0] if rest else 0,
        mix=tuple(decode_recipe(m) for m in rest[1]) if len(rest) > 1 else (),
    )
