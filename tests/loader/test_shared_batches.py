"""The materializer marks fpipe's own batch hooks as sending collate's tensors unchanged, so a
worker builds them in shared memory; a task encoder with its own ``batch`` or ``encode_batch``
(which may replace them) gets ordinary memory."""

import torch

from fpipe.encode import DefaultTaskEncoder, TaskEncoder, batch_memory
from fpipe.encode.task_encoder import keeps_collated_tensors
from tests.loader.helpers import build


class _Normalize(DefaultTaskEncoder):
    def encode_batch(self, batch):
        return batch.replace(image=batch.image.float() / 255)


def test_keeps_collated_tensors_only_with_fpipes_own_batch_hooks():
    assert keeps_collated_tensors(TaskEncoder()) and keeps_collated_tensors(DefaultTaskEncoder())
    assert not keeps_collated_tensors(_Normalize())
    assert not keeps_collated_tensors(DefaultTaskEncoder(batch_type=dict))


def test_default_hooks_collate_into_shared_memory_in_a_worker(image_dataset, monkeypatch):
    monkeypatch.setattr(batch_memory, "in_worker_process", lambda: True)  # the materializer
    batch = next(iter(build(image_dataset, encoder=None)))  # runs here, as in a worker
    assert isinstance(batch.image, torch.Tensor) and batch.image.is_shared()
    custom = next(iter(build(image_dataset)))  # RandomCropEncoder: its own batch hook
    assert not custom["image"].is_shared()
