"""Index arrays in the header form ``np.save`` writes are mapped by fpipe's own header match;
they equal what ``np.load`` maps, and every other form is left to numpy."""

from __future__ import annotations

import numpy as np
import pytest

from fpipe.core.errors import ConfigError
from fpipe.storage.read.npy_files import map_plain_npy, plain_npy_header
from fpipe.storage.read.record import ArrayStore
from fpipe.storage.read.tar.shard_table import load_array


@pytest.mark.parametrize(
    "arr",
    [
        np.arange(5, dtype=np.int64),
        np.arange(7, dtype=np.int32),
        np.arange(3, dtype=">i8"),  # another byte order
        np.array([1, 255], dtype=np.uint8),
        np.array([0.5, -1.0], dtype=np.float32),
        np.array([True, False]),
        np.arange(10**6, dtype=np.int64),
    ],
)
def test_a_plain_array_maps_as_numpy_maps_it(tmp_path, arr):
    path = str(tmp_path / "a.npy")
    np.save(path, arr, allow_pickle=False)
    mapped = map_plain_npy(path)
    assert mapped is not None and not mapped.flags.writeable
    assert mapped.dtype == arr.dtype and mapped.shape == arr.shape
    assert np.array_equal(mapped, np.load(path, mmap_mode="r"))
    with open(path, "rb") as f:
        assert plain_npy_header(f)[:2] == (len(arr), arr.dtype)


@pytest.mark.parametrize(
    "arr",
    [
        np.zeros(0, np.int64),  # empty: numpy reads it (an empty file part cannot be mapped)
        np.zeros((2, 3), np.int64),
        np.asfortranarray(np.zeros((2, 3), np.int64)),
        np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")]),
        np.array(["ab", "c"]),
    ],
)
def test_other_forms_are_left_to_numpy(tmp_path, arr):
    path = str(tmp_path / "a.npy")
    np.save(path, arr, allow_pickle=False)
    assert map_plain_npy(path) is None
    assert np.array_equal(load_array(path), arr)


def test_a_version_2_header_is_left_to_numpy(tmp_path):
    path = str(tmp_path / "a.npy")
    with open(path, "wb") as f:
        np.lib.format.write_array(f, np.arange(4), version=(2, 0))
    assert map_plain_npy(path) is None
    assert load_array(path).tolist() == [0, 1, 2, 3]


def test_an_array_cut_short_is_refused_naming_its_file(tmp_path):
    path = tmp_path / "cut.npy"
    np.save(path, np.arange(100, dtype=np.int64))
    path.write_bytes(path.read_bytes()[:-8])  # one element missing
    with pytest.raises(ValueError):
        map_plain_npy(str(path))
    with pytest.raises(ConfigError, match=r"cut\.npy: unreadable index array"):
        ArrayStore(tmp_path)("cut.npy")


def test_an_opened_dataset_maps_each_index_array_once_and_checks_it_on_use(tmp_path, monkeypatch):
    import builtins

    from fpipe.storage import open_dataset
    from fpipe.storage.prepare import prepare_dataset
    from fpipe.storage.read import parsed_files
    from tests.storage.helpers import make_image_caption_dataset

    make_image_caption_dataset(tmp_path, shards=2, per_shard=2, with_json=False)
    prepare_dataset(tmp_path, fields={"image": "jpg", "caption": "txt"})
    parsed_files.clear()
    opened: list[str] = []
    real_open = builtins.open

    def counting_open(file, *args, **kwargs):
        if str(file).endswith(".npy"):
            opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    ds = open_dataset(tmp_path)  # checks the headers of the arrays every read uses
    assert ds.read(3)["txt"] and ds.read(0)["txt"]
    assert opened and len(opened) == len(set(opened)), sorted(opened)  # each opened once
    monkeypatch.setattr(builtins, "open", real_open)
    # an array mapped on open is still checked in full when first used
    offsets = tmp_path / ".fpipe" / "keys.offsets.npy"
    good = np.load(offsets)
    np.save(offsets, good + 1)  # same length and dtype: the header check passes
    parsed_files.clear()
    ds = open_dataset(tmp_path)
    with pytest.raises(ConfigError, match=r"keys\.offsets\.npy: does not start at 0"):
        ds.read(0)
