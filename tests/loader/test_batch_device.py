"""Default batches move to a device and pin like Energon's: ``batch.to(...)``, ``pin_memory``."""

from __future__ import annotations

import torch

import fpipe
from fpipe.decode.image import ImageDecodeOptions
from fpipe.samples import CaptioningSample


def _loader(path, **kwargs):
    ds = fpipe.get_train_dataset(
        path, batch_size=4, seed=1, num_epochs=1, image_decode=ImageDecodeOptions(target_size=8)
    )
    return fpipe.get_loader(ds, **kwargs)


def test_the_default_encoders_batch_moves_as_written(image_dataset):
    batch = next(iter(_loader(image_dataset)))
    assert isinstance(batch, CaptioningSample)
    moved = batch.to("cpu", non_blocking=True)  # the seeds' usage: batch = batch.to("cuda")
    assert moved is not batch and torch.equal(moved.image, batch.image)
    assert moved.caption == batch.caption and moved.__key__ == batch.__key__
    assert batch.to("meta").image.device.type == "meta"


def test_get_loader_pin_memory_pins_the_default_batch(image_dataset, monkeypatch):
    pinned = []

    def fake_pin(self, *device):
        pinned.append(self.data_ptr())
        return self.clone()

    acc = getattr(torch, "accelerator", None)
    if acc is not None:
        monkeypatch.setattr(acc, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.Tensor, "pin_memory", fake_pin)
    batches = list(_loader(image_dataset, pin_memory=True))
    assert batches and len(pinned) == len(batches)  # one tensor (image) per batch
    assert all(isinstance(b, CaptioningSample) for b in batches)
