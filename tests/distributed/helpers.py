"""Small text-only prepared datasets and plain-argument builders for the distributed tests."""

from __future__ import annotations

from pathlib import Path

from fpipe.storage import prepare_dataset
from tests.storage.helpers import write_tar


def make_text_dataset(root: str | Path, *, shards: int = 4, per_shard: int = 12) -> str:
    """``shards`` tar shards of ``per_shard`` text samples, prepared as TextSample data."""
    root = Path(root)
    for s in range(shards):
        write_tar(
            root / f"shard-{s:02d}.tar",
            [
                (f"{s * per_shard + i:05d}", {"txt": f"sample {s * per_shard + i}".encode()})
                for i in range(per_shard)
            ],
        )
    prepare_dataset(root, fields={"text": "txt"}, sample_type="TextSample")
    return str(root)


def build_dataset(path, *, rank=0, world_size=1, **kwargs):
    """get_train_dataset with the settings the distributed tests share (overridable)."""
    import fpipe
    from fpipe.loader import Topology

    args = dict(
        global_batch_size=6,
        shuffle_buffer_size=8,
        max_samples_per_sequence=4,
        seed=11,
    )
    args.update(kwargs)
    if "batch_size" in kwargs:
        args.pop("global_batch_size")
    return fpipe.get_train_dataset(path, topology=Topology(rank, world_size), **args)


def batch_keys(batch) -> list[str]:
    """The sample keys of a delivered batch."""
    return list(batch["__key__"] if isinstance(batch, dict) else batch.__key__)


def batch_epoch(batch) -> int:
    """The epoch of a delivered batch's first sample (from its restore keys)."""
    rk = batch["__restore_key__"] if isinstance(batch, dict) else batch.__restore_key__
    return int(rk[0][2])
