"""Build loaders from plain arguments (so a fresh process can build the same one)."""

import dataclasses
import hashlib
import json

import numpy as np
import torch

import fpipe
from fpipe.decode.image import ImageDecodeOptions
from fpipe.loader import Topology
from fpipe.samples.source_info import SourceInfo


def prepared_images(root, *, shards, per_shard, split="1,0,0") -> str:
    """Write and prepare a small image-caption dataset (no json members); returns its path."""
    from fpipe.storage import prepare_dataset
    from tests.storage.helpers import make_image_caption_dataset

    make_image_caption_dataset(root, shards=shards, per_shard=per_shard, with_json=False)
    prepare_dataset(
        root,
        fields={"image": "jpg", "caption": "txt"},
        sample_type="CaptioningSample",
        split=split,
    )
    return str(root)


def build(
    path,
    *,
    num_workers=0,
    prefetch_factor=2,
    encoder="random_crop",
    batch_size=4,
    seed=3,
    rank=0,
    world_size=1,
    num_epochs=None,
    timeout=None,
    worker_mode="process",
    recover_workers=True,
    error_policy="raise",
    ray_options=None,
):
    from tests.loader.encoders import RandomCropEncoder

    if isinstance(encoder, str) or encoder is None:
        enc = RandomCropEncoder() if encoder == "random_crop" else None
    else:
        enc = encoder
    ds = fpipe.get_train_dataset(
        path,
        batch_size=batch_size,
        shuffle_buffer_size=16,
        max_samples_per_sequence=4,
        seed=seed,
        task_encoder=enc,
        image_decode=ImageDecodeOptions(target_size=16),
        topology=Topology(rank=rank, world_size=world_size),
        num_epochs=num_epochs,
        error_policy=error_policy,
    )
    extra = {} if timeout is None else {"timeout": timeout}
    if ray_options is not None:
        extra["ray_options"] = ray_options
    return fpipe.get_loader(
        ds,
        num_workers=num_workers,
        prefetch_factor=prefetch_factor,
        worker_mode=worker_mode,
        recover_workers=recover_workers,
        **extra,
    )


def digest(batch) -> str:
    """A hash of what training sees in a batch, for bit-exact comparisons (also the chaos and
    recovery benchmarks'): every tensor's and array's dtype, shape and bytes, every field name,
    key and plain value. A sample's source (``SourceInfo``) counts by shard, index and file
    names, not by dataset root, so a local copy and the same shards on object storage agree.
    A value it cannot see into is a TypeError (a ``repr`` would hide a tensor's middle)."""
    h = hashlib.sha256()

    def go(v):
        if isinstance(v, torch.Tensor):
            h.update(f"T{v.dtype}{tuple(v.shape)}".encode())
            h.update(v.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(v, np.ndarray) and v.dtype != object:
            h.update(f"A{v.dtype.str}{v.shape}".encode())
            h.update(np.ascontiguousarray(v).tobytes())
        elif isinstance(v, np.ndarray):
            go(v.tolist())
        elif isinstance(v, SourceInfo):
            go(("SourceInfo", v.shard_name, v.index, tuple(v.file_names)))
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            h.update(f"D{type(v).__name__}".encode())
            for f in dataclasses.fields(v):
                h.update(f.name.encode())
                go(getattr(v, f.name))
        elif isinstance(v, dict):
            h.update(b"{%d" % len(v))
            for k in sorted(v, key=str):
                h.update(str(k).encode())
                go(v[k])
        elif isinstance(v, (list, tuple)):
            h.update(b"[%d" % len(v))
            for x in v:
                go(x)
        elif isinstance(v, (bytes, bytearray)):
            h.update(b"B%d:" % len(v) + bytes(v))
        elif v is None or isinstance(v, (str, int, float, bool, np.generic)):
            h.update(json.dumps(v.item() if isinstance(v, np.generic) else v).encode())
        else:
            raise TypeError(f"digest: cannot compare a {type(v).__name__} by value")

    go(batch)
    return h.hexdigest()


def take(loader, n):
    it = iter(loader)
    return [digest(next(it)) for _ in range(n)]
