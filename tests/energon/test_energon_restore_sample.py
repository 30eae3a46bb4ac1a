"""Energon's ``loader.restore_sample(restore_key)`` / ``can_restore_sample()``: a batch built
again from its ``__restore_key__`` equals the batch the loader delivered."""

from __future__ import annotations

import pytest
import torch

from fpipe.core.errors import ConfigError
from fpipe.energon import (
    DefaultTaskEncoder,
    WorkerConfig,
    get_savable_loader,
    get_train_dataset,
    get_val_dataset,
)
from tests.distributed.helpers import make_text_dataset

WC = WorkerConfig(rank=0, world_size=1, num_workers=0)


class Noisy(DefaultTaskEncoder):
    """Depends on the sample's random numbers and on the batch's step."""

    def encode_sample(self, sample, rng):
        return {"key": sample.__key__, "noise": torch.tensor(rng.random()),
                "step": self.current_batch_index, "rk": sample.__restore_key__}  # fmt: skip

    def batch(self, samples):
        return {
            "keys": [s["key"] for s in samples],
            "noise": torch.stack([s["noise"] for s in samples]),
            "step": samples[0]["step"],
            "__restore_key__": tuple(s["rk"] for s in samples),
        }


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    return str(make_text_dataset(tmp_path_factory.mktemp("rs"), shards=2, per_shard=10))


def test_restore_sample_rebuilds_the_delivered_batch(text):
    ds = get_train_dataset(text, batch_size=3, worker_config=WC, task_encoder=Noisy(),
                           shuffle_buffer_size=None, max_samples_per_sequence=None)  # fmt: skip
    loader = get_savable_loader(ds, worker_config=WC)
    assert loader.can_restore_sample()
    it = iter(loader)
    batches = [next(it) for _ in range(9)]  # into the second epoch
    before = loader.state_dict()
    for b in (batches[1], batches[8]):
        again = loader.restore_sample(b["__restore_key__"])
        assert again["keys"] == b["keys"] and again["step"] == b["step"]
        assert torch.equal(again["noise"], b["noise"])  # the same random numbers
    assert loader.state_dict() == before  # the loader's own state is unchanged


def test_restore_sample_of_a_default_batch_and_an_unbatched_sample(text):
    ds = get_val_dataset(text, split_part="train", batch_size=4, worker_config=WC)
    loader = get_savable_loader(ds, worker_config=WC)
    b = list(loader)[2]
    again = loader.restore_sample(b.__restore_key__)
    assert again.__key__ == b.__key__ and again.text == b.text
    one = get_val_dataset(text, split_part="train", batch_size=None, worker_config=WC)
    loader = get_savable_loader(one, worker_config=WC)
    sample = list(loader)[5]
    assert loader.restore_sample(sample.__restore_key__).__key__ == sample.__key__


def test_restore_sample_refuses_unknown_keys(text):
    ds = get_val_dataset(text, split_part="train", batch_size=4, worker_config=WC)
    loader = get_savable_loader(ds, worker_config=WC)
    with pytest.raises(ConfigError, match="not an fpipe restore key"):
        loader.restore_sample(("Webdataset", 3))
    with pytest.raises(ConfigError, match="no batch of this rank's plan"):
        loader.restore_sample(((0, 0, 0), (0, 5, 0)))
