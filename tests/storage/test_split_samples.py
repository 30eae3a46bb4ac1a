"""A split of shards listed in index order, none excluded, is one run of sample indices: the
plan's view takes it as a range (no index array built or hashed) and is the view, config and
snapshot fingerprint of the array of those indices. Other splits keep their arrays."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from fpipe.datasets._views import dataset_view
from fpipe.datasets.options import DatasetOptions
from fpipe.plan import samples
from fpipe.storage import open_dataset
from tests.storage.helpers import prepared_image_caption

SHARDS = ["shard-0000.tar", "shard-0001.tar", "shard-0002.tar"]


@pytest.fixture
def prepared(tmp_path):
    yield from prepared_image_caption(tmp_path, "1,0,0")


def _split(root, parts, exclude=()):
    text = yaml.safe_dump({"split_parts": {"train": parts}, "exclude": list(exclude)})
    (root / ".fpipe" / "split.yaml").write_text(text)


@pytest.mark.parametrize(
    "parts, exclude, expected",
    [
        (SHARDS, [], range(0, 6)),
        (SHARDS[1:], [], range(2, 6)),
        (SHARDS, ["nothing/such"], range(0, 6)),  # excludes nothing
        ([SHARDS[2], SHARDS[0]], [], [4, 5, 0, 1]),
        (SHARDS, ["shard-0001.tar"], [0, 1, 4, 5]),
        (SHARDS, ["shard-0002.tar/0"], [0, 1, 2, 3, 5]),
    ],
)
def test_a_split_is_a_range_where_it_is_one_run(prepared, parts, exclude, expected):
    _split(prepared, parts, exclude)
    ds = open_dataset(prepared, plan_only=True)
    got = ds.split_samples("train")
    assert isinstance(got, range) == isinstance(expected, range)
    assert list(got) == list(expected)
    indices = ds.split_indices("train")  # the public form stays an int64 array
    assert indices.dtype == np.int64 and indices.tolist() == list(expected)
    _, view = dataset_view(prepared, "train", DatasetOptions(), columns=())
    by_array = samples(indices=indices, source_id=view.config.source_id)
    assert view.config == by_array.config  # the snapshot fingerprint as with the array
    pos = np.arange(len(indices), dtype=np.int64)[::-1]
    assert view.gather(0, 1, pos).index.tolist() == indices[pos].tolist()
