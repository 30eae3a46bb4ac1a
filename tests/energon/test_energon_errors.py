"""Energon's error handlers ``log_exception`` and ``reraise_exception`` as ``handler=``: the
first logs the error with the sample's sources and skips it, the second stops the loader."""

from __future__ import annotations

import pytest

from fpipe.core.errors import BadSampleError, MaterializeError
from fpipe.energon import (
    DefaultTaskEncoder,
    SourceInfo,
    WorkerConfig,
    get_loader,
    get_val_dataset,
    log_exception,
    reraise_exception,
)
from tests.distributed.helpers import make_text_dataset

WC = WorkerConfig(rank=0, world_size=1, num_workers=0)


class FailsOn3(DefaultTaskEncoder):
    def encode_sample(self, sample):
        if sample.__key__.endswith("00003"):
            raise ValueError("no good")
        return sample


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    return str(make_text_dataset(tmp_path_factory.mktemp("text"), shards=2, per_shard=10))


def _keys(handler, text):
    ds = get_val_dataset(
        text, split_part="train", batch_size=5, worker_config=WC, task_encoder=FailsOn3(),
        handler=handler,
    )  # fmt: skip
    with get_loader(ds) as loader:
        return [k for batch in loader for k in batch.__key__]


def test_log_exception_prints_the_error_and_sources_and_skips(text, capsys):
    keys = _keys(log_exception, text)
    assert len(keys) == 19 and not any(k.endswith("00003") for k in keys)
    out = capsys.readouterr()
    assert "ValueError: no good" in out.err  # the traceback
    assert "Sources:" in out.out and f" - {text}[3] " in out.out  # dataset[index] shard
    assert "00003" in out.out  # the failed sample, by its key


def test_reraise_exception_stops_the_loader(text):
    with pytest.raises((ValueError, BadSampleError, MaterializeError), match="no good"):
        _keys(reraise_exception, text)


def test_handlers_get_the_failed_samples_sources(text):
    seen = []
    _keys(lambda e, key, sources: seen.append(sources), text)
    (sources,) = seen
    assert isinstance(sources[0], SourceInfo) and sources[0].index == 3
    assert sources[0].dataset_path == text and sources[0].shard_name.endswith(".tar")
