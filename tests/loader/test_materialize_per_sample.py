"""The materializer's per-sample path (run for every sample, so kept cheap) gives what the
general mechanisms give: a sample's ``__sources__`` record, its hook context, the names of a
failing hook."""

import contextvars
import dataclasses

import numpy as np
import pytest

import fpipe
from fpipe.core.errors import ConfigError, MaterializeError
from fpipe.encode.hooks import current_position, sample_rng, using_sample
from fpipe.materialize._source_info import ShardNames
from fpipe.samples import SourceInfo


class _Shard:
    def __init__(self, name):
        self.name = name


class _Record:
    def __init__(self, shards, source="webdataset"):
        self.shards, self.source = shards, source


class _Ds:
    def __init__(self, shards, shard_ids, source="webdataset"):
        self.record = _Record(tuple(_Shard(n) for n in shards), source)
        self._ids = np.asarray(shard_ids, np.int64)

    def column(self, name):
        assert name == "shard_id"
        return self._ids


def test_source_records_equal_those_built_by_their_class():
    # ShardNames builds SourceInfo from its slots: every field must be one it sets
    assert [f.name for f in dataclasses.fields(SourceInfo)] == [
        "dataset_path",
        "index",
        "shard_name",
        "file_names",
    ]
    names = ShardNames(_Ds(["parts/a-0.tar", "parts/a-1.tgz"], [0, 1, 1]), "/data/a")
    raw = {"__key__": "x", "jpg": b"1", "txt": b"2", "json": b"3"}
    shard, inner, sources = names.locate(
        np.int64(2), "parts/a-1/000002", raw, frozenset({"jpg", "txt"})
    )
    expected = SourceInfo(
        dataset_path="/data/a",
        index=2,
        shard_name="parts/a-1.tgz",
        file_names=("000002.jpg", "000002.txt"),
    )
    assert (shard, inner, sources) == ("parts/a-1.tgz", "000002", (expected,))
    (info,) = sources
    assert type(info) is SourceInfo and type(info.index) is int and hash(info) == hash(expected)
    assert repr(info) == repr(expected)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.index = 3  # type: ignore[misc]
    assert not names.energon
    assert ShardNames(_Ds(["p/b-0.tar"], [0], source="energon"), "/b").energon


def test_a_tables_rows_have_no_shard_and_keep_their_key():
    names = ShardNames(_Ds([], []), "/t.jsonl")
    shard, inner, sources = names.locate(4, "t/4", {"caption": b"c", "image": b"i"}, None)
    assert (shard, inner) == ("", "t/4")
    assert sources == (
        SourceInfo(
            dataset_path="/t.jsonl", index=4, shard_name="", file_names=("caption", "image")
        ),
    )


def test_using_sample_sets_the_rng_and_position_and_restores_them():
    outer = contextvars.copy_context()

    def run():
        rng = np.random.default_rng(0)
        with using_sample(rng, 3, 770):
            assert sample_rng() is rng and current_position() == (3, 770)
        with pytest.raises(KeyError), using_sample(rng, 4, 1):
            raise KeyError("x")
        with pytest.raises(ConfigError):
            sample_rng()  # outside: restored, also after an exception
        with pytest.raises(ConfigError):
            current_position()

    outer.run(run)


def test_a_failing_hook_is_named_with_its_key_and_position(tmp_path):
    from tests.loader.helpers import prepared_images

    root = prepared_images(tmp_path / "ds", shards=2, per_shard=4)

    class FailsThird(fpipe.DefaultTaskEncoder):
        def __init__(self):
            super().__init__()
            self.seen = []

        def encode_sample(self, sample):
            self.seen.append(sample.__key__)
            if len(self.seen) == 3:
                raise ValueError("bad crop")
            return sample

    enc = FailsThird()
    ds = fpipe.get_train_dataset(
        root, batch_size=4, shuffle_buffer_size=None, seed=0, task_encoder=enc
    )
    with pytest.raises(MaterializeError) as info:
        next(iter(fpipe.get_loader(ds, num_workers=0)))
    err = info.value
    assert (err.hook, err.keys, err.step, err.position, err.original) == (
        "encode_sample",
        (enc.seen[2],),
        0,
        2,
        "ValueError",
    )
    assert str(err).startswith("encode_sample raised ValueError: bad crop (sample ")
    assert "bad crop" in err.traceback and isinstance(err.__cause__, ValueError)


def test_enter_and_leave_sample_set_and_restore_what_using_sample_does():
    from fpipe.encode.hooks import enter_sample, leave_sample

    def run():
        rng = np.random.default_rng(1)
        outer = enter_sample(rng, 2, 66)
        inner = enter_sample(None, 5, 7)
        assert current_position() == (5, 7)
        leave_sample(inner)
        assert sample_rng() is rng and current_position() == (2, 66)
        leave_sample(outer)
        with pytest.raises(ConfigError):
            sample_rng()
        with pytest.raises(ConfigError):
            current_position()

    contextvars.copy_context().run(run)
