"""A Hugging Face ``save_to_disk`` folder through the whole loader: the same batches for any
number of workers (each worker memory-maps the Arrow files itself), exact resume, and a
record-batch cache sized as for Parquet row groups."""

from __future__ import annotations

import pytest

import fpipe
from fpipe.decode.image import ImageDecodeOptions
from fpipe.loader import Topology
from fpipe.storage import prepare_dataset
from tests.optional import skip_unless_installed
from tests.storage.parquet_helpers import (
    assert_same_batches as _same,
)
from tests.storage.parquet_helpers import (
    take_batches as _take,
)
from tests.storage.parquet_helpers import (
    write_saved_dataset,
)

skip_unless_installed("datasets")  # imported in the tests: ~1.6 s at collection otherwise
DECODE = ImageDecodeOptions(target_size=8)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    import datasets

    datasets.disable_progress_bars()
    root = write_saved_dataset(tmp_path_factory.mktemp("saved"))
    prepare_dataset(root)
    return str(root)


def _train(path, **kw):
    args = dict(
        batch_size=4, shuffle_buffer_size=8, max_samples_per_sequence=7, seed=4,
        image_decode=DECODE,
    )  # fmt: skip
    args.update(kw)
    return fpipe.get_train_dataset(path, topology=Topology(0, 1), **args)


def test_workers_and_exact_resume(saved):
    ref = _take(fpipe.get_loader(_train(saved)), 8)
    assert {k.split("/")[0] for b in ref for k in b.__key__} == {"train"}
    assert len({k for b in ref for k in b.__key__}) == 32
    _same(_take(fpipe.get_loader(_train(saved), num_workers=2), 8), ref)
    loader = fpipe.get_loader(_train(saved))
    head = _take(loader, 3)
    resumed = fpipe.get_loader(_train(saved))
    resumed.load_state_dict(loader.state_dict())
    _same(head + _take(resumed, 5), ref)


def test_slices_of_batch_size_decode_each_record_batch_once(tmp_path):
    root = write_saved_dataset(tmp_path / "aligned", train=(14, 14, 14), val=(7,), batch=7)
    prepare_dataset(root)
    ds = _train(str(root), batch_size=3, shuffle_buffer_size=14, num_epochs=1)
    assert ds.materializer.sources[0].open_kwargs["row_group_cache"] == 4  # 14 / 7 + 2
    keys = [k for b in fpipe.get_loader(ds) for k in b.__key__]
    assert sorted(keys) == sorted(
        f"train/data-0000{f}-of-00003/{r}" for f in range(3) for r in range(14)
    )
    assert ds.materializer.dataset(0).reader.decoded_row_groups == 6  # 42 rows, 7 per batch
