"""Build loaders from plain arguments (so a fresh process can build the same one)."""

import hashlib
import json

import torch

import fpipe
from fpipe.decode.image import ImageDecodeOptions
from fpipe.loader import Topology


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
    """A hash of every tensor's bytes and every key in a batch (bit-exact comparison)."""
    h = hashlib.sha256()

    def go(v):
        if isinstance(v, torch.Tensor):
            h.update(str((v.dtype, tuple(v.shape))).encode())
            h.update(v.contiguous().numpy().tobytes())
        elif isinstance(v, dict):
            for k in sorted(v):
                h.update(k.encode())
                go(v[k])
        elif isinstance(v, (list, tuple)):
            for x in v:
                go(x)
        else:
            h.update(json.dumps(v, default=str).encode())

    go(batch)
    return h.hexdigest()


def take(loader, n):
    it = iter(loader)
    return [digest(next(it)) for _ in range(n)]
