"""A prepared index is not trusted: opening checks its record, array lengths, shard paths and
that the shards are the ones indexed; reads check each sample's entries."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import yaml

from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.storage import open_dataset, prepare_dataset
from tests.storage.helpers import make_image_caption_dataset, write_tar


def _prepared(tmp_path, shards=3, per_shard=4, split=None):
    make_image_caption_dataset(tmp_path, shards=shards, per_shard=per_shard)
    # the flat layout (format 2), whose arrays these tests edit; tests/storage/
    # test_compact_index.py edits the compact one
    prepare_dataset(
        tmp_path, fields={"image": "jpg", "caption": "txt"}, split=split, compact_index=False
    )
    return tmp_path / ".fpipe"


def _edit_info(index, fn):
    path = index / "info.yaml"
    info = yaml.safe_load(path.read_text())
    fn(info)
    path.write_text(yaml.safe_dump(info))


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda i: i.update(num_samples="many"), "info.yaml"),
        (lambda i: i.update(num_samples=1_000_000), "num_samples is 1000000"),
        (lambda i: i.update(num_samples=-1), "negative"),
        (lambda i: i["shards"][0].update(samples="x"), "info.yaml"),
        (lambda i: i["shards"][0].update(samples=-4), "negative"),
        (lambda i: i.update(shards="shard-0000.tar"), "info.yaml"),
        (lambda i: i["shards"][0].update(name="../outside.tar"), "leaves the dataset folder"),
        (lambda i: i["shards"][0].update(name="/etc/passwd"), "leaves the dataset folder"),
        (lambda i: i.update(version="one"), "info.yaml: bad index info: version must be an"),
        (lambda i: i.update(version=True), "version must be an integer from 1 to 4, got True"),
        (lambda i: i.update(version=0), "version must be an integer from 1 to 4, got 0"),
        (lambda i: i.update(version=5), "index version 5 is newer"),
        (
            lambda i: i.update(members=["../../x", *i["members"][1:]]),
            "info.yaml: bad index info: members entry '../../x' is not a member extension",
        ),
        (lambda i: i.update(members=["jpg", "a\\b"]), r"members entry 'a\\\\b'"),
        (lambda i: i.update(members=["", "txt"]), "members entry ''"),
        (lambda i: i.update(members="jpg"), "members must be a list"),
    ],
)
def test_bad_info_yaml_is_a_config_error(tmp_path, edit, match):
    index = _prepared(tmp_path)
    _edit_info(index, edit)
    with pytest.raises(ConfigError, match=match):
        open_dataset(tmp_path)


def test_shard_linking_out_of_the_folder_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    data = tmp_path / "data"
    data.mkdir()
    make_image_caption_dataset(outside, shards=1, per_shard=2)
    make_image_caption_dataset(data, shards=1, per_shard=2)
    prepare_dataset(data)
    # swapped for a link after prepare: opening refuses it
    os.remove(data / "shard-0000.tar")
    os.symlink(outside / "shard-0000.tar", data / "shard-0000.tar")
    with pytest.raises(ConfigError, match="outside the dataset folder"):
        open_dataset(data, shard_check="off")
    # prepare refuses it too (tests/storage/test_containment.py: never opened)
    with pytest.raises(ConfigError, match="outside the dataset folder"):
        prepare_dataset(data)


def test_short_arrays_are_refused_on_open(tmp_path):
    index = _prepared(tmp_path)
    np.save(index / "shard_id.npy", np.zeros(3, np.int32))  # 3 of 12
    with pytest.raises(ConfigError, match=r"shard_id.npy: shape \(3,\)"):
        open_dataset(tmp_path)


@pytest.mark.parametrize("name", ["size", "start"])
def test_wrong_member_array_is_refused_on_open(tmp_path, name):
    index = _prepared(tmp_path)
    arr = np.load(index / "members" / f"{name}.npy")
    np.save(index / "members" / f"{name}.npy", arr.astype(np.float32))
    with pytest.raises(ConfigError, match=f"members/{name}.npy"):
        open_dataset(tmp_path)


def test_member_table_not_ending_at_its_length_is_refused(tmp_path):
    index = _prepared(tmp_path)
    start = np.load(index / "members" / "start.npy")
    start[-1] -= 1
    np.save(index / "members" / "start.npy", start)
    with pytest.raises(ConfigError, match="ends at 35, not at the 36 members"):
        open_dataset(tmp_path).read(0)


# (member array, new value of sample 5's first member row); "rows" edits start[6]
_BAD_MEMBER = {
    "negative size": ("size", -7),
    "past the shard": ("offset", 10**9),
    "negative offset": ("offset", -1),
    "unknown extension": ("ext", 99),
    "negative extension id": ("ext", -1),
    "rows backwards": ("start", None),
}


def corrupt_entry(index, what: str) -> None:
    """Spoil sample 5's entry in the index folder ``index`` (``what``: a key of
    ``_BAD_MEMBER`` or ``"key offsets"``)."""
    if what == "key offsets":
        off = np.load(index / "keys.offsets.npy")
        off[5] = off[7]  # key 5 ends before it starts
        np.save(index / "keys.offsets.npy", off)
        return
    name, value = _BAD_MEMBER[what]
    row = int(np.load(index / "members" / "start.npy")[5])
    arr = np.load(index / "members" / f"{name}.npy")
    if name == "start":
        arr[6] = arr[5] - 1  # sample 5's rows end before they start
    else:
        arr[row] = value
    np.save(index / "members" / f"{name}.npy", arr)


@pytest.mark.parametrize("what", [*_BAD_MEMBER, "key offsets"])
def test_bad_entries_are_bad_samples_not_wrong_bytes(tmp_path, what):
    index = _prepared(tmp_path)
    corrupt_entry(index, what)
    ds = open_dataset(tmp_path)
    if what == "key offsets":  # key 4 now runs into key 5: its member name is not in the shard
        with pytest.raises(BadSampleError, match="index has member '000004000005"):
            ds.read(4)
    else:
        ds.read(4)
    with pytest.raises(BadSampleError, match="index is corrupt"):
        ds.read(5) if what != "key offsets" else ds.key(5)


def test_rewritten_or_swapped_shard_is_refused_on_open(tmp_path):
    _prepared(tmp_path)
    a, b = tmp_path / "shard-0000.tar", tmp_path / "shard-0001.tar"
    ds = open_dataset(tmp_path)
    assert ds.key(0) == "shard-0000/000000"
    # swap two shards of the same size: keys would be delivered with other samples' bytes
    tmp = tmp_path / "tmp.tar"
    os.replace(a, tmp), os.replace(b, a), os.replace(tmp, b)
    assert a.stat().st_size == b.stat().st_size
    with pytest.raises(ConfigError, match="re-run `fpipe prepare"):
        open_dataset(tmp_path)
    assert len(open_dataset(tmp_path, shard_check="off")) == 12


def test_shard_rewritten_with_the_same_length_is_refused(tmp_path):
    samples = [(f"{i:04d}", {"txt": f"caption {i}".encode()}) for i in range(6)]
    write_tar(tmp_path / "s.tar", samples)
    prepare_dataset(tmp_path)
    time.sleep(0.01)
    write_tar(tmp_path / "s.tar", samples[::-1])  # same length, samples reordered
    with pytest.raises(ConfigError, match="modified since it was indexed"):
        open_dataset(tmp_path)
    assert open_dataset(tmp_path, shard_check="size").key(0) == "s/0000"


def test_unknown_split_key_is_refused_naming_file_and_key(tmp_path):
    _prepared(tmp_path, split="2,1,0")
    split = tmp_path / ".fpipe" / "split.yaml"
    obj = yaml.safe_load(split.read_text())
    obj["excludes"] = ["shard-0001.tar"]  # typo of exclude
    split.write_text(yaml.safe_dump(obj))
    with pytest.raises(ConfigError, match=r"split.yaml: unknown key 'excludes'"):
        open_dataset(tmp_path)


@pytest.mark.parametrize("entry", ["shard-0001.tar/4", "shard-0001.tar/99"])
def test_exclude_past_the_end_of_its_shard_is_refused(tmp_path, entry):
    _prepared(tmp_path, split="2,1,0")
    split = tmp_path / ".fpipe" / "split.yaml"
    obj = yaml.safe_load(split.read_text())
    obj["exclude"] = ["shard-0001.tar/3", entry]  # 4 samples: 0..3
    split.write_text(yaml.safe_dump(obj))
    ds = open_dataset(tmp_path)
    with pytest.raises(
        ConfigError,
        match=rf"split.yaml: exclude entry '{entry}' names sample \d+ of shard 'shard-0001.tar', "
        r"which holds 4 samples in the index \(0..3\)",
    ):
        ds.split_indices("train")


def test_exclude_by_index_inside_its_shard_still_excludes(tmp_path):
    _prepared(tmp_path, split="2,1,0")
    split = tmp_path / ".fpipe" / "split.yaml"
    obj = yaml.safe_load(split.read_text())
    obj["exclude"] = ["shard-0000.tar/3"]
    split.write_text(yaml.safe_dump(obj))
    assert 3 not in open_dataset(tmp_path).split_indices("train").tolist()


def test_opening_a_large_index_is_cheap(tmp_path):
    """Opening reads info.yaml and a few .npy headers, whatever the number of samples."""
    index = _prepared(tmp_path, shards=1, per_shard=2)
    n = 50_000_000  # arrays written sparse: only their headers are read on open
    m = 2 * n
    for name, length, dtype in (
        ("shard_id.npy", n, np.int32),
        ("keys.offsets.npy", n + 1, np.int64),
        ("members/start.npy", n + 1, np.int64),
        ("members/ext.npy", m, np.int32),
        ("members/offset.npy", m, np.int64),
        ("members/size.npy", m, np.int64),
    ):
        np.lib.format.open_memmap(index / name, mode="w+", dtype=dtype, shape=(length,)).flush()
    _edit_info(
        index,
        lambda i: (
            i.update(num_samples=n, num_members=m),
            i["shards"][0].update(samples=n),
        ),
    )
    t0 = time.perf_counter()
    ds = open_dataset(tmp_path)
    assert len(ds) == n and time.perf_counter() - t0 < 0.5


def test_an_index_array_loaded_lazily_is_checked_like_one_opened(tmp_path):
    from fpipe.storage.read.record import ArrayStore

    np.save(tmp_path / "ok.npy", np.arange(3))
    (tmp_path / "bad.npy").write_bytes(b"not an npy file")
    arrays = ArrayStore(tmp_path)
    assert arrays("ok.npy").tolist() == [0, 1, 2]
    assert arrays.optional("gone.npy") is None  # arrays older indexes lack: told apart
    with pytest.raises(ConfigError, match=r"gone\.npy: index array missing; re-run"):
        arrays("gone.npy")
    with pytest.raises(ConfigError, match=r"bad\.npy: unreadable index array \(.*\); re-run"):
        arrays("bad.npy")
