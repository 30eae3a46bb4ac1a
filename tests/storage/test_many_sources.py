"""A blend of many datasets: planning reads each dataset's record and config files, not its
index arrays or shards, and a worker reading every dataset keeps a bounded number of them
(and their file descriptors) open."""

from __future__ import annotations

import builtins
import os
import shutil

import pytest
import yaml

from fpipe import get_train_dataset
from fpipe.materialize import materializer as materializer_mod
from fpipe.storage.prepare import prepare_dataset
from tests.storage.helpers import make_image_caption_dataset

SOURCES = 12


@pytest.fixture(scope="module")
def blend_of_many(tmp_path_factory):
    """``SOURCES`` prepared one-shard datasets (copies of one) and a metadataset blending
    them."""
    root = tmp_path_factory.mktemp("many")
    first = root / "ds00"
    make_image_caption_dataset(first, shards=1, per_shard=2, with_json=False)
    prepare_dataset(first)
    for i in range(1, SOURCES):
        shutil.copytree(first, root / f"ds{i:02d}")  # copy2: shard mtimes kept
    blend = [{"path": f"ds{i:02d}", "weight": 1.0} for i in range(SOURCES)]
    top = root / "mix.yaml"
    top.write_text(yaml.safe_dump({"splits": {"train": {"blend": blend}}}))
    return top


def _open(top):
    return get_train_dataset(
        str(top), batch_size=4, shuffle_buffer_size=8, max_samples_per_sequence=2, seed=3
    )


def test_planning_a_blend_opens_no_index_array_or_shard(blend_of_many, monkeypatch):
    opened: list[str] = []
    real_open = builtins.open

    def watching(file, *args, **kwargs):
        opened.append(os.fspath(file) if isinstance(file, (str, os.PathLike)) else "")
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", watching)
    ds = _open(blend_of_many)
    _, got = ds.plan.next(ds.plan.init(), 1)
    monkeypatch.undo()
    assert len(got[0].refs) == 4
    under = [p for p in opened if str(blend_of_many.parent) in p]
    assert not [p for p in under if p.endswith((".npy", ".tar"))], under
    # per dataset: its info.yaml and dataset.yaml, nothing more
    assert len(under) <= 2 * SOURCES + 1, under


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_a_worker_reading_every_dataset_keeps_few_open(blend_of_many, monkeypatch):
    monkeypatch.setattr(materializer_mod, "MAX_OPEN_DATASETS", 3)
    mat = _open(blend_of_many).materializer.copy()  # what a worker gets: nothing opened
    before = _fds()
    mat.dataset(0).read(0)
    one = _fds() - before  # mapped arrays and shard files of one dataset
    assert one > 0
    for d in range(1, SOURCES):
        assert mat.dataset(d).read(1)
    assert _fds() - before <= 3 * one, (_fds() - before, one)
    assert mat.dataset(0).read(1)  # a closed dataset opens again
